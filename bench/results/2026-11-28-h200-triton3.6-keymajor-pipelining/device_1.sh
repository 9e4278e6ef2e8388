# Device call 1 (H200): the key-major loops' pipelining, through the public API (small-group grid rows h = 8, 4, 1).
# A the landed kernels; M the merges' loops as tl.range(num_stages=3) (their loads go through shared memory,
# which a kernel's num_stages does not do for loads that feed no dot); F5 the forward kernel on 5 stages (its
# gathered q two steps ahead); B2/B3 the backward kernel on 2/3 stages; M4 the merges on 4.
# Source trees in .carry/variants/<name>/src (not committed).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
for v in A M MF5 MF5B2 MF5B3 M4F5B2; do
  [ $((SECONDS - T0)) -gt 480 ] && { echo "variant $v skipped (time)"; continue; }
  PYTHONPATH=$PWD/.carry/variants/$v/src:$PWD:/tmp/site timeout 95 python3 -m bench.train.small_groups --contenders ours-api --grid 32768:32:4,32768:32:8,32768:32:32 --rep-ms 100 > $OUT/v$v.log 2>&1
  echo "variant $v rc=$? [$((SECONDS - T0))s]"
done
[ $((SECONDS - T0)) -lt 530 ] && PYTHONPATH=$PWD/src:$PWD:/tmp/site timeout $((585 - SECONDS + T0)) python3 -m bench.train.small_groups --peers .carry/peers --contenders xunhaolai --grid 32768:32:4 --rep-ms 100 > $OUT/xunhaolai.log 2>&1
echo "xunhaolai rc=$? [$((SECONDS - T0))s]"
grep -H "ours\|xunhaolai" $OUT/*.log | grep -v "^.*: *#" | sed 's#.*/##' | cut -c1-160
