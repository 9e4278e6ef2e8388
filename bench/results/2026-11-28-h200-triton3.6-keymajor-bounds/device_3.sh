# Device call 3 (H200): the partial dq's scale again: A the landed kernels, C one power a step (call 2), G one power
# a key tile, from the call's largest |dO|_1 and |delta| (taken by the delta pass with an atomic max), F no scale;
# C and G twice.  Source trees in .carry/variants/<name>/src (not committed).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
T0=$SECONDS
for v in A C G F C G; do
  PYTHONPATH=$PWD/.carry/variants/$v/src:$PWD:/tmp/site timeout 150 python3 -m bench.train.small_groups --contenders ours-api --grid 32768:32:4,32768:32:8,32768:32:32 --rep-ms 100 > $OUT/v$v-$((SECONDS - T0)).log 2>&1
  echo "variant $v rc=$? [$((SECONDS - T0))s]"
done
grep -H ours $OUT/*.log | sed 's#.*/##'
