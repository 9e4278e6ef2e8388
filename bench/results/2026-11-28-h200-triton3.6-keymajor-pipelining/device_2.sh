# Device call 2 (H200): A the landed kernels; F5 the forward kernel on 5 stages; P the merges with the next
# partial's loads issued before this one's arithmetic (two in flight per row), 64 pairs on 4 warps; P32 32 pairs
# a program; P8w 8 warps; W8 the forward kernel on 8 warps.  Public API, small-group rows h = 8, 4, 1; then the
# partials probe (time per kernel) under A and F5P.  Source trees in .carry/variants/<name>/src (not committed).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
for v in A F5 F5P F5P32 F5P8w F5W8P A F5P; do
  [ $((SECONDS - T0)) -gt 420 ] && { echo "variant $v skipped (time)"; continue; }
  PYTHONPATH=$PWD/.carry/variants/$v/src:$PWD:/tmp/site timeout 80 python3 -m bench.train.small_groups --contenders ours-api --grid 32768:32:4,32768:32:8,32768:32:32 --rep-ms 100 >> $OUT/v$v.log 2>&1
  echo "variant $v rc=$? [$((SECONDS - T0))s]"
done
for v in A F5P; do
  [ $((SECONDS - T0)) -gt 520 ] && { echo "probe $v skipped (time)"; continue; }
  PYTHONPATH=$PWD/.carry/variants/$v/src:$PWD:/tmp/site timeout 60 python3 -m bench.probes.keymajor_partials --T 32768 --HQ 32 --H 4 --widths fp16 > $OUT/probe-$v.log 2>&1
  echo "probe $v rc=$? [$((SECONDS - T0))s]"
done
grep -H "ours" $OUT/v*.log | sed 's#.*/##' | cut -c1-140
grep -H "^| fp16\|kernels:" $OUT/probe-*.log | sed 's#.*/##' | cut -c1-260
