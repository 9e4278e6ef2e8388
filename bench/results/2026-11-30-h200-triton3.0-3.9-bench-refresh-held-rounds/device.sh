#!/usr/bin/env bash
# Device calls of this folder (two H200s of one host, Triton 3.6.0 installed): the bench stage alone (its untimed
# warm pass, then the timed run) of all 13 releases, the installed 3.6.0 among them, sharded over the two GPUs by
# python -m nsa_triton_sel.compat.lanes.gpu_refresh --stages bench: the pytest-benchmark suite with its eager rounds
# held while the host enqueues them.  The releases come as one bench/device/slim_triton.py set
# (triton-slim.NNN-of-MMM.xz, --arch 90), carried one part a call in its own ignored folder (PARTS=.carry/pN); the
# working tree travels without bench/results/ (but this folder) and the ledger, which no stage reads.  From the
# repository root:
#   COMMIT=<sha> PARTS=.carry/p0 bash device.sh start   (call 1, carrying .whl and .carry/p0)
#   COMMIT=<sha> PARTS=.carry/pN bash device.sh feed    (each later call carrying one part)
#   bash device.sh collect S                             (wait up to S seconds for the refresh, results into $OUT)
set -u
cd "$(dirname "$0")/../../.." || exit 2
if [ "${1:-}" = start ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 2
    nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
    nproc
fi
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
export REFRESH_CARRY="${PARTS:-.carry/none}" REFRESH_INSTALLED=1 REFRESH_EXPECT=all REFRESH_ARGS="--stages bench"
export REFRESH_WAIT_S="${WAIT_S:-400}" REFRESH_DEADLINE_S="${DEADLINE_S:-1000}"
export NSA_SEL_GIT_COMMIT="${COMMIT:-}"
case "${1:-}" in
start|feed) bash bench/device/device_refresh.sh feed ;;
status|collect) bash bench/device/device_refresh.sh "$@" ;;
*) echo "usage: device.sh start | feed | status | collect S (see the header)" >&2; exit 2 ;;
esac
