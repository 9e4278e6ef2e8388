# Device call 5 (H200): the Gluon partial kernel's slots, partitions and registers around the best of call 4, and
# the whole key-major forward (every pass) with the shipped and the Gluon partial kernel (h = 8, 4, 1 at 32K).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
timeout 500 python3 -m bench.probes.keymajor_ceiling --T 32768 --HQ 32 --H 4,8,32 --whole \
    --gluon ws3-nb5-st,ws3-nb4-st,ws3-nb6-st,ws2-nb4-st,ws2-nb4-st-r128,ws1-nb4-st-r128,ws1-nb3-st-r128 \
    --json $OUT/gluon-3.json > $OUT/gluon-3.log 2>&1
echo "gluon rc=$? [$((SECONDS - T0))s]"; grep -E "^\| " $OUT/gluon-3.log | grep -E "shipped|gluon|Error" | grep -v merge | cut -c1-260
