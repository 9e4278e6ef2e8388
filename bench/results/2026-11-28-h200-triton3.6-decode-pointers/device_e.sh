# Device call E (H200): the GPU contract stage (records) and the A/B against the landed main 979f845 (with the H200 path entry).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
PYTHONPATH=$PWD/src:$PWD:/tmp/site NSA_SEL_GIT_COMMIT="59082344a39aedcbedd9d4d11a7a1b474f36a67a" NSA_SEL_OFF_PAIR_NOTE="the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel" \
  timeout 250 python3 -m nsa_triton_sel.compat.lanes.gpu_lane --stages contract --results $OUT/lane-h200 > $OUT/lane-h200.log 2>&1
echo "rc=$? [$((SECONDS - T0))s]"; tail -n 4 $OUT/lane-h200.log
bash bench/ab/gpu_check.sh $OUT/check ab,host .carry/base-landed/src:main-979f845
echo "[$((SECONDS - T0))s] done"
rm -f $OUT/check/all.tgz
cd $OUT && tar czf lane-h200.tgz lane-h200 && rm -rf lane-h200 && tar czf check.tgz check && rm -rf check
