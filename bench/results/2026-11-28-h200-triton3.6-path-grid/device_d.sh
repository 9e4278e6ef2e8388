# Device call D (H200): the planner's path grid (key-major against token-major), random then local selections.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
timeout 330 python3 -m bench.probes.path_grid --sel random --json $OUT/grid_random.json > $OUT/grid_random.log 2>&1
echo "rc=$? [$((SECONDS - T0))s]"; tail -3 $OUT/grid_random.log
timeout $((560 - SECONDS + T0)) python3 -m bench.probes.path_grid --sel local --T 8192,32768,65536 --json $OUT/grid_local.json > $OUT/grid_local.log 2>&1
echo "rc=$? [$((SECONDS - T0))s]"; tail -3 $OUT/grid_local.log
