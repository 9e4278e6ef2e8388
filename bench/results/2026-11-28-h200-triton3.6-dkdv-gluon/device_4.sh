# Device call 4 (H200): the warp-specialised walk with enough slots (NB >= 3 NC), and with one MMA partition at
# 240 registers (one program an SM), against g-nb4 and the shipped kernel; smoke runs first (a deadlock ends at
# the timeout).
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
for v in ws2-nb6 ws1-nb4-r240; do
  timeout 45 python3 -m bench.probes.dkdv_gluon --T 8192 --sel random --only $v --rep-ms 20 2>&1 | tee -a $OUT/ws-smoke-2.log
  echo "=== [$((SECONDS - T0))s] $v rc=$?"
done
L=g-nb4,ws1-nb4-r240,ws1-nb6-r240
grep -q "ws2-nb6 .*bitwise" $OUT/ws-smoke-2.log && L=$L,ws2-nb6
timeout 200 python3 -m bench.probes.dkdv_gluon --T 32768,8192,65536 --sel random,local --only $L --json $OUT/ws-2.json 2>&1 | tee $OUT/ws-2.log
echo "=== [$((SECONDS - T0))s] done"
