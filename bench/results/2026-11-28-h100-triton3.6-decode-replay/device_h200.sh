# Device call: the GPU contract stage and the host profile of the decode replay on an H200 (Triton 3.6.0).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
timeout 120 python3 -m bench.ab.host_profile --top 20 > /tmp/host-h200.log 2>&1; grep -E "per eager call|rounds" /tmp/host-h200.log
NSA_SEL_GIT_COMMIT="${COMMIT:-}" NSA_SEL_OFF_PAIR_NOTE="the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel" \
  timeout 300 python3 -m nsa_triton_sel.compat.lanes.gpu_lane --stages contract --results /tmp/lane-h200 > /tmp/lane-h200.log 2>&1
echo "rc=$?"; tail -n 4 /tmp/lane-h200.log
tar czf $OUT/h200.tgz -C /tmp lane-h200 lane-h200.log host-h200.log
