# The key-major backward kernel in Gluon (bench/probes/keymajor_bwd_gluon.py) on an H200: one script, one stage per
# device call (repository root; OUT the call's output folder).
#   bash device.sh probe [VARIANTS] [H] [T] [HQ]   each variant beside the shipped kernel on the first pass (bit for
#                                         bit, timed, against the ceiling), then the whole backward with it in place
set -u
STAGE="${1:?stage: probe}"
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
esac
