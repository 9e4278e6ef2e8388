# The key-major backward kernel in Gluon (bench/probes/keymajor_gluon.py's b-* variants, then the shipped one) on an H200: one script, one stage per
# device call (repository root; OUT the call's output folder).
#   bash device.sh probe [VARIANTS] [H] [T] [HQ]   each variant beside the Triton kernel on the first pass (bit for
#                                         bit, timed, against the ceiling), then the whole backward with it in place
#   bash device.sh check   on the tree that ships the kernel: its GPU tests and the key-major ones (240 s limit),
#                          then the GPU contract suite and the GPU A/B against the landed main (bench/ab/gpu_check.sh)
#   bash device.sh tests   the gradient and key-major backward GPU tests (300 s limit), the host A/B in paired rounds
#   bash device.sh final   on the final tree: the three key-major GPU files' training-step determinism and
#                          CUDA-graph tests and fallbacks (80 s limit), then the GPU contract suite and the GPU A/B
#                          against the landed main
#   bash device.sh groups  the small-group table against FSA and XunhaoLai, then the path grids of random and local
#                          selections (the planner's path table)
set -u
STAGE="${1:?stage: probe, check or groups}"
VARIANTS="${2:-b-nb4,b-nb4-fast-i32,b-nb3-fast-i32,b-nb4-late-fast-i32,b-nb3-late-fast-i32}"
H="${3:-32,8,4}"
T="${4:-32768}"
HQ="${5:-32}"
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
case "$STAGE" in
probe)
    timeout 560 python3 -m bench.probes.keymajor_ceiling --T $T --HQ $HQ --H "$H" --skip-forward --gluon-bwd "$VARIANTS" \
        --json $OUT/bwd-$T.json 2>&1 | tee $OUT/bwd-$T.log | grep -E "^\||Error|error" | cut -c1-260
    echo "probe rc=${PIPESTATUS[0]} [$((SECONDS - T0))s]" ;;
check)
    timeout 240 python3 -m pytest -p no:cacheprovider -q -m gpu tests/library/kernels/test_keymajor_bwd_gluon_gpu.py \
        tests/library/kernels/test_keymajor_gpu.py > $OUT/keymajor-gpu-tests.log 2>&1
    echo "keymajor tests rc=$? [$((SECONDS - T0))s]"; grep -E "passed|failed|FAILED|ERROR" $OUT/keymajor-gpu-tests.log | tail -12
    timeout $((585 - SECONDS + T0)) bash bench/ab/gpu_check.sh $OUT/check contract,ab,host .carry/base-landed/src:main-eced02d
    echo "gpu_check rc=$? [$((SECONDS - T0))s]" ;;
tests)
    timeout 300 python3 -m pytest -p no:cacheprovider -q -m gpu -k "gradients or keymajor_backward or partial" \
        tests/library/kernels/test_keymajor_bwd_gluon_gpu.py tests/library/kernels/test_keymajor_gpu.py \
        > $OUT/keymajor-gpu-tests.log 2>&1
    echo "keymajor tests rc=$? [$((SECONDS - T0))s]"; grep -E "passed|failed|FAILED|Error" $OUT/keymajor-gpu-tests.log | tail -12
    timeout $((585 - SECONDS + T0)) python3 -m bench.ab.host_pair --base-src .carry/base-landed/src \
        --base-name main-eced02d --out $OUT/host-pair 2>&1 | grep -E "^\|"
    echo "host rc=$? [$((SECONDS - T0))s]" ;;
final)
    timeout 80 python3 -m pytest -p no:cacheprovider -q -m gpu -k "deterministic or falls_back" \
        tests/library/kernels/test_keymajor_bwd_gluon_gpu.py tests/library/kernels/test_keymajor_ws_gpu.py \
        tests/library/kernels/test_keymajor_gpu.py > $OUT/keymajor-gpu-tests.log 2>&1
    echo "keymajor tests rc=$? [$((SECONDS - T0))s]"; grep -E "passed|failed|FAILED|Error" $OUT/keymajor-gpu-tests.log | tail -8
    timeout $((250 - SECONDS + T0)) bash bench/ab/gpu_check.sh $OUT/check contract,ab .carry/base-landed/src:main-eced02d
    echo "gpu_check rc=$? [$((SECONDS - T0))s]" ;;
groups)
    timeout 240 python3 -m bench.train.small_groups --peers .carry/peers --rep-ms 100 \
        --csv $OUT/small-groups.csv > $OUT/small-groups.log 2>&1
    echo "small groups rc=$? [$((SECONDS - T0))s]"; grep -E "^\|" $OUT/small-groups.log | cut -c1-200
    timeout $((470 - SECONDS + T0)) python3 -m bench.probes.path_grid --sel random --json $OUT/grid_random.json \
        > $OUT/grid_random.log 2>&1
    echo "grid random rc=$? [$((SECONDS - T0))s]"; tail -3 $OUT/grid_random.log
    timeout $((585 - SECONDS + T0)) python3 -m bench.probes.path_grid --sel local --T 8192,32768,65536 \
        --json $OUT/grid_local.json > $OUT/grid_local.log 2>&1
    echo "grid local rc=$? [$((SECONDS - T0))s]"; tail -3 $OUT/grid_local.log ;;
esac
