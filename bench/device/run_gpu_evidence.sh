#!/usr/bin/env bash
# The GPU evidence of issues 14, 16, 17 and 18 in a few calls of at most ten minutes each.
#
#   bench/device/run_gpu_evidence.sh STAGE OUTDIR [PEERS_DIR]
#
# Stages (each one call; outputs go to OUTDIR as at most three files: STAGE.log, STAGE.tgz, and
# a JSON or CSV where the stage has one):
#   lane      NSA_SEL_GPU=1 nox -s compile-X parity-X --no-venv for the Triton installed here: the GPU
#             parity suite (kernels, operator, backward), ledger run files in lane.tgz (nsa-sel pin
#             merges them); needs nox and filelock (a wheelhouse: WHEELS=DIR)
#   bench     NSA_SEL_GPU=1 nox -s bench-X --no-venv (pytest-benchmark: seeds' shapes, NSA forward and
#             forward + backward against SDPA and the peers in PEERS_DIR)
#   perf      python -m bench.perf.perf_nsa (issue 18 table) and python -m bench.perf.host_cost --compiled (issue 16)
#   host      python -m bench.perf.host_cost (issue 16: host us per call, validate=True's checks both placements)
#   train     python -m bench.train.train_nsa --check (issue 17 table; TRAIN_ARGS adds e.g. --sweep)
#   tests     python -m pytest -m gpu on TESTS (default: kernels, backward, operator, regressions): for a
#             Triton brought as a tree on PYTHONPATH (an off-pair lane), without the ledger
# The repository's src/ goes on PYTHONPATH; TRITON_DEFAULT_FP_FUSION=1 as in the lanes.

set -u
STAGE="${1:?usage: bench/device/run_gpu_evidence.sh STAGE OUTDIR [PEERS_DIR]}"
OUT="${2:?usage: bench/device/run_gpu_evidence.sh STAGE OUTDIR [PEERS_DIR]}"
PEERS="${3:-}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
cd "$REPO" || exit 2
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION="${TRITON_DEFAULT_FP_FUSION:-1}" OMP_NUM_THREADS=4
export PYTHONPATH="$REPO/src:$REPO${PYTHONPATH:+:$PYTHONPATH}"
LOG="$OUT/$STAGE.log"
exec > >(tee -a "$LOG") 2>&1
TRITON_V="$($PY -c 'import triton; print(triton.__version__)')"
LABEL="$($PY -c "from packaging.version import Version as V; v = V('$TRITON_V'); print(f'{v.major}.{v.minor}')")"
echo "=== [$(date -u +%T)] $STAGE: triton $TRITON_V (lane $LABEL), $($PY -c 'import torch; print(torch.__version__)')"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader

need_nox() {
    $PY -c "import nox, filelock" 2>/dev/null && return 0
    [ -n "${WHEELS:-}" ] || { echo "nox/filelock missing: set WHEELS to a wheelhouse"; exit 2; }
    $PY -m pip install -q --no-index --find-links "$WHEELS" nox filelock
}

case "$STAGE" in
    lane)
        need_nox
        NSA_SEL_GPU=1 NSA_SEL_JOBS="${NSA_SEL_JOBS:-12}" timeout -k 10 "${LIMIT:-540}" $PY -m nox -s "compile-$LABEL" "parity-$LABEL" --no-venv \
            -- --results "$OUT/lane-results"
        tar czf "$OUT/lane.tgz" -C "$OUT" lane-results && rm -rf "$OUT/lane-results"
        ;;
    bench)
        need_nox
        NSA_BENCH_PEERS="$PEERS" NSA_SEL_GPU=1 timeout -k 10 "${LIMIT:-540}" $PY -m nox -s "bench-$LABEL" --no-venv -- --results "$OUT/bench-results"
        tar czf "$OUT/bench.tgz" -C "$OUT" bench-results && rm -rf "$OUT/bench-results"
        ;;
    perf)
        timeout -k 10 420 $PY -m bench.perf.perf_nsa ${PEERS:+--peers "$PEERS"} --out "$OUT"
        timeout -k 10 150 $PY -m bench.perf.host_cost --compiled --json "$OUT/host_cost.json"
        ;;
    host)
        timeout -k 10 300 $PY -m bench.perf.host_cost ${HOST_ARGS:-} --json "$OUT/host_cost.json"
        ;;
    train)
        timeout -k 10 560 $PY -m bench.train.train_nsa ${PEERS:+--peers "$PEERS"} --check --csv "$OUT/train.csv" ${TRAIN_ARGS:-}
        ;;
    tests)
        # shellcheck disable=SC2086
        timeout -k 10 560 $PY -m pytest -m gpu -p no:cacheprovider -v -rs \
            ${TESTS:-tests/library/kernels/test_kernels_gpu.py tests/library/kernels/test_backward_gpu.py tests/library/op/test_op_gpu.py tests/test_triton_regressions_gpu.py}
        ;;
    *)
        echo "unknown stage '$STAGE' (accepted: lane, bench, perf, host, train, tests)"
        exit 2
        ;;
esac
echo "=== [$(date -u +%T)] $STAGE done (rc=$?)"
