# Device call 3 (H200): the kernels as committed (the forward kernel on 5 stages, the merges with two partials in
# flight per row, 32 pairs a program): the key-major GPU tests, the partials probe (time per kernel), the planner's
# path grid (random and local selections) for data/paths.json.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
timeout 120 python3 -m pytest -p no:cacheprovider -q -m gpu -n 8 tests/library/kernels/test_keymajor_gpu.py > $OUT/keymajor-gpu-tests.log 2>&1
echo "tests rc=$? [$((SECONDS - T0))s]"; tail -2 $OUT/keymajor-gpu-tests.log
timeout 60 python3 -m bench.probes.keymajor_partials --T 32768 --HQ 32 --H 4,8 --widths fp16 --json $OUT/partials.json > $OUT/partials.log 2>&1
echo "probe rc=$? [$((SECONDS - T0))s]"; grep -E "^\| fp16|kernels:" $OUT/partials.log | cut -c1-200
timeout 230 python3 -m bench.probes.path_grid --sel random --json $OUT/grid_random.json > $OUT/grid_random.log 2>&1
echo "grid random rc=$? [$((SECONDS - T0))s]"; grep -E "\| (6|8) \|" $OUT/grid_random.log
timeout $((590 - SECONDS + T0)) python3 -m bench.probes.path_grid --sel local --T 8192,32768,65536 --json $OUT/grid_local.json > $OUT/grid_local.log 2>&1
echo "grid local rc=$? [$((SECONDS - T0))s]"; tail -2 $OUT/grid_local.log
