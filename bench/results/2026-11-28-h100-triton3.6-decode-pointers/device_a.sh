# Device call A: the replay's pointer/scratch change on one GPU: host profile, GPU contract stage (records), A/B + host pair vs landed main 979f845.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
python3 -c "import sys; sys.path.insert(0, 'src'); from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
echo "=== [$((SECONDS - T0))s] host profile"
PYTHONPATH=$PWD/src:$PWD:/tmp/site timeout 120 python3 -m bench.ab.host_profile --top 20 > $OUT/host-head-1.log 2>&1
grep -E "per eager call|rounds|ran on" $OUT/host-head-1.log
echo "=== [$((SECONDS - T0))s] contract stage (gpu_lane, installed Triton)"
PYTHONPATH=$PWD/src:$PWD:/tmp/site NSA_SEL_GIT_COMMIT="c988ac5e845345599209e8ffe7f44a2725fc1858" \
  NSA_SEL_OFF_PAIR_NOTE="the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel" \
  timeout 260 python3 -m nsa_triton_sel.compat.lanes.gpu_lane --stages contract --results $OUT/lane > $OUT/lane.log 2>&1
echo "rc=$?"; tail -4 $OUT/lane.log
echo "=== [$((SECONDS - T0))s] A/B + host pair against the landed main"
bash bench/ab/gpu_check.sh $OUT/check ab,host .carry/base-landed/src:main-979f845
echo "=== [$((SECONDS - T0))s] done"
rm -f $OUT/check/all.tgz
cd $OUT && tar czf lane.tgz lane && rm -rf lane
