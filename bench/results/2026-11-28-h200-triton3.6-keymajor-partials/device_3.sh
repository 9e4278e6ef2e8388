# Device call 3 (H200): the scale folded into the existing multiplies (a plain |max| where no value can be
# non-finite): the partials probe with the merges at 1-3 stages, then the planner's path grid again.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
timeout 200 python3 -m bench.probes.keymajor_partials --T 32768 --HQ 32 --H 4,8 --widths fp32,fp16,bf16 --merge-stages 1,2,3 --json $OUT/partials-3.json > $OUT/partials-3.log 2>&1
echo "probe rc=$? [$((SECONDS - T0))s]"; grep -E "^\||^h=|merge num_stages" $OUT/partials-3.log
timeout 200 python3 -m bench.probes.path_grid --sel random --json $OUT/grid_random.json > $OUT/grid_random.log 2>&1
echo "grid random rc=$? [$((SECONDS - T0))s]"; grep -E "\| (6|8) \|" $OUT/grid_random.log
timeout $((575 - SECONDS + T0)) python3 -m bench.probes.path_grid --sel local --T 8192,32768,65536 --json $OUT/grid_local.json > $OUT/grid_local.log 2>&1
echo "grid local rc=$? [$((SECONDS - T0))s]"; tail -2 $OUT/grid_local.log
