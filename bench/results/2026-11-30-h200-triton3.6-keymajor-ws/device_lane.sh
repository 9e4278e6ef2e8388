# Call 6: the GPU lane of the installed Triton (3.6.0) on the committed tree (every stage: compile for sm_90,
# GPU parity and gradients, the contract suite, the GPU canaries, the benchmarks), as lane run files to pin.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
NSA_SEL_GIT_COMMIT="${COMMIT:?the commit this tree is}" \
NSA_SEL_OFF_PAIR_NOTE="the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel" \
  timeout 570 python3 -m nsa_triton_sel.compat.lanes.gpu_lane --stages compile,parity,contract,canary,bench \
  --results $OUT/lane-h200 > $OUT/lane-h200.log 2>&1
echo "gpu lane rc=$? [$((SECONDS - T0))s]"; tail -15 $OUT/lane-h200.log
