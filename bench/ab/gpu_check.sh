#!/usr/bin/env bash
# What a change under src/ must show on a GPU before it is resolved, in one command (repository root):
#
#   bash bench/ab/gpu_check.sh OUT STAGES [BASE_SRC:NAME ...]
#
# STAGES, comma separated:
#   contract  the GPU contract suite (tests/test_contract_gpu*.py)         -> OUT/contract.log
#   backward  the GPU backward suite (tests/library/kernels/test_backward_gpu.py)          -> OUT/backward.log
#   ab        python -m bench.ab.run against each BASE_SRC (a src/ folder) -> OUT/ab-NAME.md, OUT/ab-NAME.log
#   host      python -m bench.ab.host_profile on this tree and each base, alternately, HOST_ROUNDS times (default 3):
#             a process's host time can sit at one of two levels for its whole life, so one process per tree
#             says little                                                 -> OUT/host-NAME-ROUND.log
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
host_profile() {  # NAME PYTHONPATH ROUND
    echo "=== [$(date -u +%T)] host profile of $1, round $3"
    PYTHONPATH="$2" timeout -k 10 120 $PY -m bench.ab.host_profile --calls 20 --rounds 20 --top 12 \
        > "$OUT/host-$1-$3.log" 2>&1
    grep -E "per eager call|rounds|launches:|ran on" "$OUT/host-$1-$3.log"
}
if stage host; then
    for round in $(seq 1 "${HOST_ROUNDS:-3}"); do
        for spec in "$@"; do
            host_profile "${spec##*:}" "${spec%%:*}:$REPO${PYTHONPATH:+:$PYTHONPATH}" "$round"
        done
        host_profile head "$HEAD_PATH" "$round"
    done
fi
tar czf "$OUT/all.tgz" -C "$OUT" --exclude=all.tgz . 2>/dev/null
echo "=== [$(date -u +%T)] done (rc=$rc)"
exit $rc
