# Device call 6 (H200): the probe as committed (helpers shared by both kernels, the command line shared with
# dkdv_variants): the best walks and the warp-specialised ones again, bit for bit against the shipped kernel.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
timeout 200 python3 -m bench.probes.dkdv_gluon --T 32768,8192,65536 --sel random,local --only g-nb4,g-nb4-fast-i32,g-nb3-fast-i32,ws1-nb4-r240,ws2-nb6 --json $OUT/final.json 2>&1 | tee $OUT/final.log
echo "=== [$((SECONDS - T0))s] done"
