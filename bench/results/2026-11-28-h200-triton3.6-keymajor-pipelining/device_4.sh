# Device call 4 (H200): the committed sources with call 3's path table: the GPU contract suite, the GPU A/B against
# main d870b95, and the small-group table against XunhaoLai and FSA (fetched, FSA with its one-line fix).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
bash bench/ab/gpu_check.sh $OUT/check contract,ab .carry/base-landed/src:main-d870b95 > $OUT/gpu_check.log 2>&1
echo "gpu_check rc=$? [$((SECONDS - T0))s]"; rm -f $OUT/check/all.tgz
timeout $((590 - SECONDS + T0)) python3 -m bench.train.small_groups --peers .carry/peers --contenders ours-api,xunhaolai,fsa --rep-ms 100 --csv $OUT/small-groups.csv > $OUT/small-groups.log 2>&1
echo "small groups rc=$? [$((SECONDS - T0))s]"; grep "T=" $OUT/small-groups.log | cut -c1-120
