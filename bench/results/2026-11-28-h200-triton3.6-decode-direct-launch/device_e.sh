# Device call E (H200): the final sources: GPU contract stage (records), GPU A/B + paired host rounds against the
# landed main 25f4eeb, a lone-process host profile of each tree.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
BASE=$PWD/.carry/base-landed/src
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
mkdir -p $OUT/host
echo "=== [$((SECONDS - T0))s] contract stage"
NSA_SEL_GIT_COMMIT="$COMMIT" NSA_SEL_OFF_PAIR_NOTE="the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel" \
  timeout 250 python3 -m nsa_triton_sel.compat.lanes.gpu_lane --stages contract --results $OUT/lane-h200 > $OUT/lane-h200.log 2>&1
echo "rc=$?"; tail -n 3 $OUT/lane-h200.log
bash bench/ab/gpu_check.sh $OUT/check ab,host $BASE:main-25f4eeb
for t in head main; do
  src=$([ $t = head ] && echo $PWD/src || echo $BASE)
  echo "=== [$((SECONDS - T0))s] host profile $t"
  PYTHONPATH=$src:$PWD:/tmp/site timeout 100 python3 -m bench.ab.host_profile --top 20 > $OUT/host/host-$t.log 2>&1
  grep -E "per eager call|rounds" $OUT/host/host-$t.log
done
echo "=== [$((SECONDS - T0))s] done"
rm -f $OUT/check/all.tgz
cd $OUT && tar czf lane-h200.tgz lane-h200 && rm -rf lane-h200 && mv host check/ && tar czf check.tgz check && rm -rf check && ls
