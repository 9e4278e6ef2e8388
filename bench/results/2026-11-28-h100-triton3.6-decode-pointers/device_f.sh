# Device call F (H100): the GPU contract stage (records) on the final sources.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
NSA_SEL_GIT_COMMIT="59082344a39aedcbedd9d4d11a7a1b474f36a67a" NSA_SEL_OFF_PAIR_NOTE="the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel" \
  timeout 250 python3 -m nsa_triton_sel.compat.lanes.gpu_lane --stages contract --results $OUT/lane > $OUT/lane.log 2>&1
echo "rc=$?"; tail -n 4 $OUT/lane.log
cd $OUT && tar czf lane.tgz lane && rm -rf lane
