# Device call 3 (H200): the warp-specialised Gluon walk (4 gather warps, 1 or 2 MMA partitions, mbarriers) against
# g-nb4 and the shipped kernel; a 30 s smoke first (a deadlock ends at the timeout).
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
timeout 60 python3 -m bench.probes.dkdv_gluon --T 8192 --sel random --only ws2-nb4 --rep-ms 20 2>&1 | tee $OUT/ws-smoke.log
echo "=== [$((SECONDS - T0))s] rc=$?"
timeout 60 python3 -m bench.probes.dkdv_gluon --T 8192 --sel random --only ws1-nb4 --rep-ms 20 2>&1 | tee -a $OUT/ws-smoke.log
echo "=== [$((SECONDS - T0))s] grid"
timeout 240 python3 -m bench.probes.dkdv_gluon --T 32768,8192,65536 --sel random,local --only g-nb4,ws1-nb4,ws2-nb4,ws2-nb6,ws2-nb8 --json $OUT/ws-1.json 2>&1 | tee $OUT/ws-1.log
echo "=== [$((SECONDS - T0))s] done"
