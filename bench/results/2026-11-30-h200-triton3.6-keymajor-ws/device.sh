# The warp-specialised key-major partial kernel on an H200, on the tree that ships it: one script, one stage per
# device call (repository root; OUT the call's output folder).
#   bash device.sh check   the key-major GPU tests (the warp-specialised kernel's and the Triton kernel's, 200 s
#                          limit), then the GPU contract suite and the GPU A/B against the landed main
#                          (bench/ab/gpu_check.sh)
#   bash device.sh tests   the key-major GPU tests again (a longer limit: cold compiles), then the host A/B in
#                          paired rounds
#   bash device.sh groups  the small-group table against FSA and XunhaoLai, then the path grid of random
#                          selections (the planner's path table)
set -u
STAGE="${1:?stage: check, tests or groups}"
HERE=bench/results/2026-11-30-h200-triton3.6-keymajor-ws
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
BASE=.carry/base-landed/src:main-17c704b
case "$STAGE" in
check)
    timeout 200 python3 -m pytest -p no:cacheprovider -q -m gpu tests/library/kernels/test_keymajor_ws_gpu.py \
        tests/library/kernels/test_keymajor_gpu.py > $OUT/keymajor-gpu-tests.log 2>&1
    echo "keymajor tests rc=$? [$((SECONDS - T0))s]"; tail -4 $OUT/keymajor-gpu-tests.log
    timeout $((580 - SECONDS + T0)) bash bench/ab/gpu_check.sh $OUT/check contract,ab $BASE
    echo "gpu_check rc=$? [$((SECONDS - T0))s]" ;;
tests)
    timeout 400 python3 -m pytest -p no:cacheprovider -v -rs -m gpu --durations=20 \
        tests/library/kernels/test_keymajor_ws_gpu.py tests/library/kernels/test_keymajor_gpu.py \
        > $OUT/keymajor-gpu-tests.log 2>&1
    echo "keymajor tests rc=$? [$((SECONDS - T0))s]"; grep -E "passed|failed|FAILED|ERROR" $OUT/keymajor-gpu-tests.log | tail -8
    grep -A22 "slowest" $OUT/keymajor-gpu-tests.log
    timeout $((580 - SECONDS + T0)) bash bench/ab/gpu_check.sh $OUT/check host $BASE
    echo "host rc=$? [$((SECONDS - T0))s]" ;;
groups)
    timeout 300 python3 -m bench.train.small_groups --peers .carry/peers --rep-ms 100 \
        --csv $OUT/small-groups.csv > $OUT/small-groups.log 2>&1
    echo "small groups rc=$? [$((SECONDS - T0))s]"; grep -E "^\|" $OUT/small-groups.log | cut -c1-200
    timeout $((580 - SECONDS + T0)) python3 -m bench.probes.path_grid --sel random --json $OUT/grid_random.json \
        > $OUT/grid_random.log 2>&1
    echo "grid random rc=$? [$((SECONDS - T0))s]"; tail -3 $OUT/grid_random.log ;;
esac
