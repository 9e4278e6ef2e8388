# Device call 4 (H200): the final sources (fc8c1107f79d80176e8686706f071bd8404fb82c): the GPU contract suite and the A/B against the landed main
# (5b0b2eb), the key-major GPU tests, the small-group table against XunhaoLai and FSA.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
T0=$SECONDS
PYTHONPATH=/tmp/site bash bench/ab/gpu_check.sh $OUT/check contract,ab .carry/base-landed/src:main-5b0b2eb
echo "[$((SECONDS - T0))s]"
rm -f $OUT/check/all.tgz; (cd $OUT && tar czf check.tgz check && rm -rf check)
timeout 100 python3 -m pytest -p no:cacheprovider -q -m gpu -n 8 tests/library/kernels/test_keymajor_gpu.py > $OUT/keymajor-gpu-tests.log 2>&1
echo "tests rc=$? [$((SECONDS - T0))s]"; tail -2 $OUT/keymajor-gpu-tests.log
timeout $((560 - SECONDS + T0)) python3 -m bench.train.small_groups --peers .carry/peers --contenders ours-api,xunhaolai,fsa --rep-ms 100 --csv $OUT/small-groups.csv > $OUT/small-groups.log 2>&1
echo "small groups rc=$? [$((SECONDS - T0))s]"; grep -E "h=|ours|xunhaolai|fsa" $OUT/small-groups.log | tail -20
