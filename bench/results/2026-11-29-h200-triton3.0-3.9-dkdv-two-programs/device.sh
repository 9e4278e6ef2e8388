#!/usr/bin/env bash
# Device calls of this folder (one H200, Triton 3.6.0 installed): first the GPU check of the change against the
# landed main on a quiet GPU (and the dk/dv steps the plan now takes), then the GPU evidence of the 13 releases on
# the new kernels (the correctness stages: compile, parity, contract, canary; no benchmark stage, which takes the
# GPU alone, one release at a time).  The other twelve releases come as three bench/device/slim_triton.py sets
# (parts named NNN-of-006, -of-008, -of-005), carried a few parts a call in .carry/ (PARTS=.carry/<folder>: the
# folder this call carries); one set at a time enters the refresh's parts folder (the unpacker reads one stream),
# the next once the previous one is unpacked.  From the repository root:
#   bash device.sh check BASE_SRC:LABEL   (call 1, carrying .whl and BASE_SRC: the test tools, then
#                                          bench/ab/gpu_check.sh $OUT contract,ab,host and bench.probes.dkdv_steps)
#   COMMIT=<sha> bash device.sh start     (call 2: the refresh on 3.6.0 at once)
#   COMMIT=<sha> PARTS=.carry/C2 bash device.sh feed   (each call carrying parts, in its own folder)
#   bash device.sh status
#   COMMIT=<sha> bash device.sh collect S (wait up to S seconds for the refresh, copy its results to $OUT)
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
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
    export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
    bash bench/ab/gpu_check.sh "$OUT" contract,ab,host "$2"; rc=$?
    python3 -m bench.probes.dkdv_steps 8192 32768 32768:192:192 32768:192:128 32768:128:128 --steps 32x3,32x2 \
        2>&1 | tee "$OUT/dkdv-steps-plan.log"
    exit $rc
    ;;
esac
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
[ "${1:-}" = feed ] && stage_parts
export REFRESH_CARRY=.carry/none REFRESH_EXPECT=all REFRESH_INSTALLED=1
export REFRESH_WAIT_S="${WAIT_S:-400}" REFRESH_DEADLINE_S="${DEADLINE_S:-1100}"
export REFRESH_ARGS="--stages compile,parity,contract,canary --no-warm"
export NSA_SEL_GIT_COMMIT="${COMMIT:-}"
case "${1:-}" in
start|feed) bash bench/device/device_refresh.sh feed ;;
status|collect) bash bench/device/device_refresh.sh "$@" ;;
*) echo "usage: device.sh check BASE_SRC:LABEL | start | feed | status | collect S" >&2; exit 2 ;;
esac
