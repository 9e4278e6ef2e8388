# Device call 5 (H200): the short cells of call 3's path grid (T = 4K and 8K, random selections), where the
# key-major times moved both ways against the previous grid: the landed d870b95 sources (A) and the committed ones
# (head), in alternating order, twice each.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
for run in A-1 head-1 A-2 head-2; do
  src=$PWD/src; [ "${run%-*}" = A ] && src=$PWD/.carry/base-landed/src
  [ $((SECONDS - T0)) -gt 330 ] && { echo "$run skipped (time)"; continue; }
  PYTHONPATH=$src:$PWD:/tmp/site timeout 100 python3 -m bench.probes.path_grid --sel random --T 4096,8192 --h 1,4,8 > $OUT/grid-$run.log 2>&1
  echo "$run rc=$? [$((SECONDS - T0))s]"
done
grep -H "^| random" $OUT/grid-*.log | sed 's#.*/grid-##' | cut -c1-120
