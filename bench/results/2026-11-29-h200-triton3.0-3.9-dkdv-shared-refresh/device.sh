#!/usr/bin/env bash
# Device calls of this folder (two H200s of one host, Triton 3.6.0 installed): the GPU evidence of the 13 releases on
# the current kernels, then the GPU check of the change against the landed main.  The other twelve releases come as
# three bench/device/slim_triton.py sets (parts named NNN-of-006, -of-008, -of-005), carried a few parts a call in
# .carry/ (PARTS=.carry/<folder>: the folder this call carries); one set at a time enters the refresh's parts folder (the unpacker reads one stream), the next once the
# previous one is unpacked.  From the repository root:
#   COMMIT=<sha> bash device.sh start     (call 1, carrying .whl: the test tools, then the refresh on 3.6.0 at once)
#   COMMIT=<sha> PARTS=.carry/C2 bash device.sh feed   (each call carrying parts, in its own folder)
#   bash device.sh status
#   COMMIT=<sha> bash device.sh collect S (wait up to S seconds for the refresh, copy its results to $OUT)
#   bash device.sh check BASE_SRC:LABEL   (bench/ab/gpu_check.sh $OUT contract,ab,host against BASE_SRC)
set -u
cd "$(dirname "$0")/../../.." || exit 2
R=.refresh
SETS="006 008 005"  # the order the sets enter
mkdir -p "$R/stage" "$R/parts" .carry/none
alive() { [ -f "$R/$1.pid" ] && kill -0 "$(cat "$R/$1.pid")" 2>/dev/null; }
whole() {  # the set of these parts is all there: NNN-of-MMM for every NNN < MMM
    local m n
    m=$(ls "$R/parts" | sed -n 's/^triton-slim\.[0-9]*-of-\([0-9]*\)\.xz$/\1/p' | head -1)
    [ -n "$m" ] || return 1
    n=$(ls "$R/parts" | grep -c "of-$m\.xz$")
    [ "$n" -eq $((10#$m)) ]
}
stage_parts() {
    mv -f "${PARTS:-.carry/in}"/triton-slim.*.xz "$R/stage/" 2>/dev/null
    local t0=$SECONDS cur next s
    # a whole set whose unpacker ended is done: its parts go (the next set's part 000 starts a new unpacker)
    if whole && [ -n "$(ls "$R/stage")" ]; then
        while alive unpack && [ $((SECONDS - t0)) -lt 120 ]; do sleep 2; done
        alive unpack || { echo "stage: set of-$(ls "$R/parts" | head -1 | sed 's/.*-of-//') unpacked; its parts removed"; rm -f "$R"/parts/triton-slim.*; }
    fi
    cur=$(ls "$R/parts" | sed -n 's/.*-of-\([0-9]*\)\.xz$/\1/p' | head -1)
    next="$cur"
    if [ -z "$cur" ]; then
        for s in $SETS; do ls "$R/stage" | grep -q "000-of-$s\.xz$" && { next=$s; break; }; done
    fi
    [ -n "$next" ] && for f in "$R"/stage/triton-slim.*-of-"$next".xz; do [ -e "$f" ] && mv -f "$f" "$R/parts/"; done
    echo "stage: parts $(ls "$R/parts" | tr '\n' ' ')| waiting $(ls "$R/stage" | tr '\n' ' ')"
    ls "$R/trees" 2>/dev/null | grep '\.ready$' | tr '\n' ' '; echo
}
case "${1:-}" in
start)
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    ;;
check)
    export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
    exec bash bench/ab/gpu_check.sh "$OUT" contract,ab,host "$2"
    ;;
esac
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
[ "${1:-}" = feed ] && stage_parts
export REFRESH_CARRY=.carry/none REFRESH_EXPECT=all REFRESH_INSTALLED=1
export REFRESH_WAIT_S="${WAIT_S:-1000}" REFRESH_DEADLINE_S="${DEADLINE_S:-1300}"
export NSA_SEL_GIT_COMMIT="${COMMIT:-}"
case "${1:-}" in
start|feed) bash bench/device/device_refresh.sh feed ;;
status|collect) bash bench/device/device_refresh.sh "$@" ;;
*) echo "usage: device.sh start | feed | status | collect S | check BASE_SRC:LABEL" >&2; exit 2 ;;
esac
