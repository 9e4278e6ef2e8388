#!/usr/bin/env bash
# What a change under src/ must show on a GPU before it is resolved, in one command (repository root):
#
#   bash bench/ab/gpu_check.sh OUT STAGES [BASE_SRC:NAME ...]
#
# STAGES, comma separated:
#   contract  the GPU contract suite (tests/test_contract_gpu*.py)         -> OUT/contract.log
#   backward  the GPU backward suite (tests/library/kernels/test_backward_gpu.py)          -> OUT/backward.log
#   ab        python -m bench.ab.run against each BASE_SRC (a src/ folder) -> OUT/ab-NAME.md, OUT/ab-NAME.log
#   host      python -m bench.ab.host_pair against each base (host time per eager decode call, head and base in
#             alternating paired rounds: the host rows' verdict), then python -m bench.ab.host_profile on this
#             tree (where its host time goes)                             -> OUT/host-pair-NAME.md, OUT/host-head.log
# Everything also goes to OUT/all.tgz.  WHEELS=DIR installs missing tools (pytest-benchmark, ...) first.
set -u
OUT="${1:?usage: bench/ab/gpu_check.sh OUT STAGES [BASE_SRC:NAME ...]}"
STAGES="${2:?usage: bench/ab/gpu_check.sh OUT STAGES [BASE_SRC:NAME ...]}"
shift 2
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$REPO" || exit 2
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION="${TRITON_DEFAULT_FP_FUSION:-1}"
if [ -n "${WHEELS:-}" ]; then
    $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/ab-site "$WHEELS"/*.whl \
        && export PYTHONPATH="/tmp/ab-site${PYTHONPATH:+:$PYTHONPATH}"
fi
HEAD_PATH="$REPO/src:$REPO${PYTHONPATH:+:$PYTHONPATH}"
echo "=== [$(date -u +%T)] $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader); $($PY -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)')"
rc=0
stage() { case ",$STAGES," in *",$1,"*) return 0 ;; esac; return 1; }
if stage contract; then
    echo "=== [$(date -u +%T)] contract"
    PYTHONPATH="$HEAD_PATH" timeout -k 10 300 $PY -m pytest -p no:cacheprovider -q -m gpu --durations=15 tests/test_contract_gpu.py tests/test_contract_gpu_shapes.py \
        > "$OUT/contract.log" 2>&1 || rc=1
    tail -3 "$OUT/contract.log"
fi
if stage backward; then
    echo "=== [$(date -u +%T)] backward"
    PYTHONPATH="$HEAD_PATH" timeout -k 10 400 $PY -m pytest -p no:cacheprovider -q -m gpu tests/library/kernels/test_backward_gpu.py \
        > "$OUT/backward.log" 2>&1 || rc=1
    tail -3 "$OUT/backward.log"
fi
for spec in "$@"; do
    src="${spec%%:*}"; name="${spec##*:}"
    if stage ab; then
        echo "=== [$(date -u +%T)] A/B against $name"
        PYTHONPATH="$HEAD_PATH" timeout -k 10 500 $PY -m bench.ab.run --base-src "$src" --base-name "$name" \
            --out "$OUT/ab-$name" > "$OUT/ab-$name.log" 2>&1 || rc=1
        cp "$OUT/ab-$name/ab.md" "$OUT/ab-$name.md" 2>/dev/null
        cat "$OUT/ab-$name.md" 2>/dev/null || tail -20 "$OUT/ab-$name.log"
    fi
done
if stage host; then
    for spec in "$@"; do
        echo "=== [$(date -u +%T)] host A/B in paired rounds against ${spec##*:}"
        PYTHONPATH="$HEAD_PATH" timeout -k 10 300 $PY -m bench.ab.host_pair --base-src "${spec%%:*}" \
            --base-name "${spec##*:}" --out "$OUT/host-pair-${spec##*:}" > "$OUT/host-pair-${spec##*:}.log" 2>&1 || rc=1
        cp "$OUT/host-pair-${spec##*:}/host-pair.md" "$OUT/host-pair-${spec##*:}.md" 2>/dev/null
        cat "$OUT/host-pair-${spec##*:}.md" 2>/dev/null || tail -20 "$OUT/host-pair-${spec##*:}.log"
    done
    echo "=== [$(date -u +%T)] host profile of this tree"
    PYTHONPATH="$HEAD_PATH" timeout -k 10 120 $PY -m bench.ab.host_profile > "$OUT/host-head.log" 2>&1
    grep -E "per eager call|rounds|launches:|ran on" "$OUT/host-head.log"
fi
tar czf "$OUT/all.tgz" -C "$OUT" --exclude=all.tgz . 2>/dev/null
echo "=== [$(date -u +%T)] done (rc=$rc)"
exit $rc
