# Device call D (the same H200, warm): forward + backward against XunhaoLai at 32K random, three runs (contender order
# alternating), then the whole table once.
set -u
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
mkdir -p $OUT/train
for i in 1 2 3; do
  order=$([ $i = 2 ] && echo ours-api,xunhaolai || echo xunhaolai,ours-api)
  echo "=== [$((SECONDS - T0))s] 32K random, run $i ($order)"
  timeout 90 python3 -m bench.train.train_nsa --peers .carry/peers --contenders $order --T 32768 --sel random --rep-ms 100 --csv $OUT/train/train-32k-$i.csv > $OUT/train/train-32k-$i.log 2>&1
  echo "rc=$?"; grep -A3 '  T sel' $OUT/train/train-32k-$i.log
done
echo "=== [$((SECONDS - T0))s] the table"
timeout 240 python3 -m bench.train.train_nsa --peers .carry/peers --contenders ours-api,xunhaolai --rep-ms 100 --csv $OUT/train/train.csv > $OUT/train/train.log 2>&1
echo "rc=$?"; grep -A14 '  T sel' $OUT/train/train.log
echo "=== [$((SECONDS - T0))s] done"
cd $OUT && tar czf train.tgz train && rm -rf train && ls
