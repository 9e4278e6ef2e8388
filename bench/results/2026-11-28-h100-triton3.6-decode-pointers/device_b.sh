# Device call B: forward + backward against XunhaoLai (same inputs), the canonical table; then 32K random twice more; a second host profile.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
echo "=== [$((SECONDS - T0))s] train table"
timeout 330 python3 -m bench.train.train_nsa --peers .carry/peers --contenders ours-api,xunhaolai --rep-ms 100 --csv $OUT/train.csv > $OUT/train.log 2>&1
echo "rc=$?"; grep -A14 '  T sel' $OUT/train.log
for i in 2 3; do
  echo "=== [$((SECONDS - T0))s] 32K random, run $i"
  timeout 90 python3 -m bench.train.train_nsa --peers .carry/peers --contenders xunhaolai,ours-api --T 32768 --sel random --rep-ms 100 --csv $OUT/train-32k-$i.csv > $OUT/train-32k-$i.log 2>&1
  echo "rc=$?"; grep -A3 '  T sel' $OUT/train-32k-$i.log
done
echo "=== [$((SECONDS - T0))s] host profile"
timeout 100 python3 -m bench.ab.host_profile --top 20 > $OUT/host-head-2.log 2>&1
grep -E "per eager call|rounds|ran on" $OUT/host-head-2.log
echo "=== [$((SECONDS - T0))s] done"
