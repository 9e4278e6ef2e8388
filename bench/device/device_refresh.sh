#!/usr/bin/env bash
# The 13-release GPU refresh on the device machine, driven over several device calls:
#
#   bash bench/device/device_refresh.sh feed       # call 1..K: take the parts this call carried in .carry/, start (once)
#                                           #   the unpacker and the refresh in the background, print progress
#   bash bench/device/device_refresh.sh status     # progress so far
#   bash bench/device/device_refresh.sh collect [WAIT_S]   # wait up to WAIT_S (default 540) for the refresh to end, then
#                                           #   copy results into $OUT (<= 8 files); again if it was not done
#   bash bench/device/device_refresh.sh stop       # end the background work (its partial results stay collectable)
#
# Parts are bench/device/slim_triton.py's triton-slim.NNN-of-MMM.xz, carried in the ignored folder .carry/ (the device
# tool replaces a carried folder on every call, so `feed` moves them at once into .refresh/stage/, which no call
# names and which therefore stays while the machine is warm).  Several sets (packs of different releases, whose part
# counts MMM differ) may be carried in any order: one set at a time enters .refresh/parts/, the next once the one
# before it is unpacked (`feed` and `collect` see to it).  The unpacker (setsid, in the background) hands each
# release over as soon as its parts are there; the refresh (python -m nsa_triton_sel.compat.lanes.gpu_refresh, setsid)
# runs the installed Triton at once and every release tree as it appears, from a snapshot of the repository in
# .refresh/repo/ (each device call copies the working tree anew; a process importing a file being replaced fails),
# sharded over the visible GPUs: correctness stages side by side, then the benchmarks one release at a time per GPU.  Everything lives under .refresh/ (ignored): stage/, parts/, trees/, out/, logs.
#
# Environment: NSA_SEL_GIT_COMMIT (the commit being run: the device copy has no .git), REFRESH_EXPECT (default
# all: the 13 releases of lanes.toml), REFRESH_WAIT_S (how long parts may keep arriving, default 900),
# REFRESH_DEADLINE_S (the background run's own limit, default 1380: a machine is held 30 minutes at most, and the
# results must be collected before it goes back), REFRESH_ARGS (more gpu_refresh options),
# REFRESH_INSTALLED=0 (leave the installed Triton out), REFRESH_SETS (the order the sets enter, by part count:
# "006 008 005"; default: ascending), REFRESH_DIR / REFRESH_CARRY (default .refresh / .carry), PYTHON (default
# python3).
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
PY="${PYTHON:-python3}"
R="${REFRESH_DIR:-.refresh}"
CARRY="${REFRESH_CARRY:-.carry}"
mkdir -p "$R/parts" "$R/stage" "$R/trees" "$R/out"
R="$(cd "$R" && pwd)"
TOP="$PWD"
BASE_PATH="${PYTHONPATH:-}"  # what the caller put on the path (tools brought as wheels), after the snapshot's
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
export NSA_SEL_OFF_PAIR_NOTE="${NSA_SEL_OFF_PAIR_NOTE:-the GPU machine has no network: its preinstalled torch runs every Triton brought as a wheel}"

INSTALLED="--installed"
[ "${REFRESH_INSTALLED:-1}" = 0 ] && INSTALLED=""

alive() { [ -f "$R/$1.pid" ] && kill -0 "$(cat "$R/$1.pid")" 2>/dev/null; }

progress() {
    echo "--- $(date -u +%T) parts here: $(ls "$R/parts" | grep -c 'triton-slim') / trees ready: $(ls "$R/trees" | grep -c '\.ready$')"
    alive unpack && echo "unpacker running (pid $(cat "$R/unpack.pid"))" || { [ -f "$R/unpack.log" ] && tail -n 2 "$R/unpack.log"; }
    alive refresh && echo "refresh running (pid $(cat "$R/refresh.pid"))" || echo "refresh not running"
    [ -f "$R/out/progress.log" ] && tail -n "${1:-12}" "$R/out/progress.log"
    [ -f "$R/out/DONE" ] && { echo "=== DONE"; cat "$R/out/DONE"; }
    return 0
}

# Parts of several sets (packs made at different times, told apart by their count MMM) may arrive in any order:
# the unpacker reads one stream and finds a part by its number alone, so a set's parts wait in $R/stage until the
# set before it is unpacked (its parts are then removed), and only then enter $R/parts.  REFRESH_SETS orders the
# sets ("006 008 005"; default: by part count).
set_of() { sed -n 's/^triton-slim\.[0-9]*-of-\([0-9]*\)\.xz$/\1/p'; }

