# Device call 2 (H200): the partial dq's scale, four ways, through the public API (forward, forward + backward) at
# 32K, HQ = 32, h = 4, 8 and 1: A the landed kernels (each row's largest magnitude), B a bound per row known before
# the dot, C that bound's largest over a step's rows (one power a step), F no scale (float16 as is: the floor).
# Source trees in .carry/variants/<name>/src (not committed); A runs first and last (drift).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
T0=$SECONDS
for v in A B C F A; do
  PYTHONPATH=$PWD/.carry/variants/$v/src:$PWD:/tmp/site timeout 150 python3 -m bench.train.small_groups --contenders ours-api --grid 32768:32:4,32768:32:8,32768:32:32 --rep-ms 100 --csv $OUT/variant-$v-$SECONDS.csv > $OUT/variant-$v-$SECONDS.log 2>&1
  echo "variant $v rc=$? [$((SECONDS - T0))s]"; grep -E "ours" $OUT/variant-$v-*.log | tail -3
done
