# Device call 2 (H200): where the Gluon walk's time goes: the walk without gathers, without the softmax, with
# neither (each also with every MMA waited for at once), at 32K; Nsight Compute on g-nb4 and the shipped kernel.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
timeout 200 python3 -m bench.probes.dkdv_gluon --T 32768 --sel random,local --only g-nb4,g-nb4-serial,g-nb4-nogather,g-nb4-nosoftmax,g-nb4-mma-only,g-nb4-serial-mma-only --json $OUT/gluon-2.json 2>&1 | tee $OUT/gluon-2.log
echo "=== [$((SECONDS - T0))s] ncu"
S="--section SpeedOfLight --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --section InstructionStats"
timeout 150 ncu --kernel-name regex:dkdv_gluon_kernel --launch-skip 2 --launch-count 1 $S python3 -m bench.probes.dkdv_gluon --T 32768 --sel random --only g-nb4 --rep-ms 5 > $OUT/ncu-gluon-nb4-32k-random.log 2>&1
echo "=== [$((SECONDS - T0))s] ncu shipped"
timeout 150 ncu --kernel-name regex:sel_bwd_dkdv_kernel --launch-skip 2 --launch-count 1 $S python3 -m bench.probes.dkdv_gluon --T 32768 --sel random --only g-nb4 --rep-ms 5 > $OUT/ncu-shipped-32k-random.log 2>&1
echo "=== [$((SECONDS - T0))s] done"
grep -E "Duration|Eligible Warps|Issued Warp|No Eligible|Stall|Throughput|Pipe|Shared|Registers|Achieved Occ|One or More" $OUT/ncu-gluon-nb4-32k-random.log | head -60
