# Device call 6 (H200): the best Gluon partial kernels at the other small groups (h = 2, 3, 6 at 32K; h = 1 at 64K),
# whole forward included; Nsight Compute on the best one at h = 8 (one launch).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
timeout 250 python3 -m bench.probes.keymajor_ceiling --T 32768 --HQ 32 --H 16,10,5 --whole \
    --gluon ws1-nb3-st-r128,ws1-nb4-st-r128 --json $OUT/gluon-4.json > $OUT/gluon-4.log 2>&1
echo "gluon 32K rc=$? [$((SECONDS - T0))s]"
timeout 150 python3 -m bench.probes.keymajor_ceiling --T 65536 --HQ 16 --H 16 --whole \
    --gluon ws1-nb3-st-r128,ws1-nb4-st-r128 --json $OUT/gluon-5.json > $OUT/gluon-5.log 2>&1
echo "gluon 64K rc=$? [$((SECONDS - T0))s]"
grep -hE "^\| " $OUT/gluon-4.log $OUT/gluon-5.log | grep -E "shipped|gluon|Error" | grep -v merge | cut -c1-200
cat > /tmp/ncu_gluon.py <<'PY'
from bench.probes.keymajor_backward import problem_and_plans
from bench.probes import keymajor_gluon as G
import torch
h, q, k, v, blocks, ranges, sc, token, keyed = problem_and_plans(32768, 32, 4)
var = G.chosen(["ws1-nb3-st-r128"])[0]
for _ in range(3):
    G.forward(keyed, q, k, v, ranges, sc, var)
torch.cuda.synchronize()
PY
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu 2>/dev/null | head -1)
timeout $((560 - SECONDS + T0)) $NCU --kernel-name regex:"^fwd_ws_kernel\$" --launch-skip 2 --launch-count 1 --section SpeedOfLight \
    --section WarpStateStats --section SchedulerStats --section Occupancy --section MemoryWorkloadAnalysis \
    --section LaunchStats python3 /tmp/ncu_gluon.py > $OUT/ncu-fwd_ws_kernel-h8.log 2>&1
echo "ncu rc=$? [$((SECONDS - T0))s]"
grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Eligible Warps|Issued Warp|Registers Per|Achieved Occupancy|Block Limit (Reg|Shared)" $OUT/ncu-fwd_ws_kernel-h8.log | head -12
