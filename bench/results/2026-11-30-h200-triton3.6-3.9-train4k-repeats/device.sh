#!/usr/bin/env bash
# Device calls of this folder (two H200s of one host, Triton 3.6.0 installed): the canonical NSA shape's
# forward + backward at T = 4K (the refresh's `fwd+bwd 4K` point, test_train[train-T4096-random-ours-api]) and its
# forward at 4K, measured again and again for 3.6.0, 3.7.0 and 3.9.0, one process at a time on GPU 0 with GPU 1
# idle, the releases' order rotated every round, so that a difference between releases is told apart from the
# spread between runs of one release.  3.7.0 and 3.9.0 come as a bench/device/slim_triton.py set (--arch 90) carried
# one part a call in PARTS (an ignored folder).  From the repository root:
#   PARTS=.carry/q0 bash device.sh start      (call 1: the test tools and part 000)
#   PARTS=.carry/qN bash device.sh feed       (each later part)
#   ROUNDS=R bash device.sh run               (unpack, then R rounds: $OUT/rounds.tar.gz and the table)
set -u
cd "$(dirname "$0")/../../.." || exit 2
P=/tmp/train4k-parts; T=/tmp/train4k-trees
mkdir -p "$P" "$T"
case "${1:-}" in
start)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 2
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc
    mv -f "$PARTS"/triton-slim.*.xz "$P/" && ls "$P" ;;
feed) mv -f "$PARTS"/triton-slim.*.xz "$P/" && ls "$P" ;;
run)
    export PYTHONPATH_BASE="$PWD/src:$PWD:/tmp/site" PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
    export NSA_BENCH_T=4096 NSA_BENCH_FLEX=0 CUDA_VISIBLE_DEVICES=0
    R=/tmp/train4k-runs; rm -rf "$R"; mkdir -p "$R"   # one archive comes back: a call returns few files
    python3 bench/device/slim_triton.py unpack --parts "$P" --dest "$T" | tail -n 1
    releases=(3.6.0 3.7.0 3.9.0)
    for r in $(seq 1 "${ROUNDS:-6}"); do
        for i in 0 1 2; do
            v=${releases[$(( (i + r) % 3 ))]}
            tree=""; [ "$v" = 3.6.0 ] || tree="$T/triton-$v:"
            t0=$SECONDS
            PYTHONPATH="$tree$PYTHONPATH_BASE" python3 -m pytest bench/suites/test_bench_sel.py -q -p no:cacheprovider \
                -k "(test_train and train-T4096-random and ours-api) or (test_nsa and nsa-T4096-random and triton)" \
                --benchmark-json="$R/round-$r-triton-$v.json" > "$R/round-$r-triton-$v.log" 2>&1
            echo "round $r triton $v: rc $? in $((SECONDS - t0)) s"
        done
    done
    tar czf "$OUT/rounds.tar.gz" -C "$R" .
    python3 - "$R" <<'PY'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
rows = {}
for f in sorted(out.glob("round-*-triton-*.json")):
    _, r, _, v = f.stem.split("-", 3)
    for b in json.loads(f.read_text())["benchmarks"]:
        point = "fwd+bwd 4K" if "train" in b["group"] else "fwd 4K"
        rows.setdefault((v, point), []).append((int(r), b["stats"]["median"] * 1e3, b["stats"]["min"] * 1e3))
print("| Triton | point | run medians ms (round order) | median of runs | range |")
print("|---|---|---|---|---|")
for (v, point), runs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    meds = [m for _, m, _ in sorted(runs)]
    print(f"| {v} | {point} | {' '.join(f'{m:.2f}' for m in meds)} | {statistics.median(meds):.2f} | "
          f"{min(meds):.2f}-{max(meds):.2f} |")
PY
    ;;
*) echo "usage: device.sh start | feed | run (see the header)" >&2; exit 2 ;;
esac
