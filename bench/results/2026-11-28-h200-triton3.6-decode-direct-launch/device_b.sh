# Device call B (the same H200, warm): the GPU contract stage again for its records (call A's archive of them did not
# come back), then the host time of one eager decode call step by step.
set -u
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
ls /tmp/site >/dev/null 2>&1 || python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
NSA_SEL_GIT_COMMIT="$COMMIT" NSA_SEL_OFF_PAIR_NOTE="the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel" \
  timeout 250 python3 -m nsa_triton_sel.compat.lanes.gpu_lane --stages contract --results $OUT/lane-h200 > $OUT/lane-h200-b.log 2>&1
echo "rc=$? [$((SECONDS - T0))s]"; tail -n 3 $OUT/lane-h200-b.log
timeout 150 python3 -m bench.probes.host_steps > $OUT/host-steps.log 2>&1; echo "rc=$? [$((SECONDS - T0))s]"; cat $OUT/host-steps.log
cd $OUT && tar czf lane-h200.tgz lane-h200 && rm -rf lane-h200 && ls
