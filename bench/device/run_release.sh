#!/usr/bin/env bash
# The GPU evidence of one or more Triton releases in one call: wheel in, ledger run files and
# benchmark JSON out.  For each release, python -m nsa_triton_sel.compat.lanes.gpu_lane runs
# its stages: compile (this GPU's arch), parity (pytest -m gpu: forward and gradients), canary
# (the GPU miscompile canaries, each in its own process), bench (pytest-benchmark against packed
# SDPA at the seeds' packed shapes and the canonical NSA shape T=4K/32K, random and local, forward
# and forward+backward; backend=auto within 5 % of backend=triton at T=8K).
#
#   bench/device/run_release.sh OUTDIR RELEASE [RELEASE ...]
#
# One release after the other, every stage in turn.  For many releases in one lease use
# python -m nsa_triton_sel.compat.lanes.gpu_refresh (releases side by side, then the benchmarks alone) and, on the
# device machine, bench/device/device_refresh.sh (wheels packed by bench/device/slim_triton.py, carried over several calls).
#
# RELEASE is one of:
#   installed           the Triton installed in this Python (e.g. 3.6.0 beside torch 2.11)
#   PATH.whl            a Triton wheel; if PATH.whl is missing but PATH.whl.part* exist, they are
#                       concatenated first (cat PATH.whl.part* > PATH.whl)
#   DIR                 an unpacked tree (DIR/triton/__init__.py), put first on PYTHONPATH
# Wheels are unpacked with pip install --no-deps --no-index --target (a directory first on
# PYTHONPATH: nothing in the environment changes), so no network is needed.
#
# OUTDIR gets two files: run.log (everything printed) and results.tar.gz (results/triton-X.Y.Z/:
# the run files that `nsa-sel pin --results DIR` merges, raw/ with junit XML, the benchmark JSON
# and the smoke report, summary-X.Y.Z.txt), re-packed after every release, so a release that crashes
# or a call that runs out of time keeps the others' results.  Off the machine:
#   tar xzf results.tar.gz && for d in results/triton-*; do nsa-sel pin --results $d; done
#
# Environment: PYTHON (default python3); REL_LIMIT seconds per release (default 420, the stages'
# own limits are NSA_SEL_STAGE_LIMITS, default compile=90,parity=150,canary=60,bench=150);
# STAGES (default compile,parity,canary,bench); WHEELS, a wheelhouse for missing tools (pytest,
# pytest-benchmark, rich, pytest-timeout) installed into a --target directory;
# NSA_SEL_GIT_COMMIT, the commit being run (the device copy has no .git); NSA_SEL_OFF_PAIR_NOTE
# (default: why this machine cannot run the paired torch).

set -u
OUT="${1:?usage: bench/device/run_release.sh OUTDIR RELEASE [RELEASE ...] (RELEASE: installed | X.whl | DIR)}"
shift
[ $# -ge 1 ] || { echo "run_release.sh: name at least one release (installed, a wheel or a tree)" >&2; exit 2; }
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/nsa-release.XXXXXX")"
RESULTS="$WORK/results"
mkdir -p "$RESULTS"
exec > >(tee -a "$OUT/run.log") 2>&1
cd "$REPO" || exit 2
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS="${OMP_NUM_THREADS:-4}"
export NSA_BENCH_T="${NSA_BENCH_T:-4096,32768}" NSA_BENCH_FLEX="${NSA_BENCH_FLEX:-0}"
export NSA_SEL_OFF_PAIR_NOTE="${NSA_SEL_OFF_PAIR_NOTE:-the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel}"
TOOLS=""

pack() {  # results.tar.gz from everything so far (atomically: a kill mid-write keeps the last one)
    tar czf "$OUT/.results.tar.gz" -C "$WORK" results && mv -f "$OUT/.results.tar.gz" "$OUT/results.tar.gz"
}

tools() {  # pytest and friends, from WHEELS where this Python lacks them
    local missing
    missing="$($PY - <<'EOF'
import importlib.util as u
need = {"pytest": "pytest", "pytest_benchmark": "pytest-benchmark", "rich": "rich", "pytest_timeout": "pytest-timeout",
        "filelock": "filelock", "packaging": "packaging"}
print(" ".join(pip for mod, pip in need.items() if u.find_spec(mod) is None))
EOF
)"
    [ -z "$missing" ] && return 0
    if [ -z "${WHEELS:-}" ]; then
        echo "run_release.sh: missing here: $missing (set WHEELS to a wheelhouse; stages that need them will fail)"
        return 0
    fi
    TOOLS="$WORK/tools"
    $PY -m pip install -q --no-index --find-links "$WHEELS" --target "$TOOLS" $missing \
        || echo "run_release.sh: could not install $missing from $WHEELS"
}

unpack() {  # unpack RELEASE -> prints the directory to put first on PYTHONPATH ("" for installed)
    local rel="$1" dir
    if [ "$rel" = installed ]; then echo ""; return 0; fi
    if [ -d "$rel" ]; then
        [ -f "$rel/triton/__init__.py" ] || { echo "run_release.sh: $rel has no triton/__init__.py" >&2; return 1; }
        (cd "$rel" && pwd); return 0
    fi
    if [ ! -f "$rel" ] && compgen -G "$rel.part*" >/dev/null; then
        cat "$rel".part* > "$WORK/$(basename "$rel")" || return 1
        rel="$WORK/$(basename "$rel")"
    fi
    [ -f "$rel" ] || { echo "run_release.sh: no such wheel, tree or parts: $1" >&2; return 1; }
    dir="$WORK/tree-$(basename "$rel" .whl)"
    if ! $PY -m pip install -q --no-deps --no-index --target "$dir" "$rel" >&2; then
        echo "run_release.sh: pip could not unpack $rel; unzipping it (executable bits restored under */bin/)" >&2
        $PY -m zipfile -e "$rel" "$dir" >&2 || return 1
        find "$dir" -path '*/bin/*' -type f -exec chmod +x {} + 2>/dev/null
    fi
    echo "$dir"
}

echo "=== [$(date -u +%T)] run_release: ${*} -> $OUT (work dir $WORK)"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "(no nvidia-smi)"
tools
START=$SECONDS
rc_all=0
for rel in "$@"; do
    t0=$SECONDS
    echo "=== [$(date -u +%T)] release $rel (+$((SECONDS - START)) s)"
    tree="$(unpack "$rel")" || { echo "=== release $rel: could not be unpacked; next"; rc_all=1; continue; }
    pp="$REPO/src:$REPO${TOOLS:+:$TOOLS}${PYTHONPATH:+:$PYTHONPATH}"
    [ -n "$tree" ] && pp="$tree:$pp"
    v="$(PYTHONPATH="$pp" $PY -c 'import triton; print(triton.__version__)' 2>/dev/null)"
    [ -n "$v" ] || { echo "=== release $rel: triton does not import from it; next"; rc_all=1; continue; }
    mkdir -p "$RESULTS/triton-$v"
    PYTHONPATH="$pp" TRITON_CACHE_DIR="$WORK/cache-$v" timeout -k 20 "${REL_LIMIT:-420}" \
        $PY -m nsa_triton_sel.compat.lanes.gpu_lane --results "$RESULTS/triton-$v" ${STAGES:+--stages "$STAGES"}
    rc=$?
    [ $rc -eq 0 ] || rc_all=1
    echo "=== [$(date -u +%T)] release $rel = triton $v: exit $rc in $((SECONDS - t0)) s"
    pack
done
pack
echo "=== [$(date -u +%T)] run_release done in $((SECONDS - START)) s (exit $rc_all): $OUT/results.tar.gz"
exit $rc_all
