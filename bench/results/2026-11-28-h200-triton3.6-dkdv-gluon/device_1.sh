# Device call 1 (H200): the Gluon dk/dv walk (MMA waits by hand) against the shipped kernel and the gather ceiling.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
timeout 200 python3 -m bench.probes.dkdv_gluon --T 8192 --sel random --only g-nb4 --rep-ms 50 2>&1 | tee $OUT/gluon-smoke.log
echo "=== [$((SECONDS - T0))s] all variants"
timeout 300 python3 -m bench.probes.dkdv_gluon --T 32768,8192,65536 --sel random,local --only g-nb3,g-nb4,g-nb5,g-nb4-serial --json $OUT/gluon-1.json 2>&1 | tee $OUT/gluon-1.log
echo "=== [$((SECONDS - T0))s] done"
