# Device call 2 (H200): what limits the dk/dv kernel: its MMA chain without gathers, the best walk variants twice
# (order reversed), an Nsight Compute profile of the shipped kernel if the machine has ncu, and where a training
# step spends its GPU time.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
A=hp-pf1-s3,hp-pf1-s3-o1,hp-pf1-s4-o1,mma-only-s3,mma-only-s3-o1,mma-only-s1-o1
echo "=== variants, run 1"
timeout 200 python3 -m bench.probes.dkdv_variants --T 8192,32768,65536 --sel random,local --only $A --json $OUT/variants-1.json 2>&1 | tee $OUT/variants-1.log
echo "=== [$((SECONDS - T0))s] profile of a training step"
for sel in random local; do
  timeout 60 python3 -m bench.train.profile_train --T 32768 --sel $sel 2>&1 | grep -v Warn | head -14 | tee $OUT/profile-32k-$sel.log
done
echo "=== [$((SECONDS - T0))s] ncu"
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: ${NCU:-none}"
if [ -n "$NCU" ]; then
  cat > /tmp/one_dkdv.py <<'PY'
import torch
from bench.probes.dkdv_ceiling import dkdv_inputs
x = dkdv_inputs(32768, "random")
dk, dv = torch.empty_like(x.k), torch.empty_like(x.v)
for _ in range(3):
    x.dkdv(dk, dv)
torch.cuda.synchronize()
PY
  timeout 150 $NCU --kernel-name regex:sel_bwd_dkdv_kernel --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section MemoryWorkloadAnalysis --section ComputeWorkloadAnalysis --section LaunchStats \
    python3 /tmp/one_dkdv.py > $OUT/ncu-dkdv-32k-random.log 2>&1
  echo "rc=$?"; grep -E "Throughput|Stall|Warp Cycles|Issued|Occupancy|Registers|Eligible|Pipe" $OUT/ncu-dkdv-32k-random.log | head -60
fi
echo "=== [$((SECONDS - T0))s] variants, run 2 (reversed)"
B=mma-only-s1-o1,mma-only-s3-o1,mma-only-s3,hp-pf1-s4-o1,hp-pf1-s3-o1,hp-pf1-s3
timeout $((560 - SECONDS + T0)) python3 -m bench.probes.dkdv_variants --T 8192,32768,65536 --sel random,local --only $B --json $OUT/variants-2.json 2>&1 | tee $OUT/variants-2.log
echo "=== [$((SECONDS - T0))s] done"
