# Device call 8 (H200): the Gluon partial kernel with the shipped kernel's isolating walk (a value tile with a
# non-finite value), on finite values (the time of the common walk) and with NaN / +inf / a row of -inf in the first
# KV head's values (where NaN lands, against the shipped kernel), h = 8 and 1 at 32K.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
for NF in "" --nonfinite; do
  timeout 250 python3 -m bench.probes.keymajor_ceiling --T 32768 --HQ 32 --H 4,32 --whole $NF \
      --gluon ws1-nb3-st-r128,ws3-nb5-st --json $OUT/gluon-7$NF.json > $OUT/gluon-7$NF.log 2>&1
  echo "gluon $NF rc=$? [$((SECONDS - T0))s]"
  grep -E "^\| " $OUT/gluon-7$NF.log | grep -E "shipped partial|whole|gluon|Error" | cut -c1-200
done
