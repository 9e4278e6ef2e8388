# Device call C (H200): host profile, GPU contract stage (records), forward + backward against XunhaoLai (the table, then 32K random twice more), host profile again.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
echo "=== [$((SECONDS - T0))s] host profile"
timeout 100 python3 -m bench.ab.host_profile --top 20 > $OUT/host-h200-1.log 2>&1
grep -E "per eager call|rounds|ran on" $OUT/host-h200-1.log
echo "=== [$((SECONDS - T0))s] contract stage"
NSA_SEL_GIT_COMMIT="c988ac5e845345599209e8ffe7f44a2725fc1858" NSA_SEL_OFF_PAIR_NOTE="the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel" \
  timeout 300 python3 -m nsa_triton_sel.compat.lanes.gpu_lane --stages contract --results $OUT/lane-h200 > $OUT/lane-h200.log 2>&1
echo "rc=$?"; tail -n 4 $OUT/lane-h200.log
echo "=== [$((SECONDS - T0))s] train table"
timeout 240 python3 -m bench.train.train_nsa --peers .carry/peers --contenders ours-api,xunhaolai --rep-ms 100 --csv $OUT/train-h200.csv > $OUT/train-h200.log 2>&1
echo "rc=$?"; grep -A14 '  T sel' $OUT/train-h200.log
for i in 2 3; do
  echo "=== [$((SECONDS - T0))s] 32K random, run $i"
  timeout 90 python3 -m bench.train.train_nsa --peers .carry/peers --contenders xunhaolai,ours-api --T 32768 --sel random --rep-ms 100 --csv $OUT/train-h200-32k-$i.csv > $OUT/train-h200-32k-$i.log 2>&1
  echo "rc=$?"; grep -A3 '  T sel' $OUT/train-h200-32k-$i.log
done
echo "=== [$((SECONDS - T0))s] host profile"
timeout 100 python3 -m bench.ab.host_profile --top 20 > $OUT/host-h200-2.log 2>&1
grep -E "per eager call|rounds|ran on" $OUT/host-h200-2.log
echo "=== [$((SECONDS - T0))s] done"
cd $OUT && tar czf lane-h200.tgz lane-h200 && rm -rf lane-h200
