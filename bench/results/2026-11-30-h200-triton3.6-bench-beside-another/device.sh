#!/usr/bin/env bash
# One device call on two H200s of one host (Triton 3.6.0 installed): the refresh's bench stage of one release
# (gpu_lane --stages bench, with the refresh's selection and environment), run alone on GPU 0 with GPU 1 idle and
# run on GPU 0 while the same stage runs on GPU 1 (as the refresh runs two releases' benchmarks at once), the two
# conditions alternating for ROUNDS rounds, after an untimed warm pass that fills each GPU's Triton cache.  Writes
# $OUT/runs.tar.gz (every run's results and log) and prints the table of the MATRIX's four speed points.
#   bash device.sh            (from the repository root; ROUNDS default 3)
set -u
cd "$(dirname "$0")/../../.." || exit 2
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 2
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader; nproc
R=/tmp/beside; rm -rf "$R"; mkdir -p "$R"
export PYTHONPATH="$PWD/src:$PWD:/tmp/site" PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
# as gpu_refresh.Refresh.launch sets them for the bench stage
export OMP_NUM_THREADS=1 TORCHINDUCTOR_COMPILE_THREADS=1 NSA_SEL_GPU_WORKERS=1 NSA_SEL_STAGE_LIMITS=bench=240 \
    NSA_BENCH_T=4096,32768 NSA_BENCH_FLEX=0 NSA_SEL_GIT_COMMIT="${COMMIT:-unknown}" \
    NSA_SEL_OFF_PAIR_NOTE="the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel"
SEL='-k "not local and not crossover and not dispatch"'
bench() {  # bench GPU NAME [EXTRA]: one bench stage on GPU into $R/NAME
    CUDA_VISIBLE_DEVICES=$1 TRITON_CACHE_DIR=$R/cache-$1 NSA_SEL_BENCH_ARGS="$SEL${3:-}" \
        python3 -m nsa_triton_sel.compat.lanes.gpu_lane --results "$R/$2" --stages bench --constraints constraints \
        > "$R/$2.log" 2>&1
    echo "$2: rc $? at +$SECONDS s"
}
bench 0 warm-0 " --benchmark-disable" & bench 1 warm-1 " --benchmark-disable" & wait
for r in $(seq 1 "${ROUNDS:-3}"); do
    alone() { bench 0 "r$r-alone"; }
    pair() { bench 0 "r$r-beside" & bench 1 "r$r-partner" & wait; }
    if [ $((r % 2)) = 1 ]; then alone; pair; else pair; alone; fi
done
tar czf "$OUT/runs.tar.gz" -C "$R" --exclude='cache-*' --exclude='warm-*' .
python3 - "$R" <<'PY'
import json, pathlib, sys
points = (("fwd 4K", "nsa-T4096-random", "triton"), ("fwd 32K", "nsa-T32768-random", "triton"),
          ("fwd+bwd 4K", "train-T4096-random", "ours-api"), ("fwd+bwd 32K", "train-T32768-random", "ours-api"))
print("| run | " + " | ".join(p[0] for p in points) + " |")
print("|---|" + "---|" * len(points))
for d in sorted(p for p in pathlib.Path(sys.argv[1]).iterdir() if p.is_dir() and p.name.startswith("r")):
    f = next(d.rglob("*benchmark.json"), None)
    if f is None:
        print(f"| {d.name} | no benchmark file |"); continue
    med = {}
    for b in json.loads(f.read_text())["benchmarks"]:
        if "[" not in b["name"]:
            continue
        param = b["name"][b["name"].index("[") + 1:].rstrip("]")
        for label, group, impl in points:
            if param == f"{group}-{impl}":
                med[label] = b["stats"]["median"] * 1e3
    print(f"| {d.name} | " + " | ".join(f"{med[p[0]]:.3f}" if p[0] in med else "—" for p in points) + " |")
PY
