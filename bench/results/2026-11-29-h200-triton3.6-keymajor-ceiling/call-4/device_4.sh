# Device call 4 (H200): the Gluon partial kernel with coalesced stores, the next score MMA ahead, three MMA
# partitions, two programs an SM (h = 8 and 4 at 32K).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
timeout 400 python3 -m bench.probes.keymajor_ceiling --T 32768 --HQ 32 --H 4,8 \
    --gluon ws2-nb4,ws2-nb4-st,ws2-nb4-ov,ws2-nb4-st-ov,ws3-nb5-st,ws3-nb5-st-ov,ws1-nb4-st-ov,ws1-nb4-st-r128,ws1-nb3-st-ov-r128 --json $OUT/gluon-2.json > $OUT/gluon-2.log 2>&1
echo "gluon rc=$? [$((SECONDS - T0))s]"; grep -E "^\| " $OUT/gluon-2.log | grep -E "shipped partial|gluon|Error" | cut -c1-260
