# Device call 1 (H200): the key-major kernels against the memory ceiling of their own access pattern (h = 8, 4, 1
# at 32K), then Nsight Compute on the h = 8 partial kernel and backward kernel (one launch each).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
timeout 400 python3 -m bench.probes.keymajor_ceiling --T 32768 --HQ 32 --H 4,8,32 --json $OUT/ceiling.json > $OUT/ceiling.log 2>&1
echo "ceiling rc=$? [$((SECONDS - T0))s]"; grep -E "^\| " $OUT/ceiling.log | cut -c1-220
cat > /tmp/ncu_h8.py <<'PY'
import torch
from bench.probes.keymajor_backward import problem_and_plans
from nsa_triton_sel.kernels import launch
h, q, k, v, blocks, ranges, sc, token, keyed = problem_and_plans(32768, 32, 4)
for _ in range(3):
    out, lse = launch.forward(keyed, q, k, v, blocks, None, scale=sc, block_size=64)
go = torch.randn_like(out)
for _ in range(3):
    launch.backward(keyed, q, k, v, ranges, out, lse, go, None, scale=sc)
torch.cuda.synchronize()
PY
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
for K in sel_fwd_keymajor_kernel sel_bwd_keymajor_kernel; do
  [ -n "$NCU" ] || break
  timeout $((560 - SECONDS + T0)) $NCU --kernel-name regex:"^$K\$" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section ComputeWorkloadAnalysis --section WarpStateStats --section SchedulerStats --section Occupancy \
    --section MemoryWorkloadAnalysis --section LaunchStats python3 /tmp/ncu_h8.py > $OUT/ncu-$K-h8.log 2>&1
  echo "ncu $K rc=$? [$((SECONDS - T0))s]"
  grep -E "Duration|Memory Throughput|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Eligible Warps|Issued Warp|Registers Per|Achieved Occupancy|Theoretical Occupancy|Block Limit" $OUT/ncu-$K-h8.log | head -20
done
