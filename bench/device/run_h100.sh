#!/usr/bin/env bash
# The whole GPU benchmark in one call (about 7 minutes on an H100, 550 s at most).
#
#   bench/device/run_h100.sh OUTDIR            # on the GPU machine (OUTDIR = $OUT)
#   bench/device/run_h100.sh OUTDIR --dry-run  # on a CPU: tiny shapes, interpreter, modelled clock
#
# Writes at most 8 files to OUTDIR:
#   run.log             everything printed (environment, progress, suspect rows, summaries)
#   sel_dense.csv       seed matrix, dist few       (bench_sel_triton.py)
#   sel_varlen.csv      seed matrix, dist many/mixed
#   sel_decode.csv      seed 002 decode shapes
#   pytest_bench.json   pytest-benchmark suites (bench/suites/test_bench_sel.py), GPU clock
#   nsa.csv             canonical NSA contender table (bench/perf/bench_nsa.py)
#   report.md           threshold report from the three CSVs (no plot here; make it
#                       off-device: python -m bench.analysis.sel_threshold_from_csv ... --out report.md)
# Each stage has its own time limit, so one slow stage cannot eat the others' time;
# the sweeps also stop starting new work at their --budget-s and keep what they ran.
# Environment: PYTHON (default python3); STAGES, a comma list of stage keys to run (default
# all: env,sweep,decode,pytest,nsa,report), e.g. STAGES=env,pytest,nsa to re-time the
# dispatcher after a threshold change.  The repository's src/ is put on PYTHONPATH so the
# package need not be installed; the scripts run as modules of the bench package (python -m bench.X).

set -u
OUT="${1:?usage: bench/device/run_h100.sh OUTDIR [--dry-run]}"
DRY="${2:-}"
if [ -n "$DRY" ] && [ "$DRY" != "--dry-run" ]; then
    echo "run_h100.sh: unknown option '$DRY' (accepted: --dry-run)" >&2
    exit 2
fi
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PY="${PYTHON:-python3}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$REPO/src${PYTHONPATH:+:$PYTHONPATH}"  # bench/ is a package: python -m bench.X from $REPO
cd "$REPO" || exit 2
exec > >(tee -a "$OUT/run.log") 2>&1

START=$SECONDS
STAGES="${STAGES:-env,sweep,decode,pytest,nsa,report}"
for k in ${STAGES//,/ }; do
    case "$k" in env|sweep|decode|pytest|nsa|report) ;;
        *) echo "run_h100.sh: unknown stage '$k' in STAGES=$STAGES (accepted: env,sweep,decode,pytest,nsa,report)" >&2
           exit 2 ;;
    esac
done
want() { case ",$STAGES," in *",$1,"*) return 0 ;; *) return 1 ;; esac; }
stage() {  # stage KEY NAME LIMIT_S command...
    local key="$1" name="$2" limit="$3"; shift 3
    want "$key" || { echo "=== $name skipped (STAGES=$STAGES)"; return 0; }
    echo "=== [$(date -u +%H:%M:%S) +$((SECONDS - START))s] $name (limit ${limit}s): $*"
    timeout -k 10 --signal=INT "$limit" "$@"
    local rc=$?
    [ $rc -eq 124 ] && echo "!!! $name hit its ${limit}s limit"
    echo "=== $name rc=$rc (+$((SECONDS - START))s)"
    return 0
}

if [ -z "$DRY" ]; then
    # The seeds' matrix: H {4,8}; D, Dv {64,128} (all four pairs); N {64,256,1024};
    # L 16..1024 (plus 1..8: the rows the threshold would send to SDPA); few/many/mixed.
    # Decode: seed 002 (h {2,4}, D and Dv {64,128}, l_sel 64, L 128..1024 = 2..16 blocks)
    # at B*G rows {4,64,256}.
    SWEEP=(--N 64,256,1024 --H 4,8 --dims 64:64,64:128,128:64,128:128 --L_list 1,2,4,8,16,32,64,128,256,512,1024
           --dist few,many,mixed --iters 25 --warmup 3 --budget-s 240)
    DECODE=(--decode 1 --N 4,64,256 --H 2,4 --dims 64:64,64:128,128:64,128:128 --L_list 128,256,512,1024 --l_sel 64
            --iters 25 --warmup 3 --budget-s 50)
    PYTEST_ENV=(NSA_BENCH_FLEX=1)
    NSA=(--iters 10 --warmup 2 --budget-s 30 --flex-max-T 0)  # flex is timed in the pytest suite
    # 550 s at most: one device call.  Measured at c3c7eb7: sweep 211 s, decode 53 s,
    # pytest-benchmark 94 s (FlexAttention's compile), nsa 25 s.
    LIM=(15 270 70 130 45 20)
else
    SWEEP=(--dry-run --N 4 --H 4 --dims 64:64 --L_list 16,64,128 --dist few,many,mixed --mae-rows 4)
    DECODE=(--dry-run --decode 1 --N 2 --H 2 --dims 64:64 --L_list 128,256 --l_sel 64 --mae-rows 2)
    PYTEST_ENV=(NSA_BENCH_DRYRUN=1 NSA_BENCH_FLEX=0)  # CPU plumbing check: interpreter, host clock
    NSA=(--dry-run --flex-max-T 0)
    LIM=(60 300 120 120 300 60)
fi

stage env "environment" "${LIM[0]}" "$PY" - <<'EOF'
import json, subprocess
from nsa_triton_sel.compat.core.env import fingerprint
print(json.dumps(fingerprint(), indent=1, default=str))
try:
    print(subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=10).stdout)
except Exception as exc:
    print("nvidia-smi:", exc)
EOF

# The sweeps append: start each from an empty file.
want sweep && rm -f "$OUT/sel_dense.csv" "$OUT/sel_varlen.csv"
want decode && rm -f "$OUT/sel_decode.csv"
stage sweep "sweep dense+varlen" "${LIM[1]}" "$PY" -m bench.perf.bench_sel_triton "${SWEEP[@]}" --csv "$OUT/sel_{mode}.csv"
stage decode "sweep decode" "${LIM[2]}" "$PY" -m bench.perf.bench_sel_triton "${DECODE[@]}" --csv "$OUT/sel_{mode}.csv"
stage pytest "pytest-benchmark" "${LIM[3]}" env "${PYTEST_ENV[@]}" "$PY" -m pytest bench/suites/test_bench_sel.py -q -p no:cacheprovider \
    --benchmark-json="$OUT/pytest_bench.json" --benchmark-group-by=group \
    --benchmark-columns=min,median,iqr,rounds
stage nsa "nsa contenders" "${LIM[4]}" "$PY" -m bench.perf.bench_nsa "${NSA[@]}" --csv "$OUT/nsa.csv"
stage report "threshold report" "${LIM[5]}" "$PY" -m bench.analysis.sel_threshold_from_csv \
    --dense "$OUT/sel_dense.csv" --varlen "$OUT/sel_varlen.csv" --decode "$OUT/sel_decode.csv" \
    --margin 1.2 --max-mae 1e-3 --out "$OUT/report.md" --no-plot --allow-missing

echo "=== done in $((SECONDS - START))s; files:"
ls -la "$OUT"
exec 1>&- 2>&-  # let tee write the end of run.log before the script returns
sleep 1
