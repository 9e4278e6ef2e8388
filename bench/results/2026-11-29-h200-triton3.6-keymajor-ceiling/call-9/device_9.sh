# Device call 9 (H200): as call 8 with the marks of a non-finite value tile written only where the tile has one,
# and the NaN counts of the shipped results printed (h = 8 and 1 at 32K).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
for NF in "" --nonfinite; do
  timeout 250 python3 -m bench.probes.keymajor_ceiling --T 32768 --HQ 32 --H 4,32 --whole $NF \
      --gluon ws1-nb3-st-r128,ws3-nb5-st --json $OUT/gluon-8$NF.json > $OUT/gluon-8$NF.log 2>&1
  echo "gluon $NF rc=$? [$((SECONDS - T0))s]"
  grep -E "^\| " $OUT/gluon-8$NF.log | grep -E "shipped partial|whole|gluon|Error" | cut -c1-200
done
