# Device call 1 (H200): the partials scaled by bounds known before each dot (the tile's largest value for an
# output, a per-row bound for a dq): the key-major GPU tests, the partials probe (float16, merges at 1-3 stages),
# then the planner's path grid (random and local selections) for data/paths.json.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
timeout 120 python3 -m pytest -p no:cacheprovider -q -m gpu -n 8 tests/library/kernels/test_keymajor_gpu.py > $OUT/keymajor-gpu-tests.log 2>&1
echo "tests rc=$? [$((SECONDS - T0))s]"; tail -2 $OUT/keymajor-gpu-tests.log
timeout 150 python3 -m bench.probes.keymajor_partials --T 32768 --HQ 32 --H 4,8 --widths fp16 --merge-stages 1,2,3 --json $OUT/partials.json > $OUT/partials.log 2>&1
echo "probe rc=$? [$((SECONDS - T0))s]"; grep -E "^\||^h=|merge num_stages" $OUT/partials.log
timeout 200 python3 -m bench.probes.path_grid --sel random --json $OUT/grid_random.json > $OUT/grid_random.log 2>&1
echo "grid random rc=$? [$((SECONDS - T0))s]"; grep -E "\| (6|8) \|" $OUT/grid_random.log
timeout $((585 - SECONDS + T0)) python3 -m bench.probes.path_grid --sel local --T 8192,32768,65536 --json $OUT/grid_local.json > $OUT/grid_local.log 2>&1
echo "grid local rc=$? [$((SECONDS - T0))s]"; tail -2 $OUT/grid_local.log
