# Device call 7 (H200): the probes as committed (the Gluon kernel on the dk/dv probe's chunk and key-tile helpers, the
# whole forward through keymajor_partials.forward_keymajor): the best variant again at h = 8 and 1, bit for bit.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
timeout 300 python3 -m bench.probes.keymajor_ceiling --T 32768 --HQ 32 --H 4,32 --whole \
    --gluon ws1-nb3-st-r128,ws3-nb5-st --json $OUT/gluon-6.json > $OUT/gluon-6.log 2>&1
echo "gluon rc=$? [$((SECONDS - T0))s]"; grep -E "^\| " $OUT/gluon-6.log | grep -E "shipped|gluon|Error" | grep -v merge | cut -c1-200
