# Device calls: the GPU contract stage of the twelve releases of the slim parts on this runtime, on one H200.
# Each call carries one 27-MiB piece of the parts' concatenated stream (.carry/qNN: the 35-MiB tree leaves no
# room for a whole 30-MiB part) and .carry/mini (packaging); the pieces are appended in order to
# .carry/acc/stream (ignored, kept while the machine is warm) and every original part whose bytes are all there
# is cut out into .carry/in for bench/device/device_refresh.sh feed.  From the repository root:
#   COMMIT=<sha> bash device_refresh_pieces.sh               (one call per piece)
#   COMMIT=<sha> bash device_refresh_pieces.sh collect [S]   (then: wait up to S seconds and collect)
set -u
python3 -c "import packaging" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/mini/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p .carry/acc .carry/in
for f in .carry/q*/piece.*; do [ -e "$f" ] && mv "$f" .carry/acc/; done
python3 - <<'PY'
import os
acc, PART, TOTAL, N = ".carry/acc", 31457280, 317733548, 11
stream, nxt_file = os.path.join(acc, "stream"), os.path.join(acc, "next")
nxt = int(open(nxt_file).read()) if os.path.exists(nxt_file) else 0
while os.path.exists(piece := os.path.join(acc, f"piece.{nxt:02d}")):
    with open(stream, "ab") as o, open(piece, "rb") as i:
        o.write(i.read())
    os.remove(piece)
    nxt += 1
open(nxt_file, "w").write(str(nxt))
size = os.path.getsize(stream) if os.path.exists(stream) else 0
for k in range(N):
    lo, hi = k * PART, min((k + 1) * PART, TOTAL)
    mark = os.path.join(acc, f"emitted.{k:03d}")
    if size >= hi and not os.path.exists(mark):
        tmp = f".carry/in/.part{k}"
        with open(stream, "rb") as i, open(tmp, "wb") as o:
            i.seek(lo)
            o.write(i.read(hi - lo))
        os.rename(tmp, f".carry/in/triton-slim.{k:03d}-of-{N:03d}.xz")
        open(mark, "w").close()
        print("part", k, "whole")
print("stream bytes", size, "of", TOTAL, "; pieces taken", nxt)
PY
export REFRESH_CARRY=.carry/in REFRESH_INSTALLED=0 REFRESH_WAIT_S=800 REFRESH_DEADLINE_S=1150
export REFRESH_EXPECT=3.2.0,3.3.0,3.3.1,3.4.0,3.5.0,3.5.1,3.7.0,3.7.1,3.8.0,3.9.0
export REFRESH_ARGS="--stages contract --no-warm" NSA_SEL_GIT_COMMIT="${COMMIT:-}"
bash bench/device/device_refresh.sh feed
[ "${1:-}" = collect ] && bash bench/device/device_refresh.sh collect "${2:-480}"
exit 0
