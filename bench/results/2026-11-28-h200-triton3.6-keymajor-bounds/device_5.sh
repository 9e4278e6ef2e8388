# Device call 5 (H200): the final sources: the GPU contract suite and the A/B against the landed main (5d86b33),
# the small-group table against XunhaoLai and FSA.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
T0=$SECONDS
PYTHONPATH=/tmp/site bash bench/ab/gpu_check.sh $OUT/check contract,ab .carry/base-landed/src:main-5d86b33
echo "[$((SECONDS - T0))s]"
rm -f $OUT/check/all.tgz; (cd $OUT && tar czf check.tgz check && rm -rf check)
timeout $((580 - SECONDS + T0)) python3 -m bench.train.small_groups --peers .carry/peers --contenders ours-api,xunhaolai,fsa --rep-ms 100 --csv $OUT/small-groups.csv > $OUT/small-groups.log 2>&1
echo "small groups rc=$? [$((SECONDS - T0))s]"; grep -E "ours|xunhaolai|fsa" $OUT/small-groups.log | tail -20
