# Device call 2 (H200): the key-major kernels' launch sweep beside their ceilings (h = 8 and 4 at 32K): the partial
# kernel over pairs x warps x stages, both merges over pairs x warps, each checked bit for bit with the shipped launch.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
timeout 570 python3 -m bench.probes.keymajor_ceiling --T 32768 --HQ 32 --H 4,8 --tune --json $OUT/tune.json > $OUT/tune.log 2>&1
echo "tune rc=$? [$((SECONDS - T0))s]"; grep -E "^\| " $OUT/tune.log | grep -v "ceiling " | cut -c1-200