stage() {  # stage [WAIT_S]: retire an unpacked set (a whole set with another waiting: up to WAIT_S for its
           # unpacker), bring in the next, start the unpacker where a set's part 000 is in and none runs
    local t0=$SECONDS cur s f
    cur=$(ls "$R/parts" | set_of | head -1)
    if [ -n "$cur" ] && [ "$(cat "$R/unpack.set" 2>/dev/null)" = "$cur" ]; then
        if [ "$(ls "$R/parts" | grep -c "of-$cur\.xz$")" -eq $((10#$cur)) ] && [ -n "$(ls "$R/stage")" ]; then
            while alive unpack && [ $((SECONDS - t0)) -lt "${1:-0}" ]; do sleep 2; done
        fi
        if ! alive unpack && tail -n 1 "$R/unpack.log" 2>/dev/null | grep -q 'release(s) unpacked in'; then
            echo "feed: set of-$cur unpacked; its parts removed"
            rm -f "$R"/parts/triton-slim.* "$R/unpack.set"
            cur=""
        fi
    fi
    if [ -z "$cur" ]; then
        for s in ${REFRESH_SETS:-$(ls "$R/stage" | set_of | sort -u)}; do
            ls "$R/stage" | grep -q "^triton-slim\.000-of-$s\.xz$" && { cur=$s; break; }
        done
    fi
    [ -n "$cur" ] && for f in "$R"/stage/triton-slim.*-of-"$cur".xz; do [ -e "$f" ] && mv -f "$f" "$R/parts/"; done
    if ! alive unpack && [ -n "$cur" ] && [ -e "$R/parts/triton-slim.000-of-$cur.xz" ]; then  # a failed one again
        setsid nohup "$PY" bench/device/slim_triton.py unpack --parts "$R/parts" --dest "$R/trees" \
            --follow "${REFRESH_WAIT_S:-900}" > "$R/unpack.log" 2>&1 < /dev/null &
        echo $! > "$R/unpack.pid"
        echo "$cur" > "$R/unpack.set"
        echo "feed: unpacker started on set of-$cur (pid $!)"
    fi
    [ -n "$(ls "$R/stage")" ] && echo "feed: waiting for the set before them: $(ls "$R/stage" | tr '\n' ' ')"
    return 0
}

feed() {
    local n=0 f
    for f in "$CARRY"/triton-slim.*.xz; do
        [ -e "$f" ] || continue
        mv -f "$f" "$R/stage/" && n=$((n + 1))   # same filesystem: a rename, so a part is whole when it appears
    done
    echo "feed: $n part(s) taken"
    stage 120
    if ! alive refresh && [ ! -f "$R/out/DONE" ]; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null
        # The refresh runs from a snapshot of the repository: every device call copies the working tree anew, and a
        # file replaced while a stage's process imports it fails that process (a pytest collection, a compile child).
        rm -rf "$R/repo" && mkdir -p "$R/repo" \
            && tar --exclude="./${R#"$TOP"/}" --exclude=./.refresh --exclude=./.carry --exclude=./.whl --exclude=./.git \
                --exclude='./.venv*' --exclude=./.nox --exclude=./.pytest_cache --exclude=./.benchmarks \
                --exclude=./.hypothesis --exclude=./.triton-cache --exclude=./build --exclude=./out \
                --exclude=__pycache__ -cf - . | tar -xf - -C "$R/repo"
        # shellcheck disable=SC2086  # REFRESH_ARGS is a list of options
        PYTHONPATH="$R/repo/src:$R/repo${BASE_PATH:+:$BASE_PATH}" setsid nohup "$PY" \
            -m nsa_triton_sel.compat.lanes.gpu_refresh --constraints "$R/repo/constraints" --out "$R/out" \
            --trees "$R/trees" $INSTALLED --expect "${REFRESH_EXPECT:-all}" --wait-s "${REFRESH_WAIT_S:-900}" \
            --deadline-s "${REFRESH_DEADLINE_S:-1380}" ${REFRESH_ARGS:-} > "$R/refresh.log" 2>&1 < /dev/null &
        echo $! > "$R/refresh.pid"
        echo "feed: refresh started from the snapshot $R/repo (pid $(cat "$R/refresh.pid"))"
    fi
    sleep 5
    progress 8
}

collect() {
    local wait_s="${1:-540}" t0=$SECONDS dest="${OUT:?collect writes into \$OUT (the device tool sets it)}"
    # a set still waiting in $R/stage enters as soon as the one before it is unpacked
    while [ ! -f "$R/out/DONE" ] && [ $((SECONDS - t0)) -lt "$wait_s" ]; do stage | grep -v waiting >> "$R/stage.log"; sleep 5; done
    [ -f "$R/out/DONE" ] && echo "collect: the refresh is done" || echo "collect: not done after ${wait_s} s: partial results (collect again)"
    tar czf "$dest/results.tar.gz" -C "$R/out" results 2>/dev/null
    tar czf "$dest/logs.tar.gz" -C "$R/out" logs 2>/dev/null
    for f in status.json progress.log summary.txt; do [ -f "$R/out/$f" ] && cp "$R/out/$f" "$dest/"; done
    cat "$R/stage.log" "$R/unpack.log" "$R/refresh.log" > "$dest/driver.log" 2>/dev/null
    ls -la "$dest"
    progress 40
}

stop() {
    local p
    for p in refresh unpack; do
        alive "$p" && kill -TERM "$(cat "$R/$p.pid")" && echo "stop: $p signalled"
    done
    return 0
}

case "${1:-}" in
    feed) feed ;;
    status) progress 40 ;;
    collect) collect "${2:-540}" ;;
    stop) stop ;;
    *) echo "usage: bash bench/device/device_refresh.sh feed | status | collect [WAIT_S] | stop" >&2; exit 2 ;;
esac
