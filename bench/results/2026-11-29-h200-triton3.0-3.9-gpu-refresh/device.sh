#!/usr/bin/env bash
# Device calls of this folder (one H200, Triton 3.6.0 installed): the GPU evidence of Triton releases on the current
# kernels, brought as bench/device/slim_triton.py parts (one per call in .carry/in), then the GPU A/B against the
# landed main.  Machine 1: 3.6.0 (installed), 3.0.0, 3.8.0, 3.9.0 (the defaults); machine 2:
# EXPECT=3.1.0,3.2.0,3.3.1,3.4.0,3.5.1,3.7.1 INSTALLED=0.  From the repository root:
#   COMMIT=<sha> bash device.sh tools          (call 1, carrying .whl: the test tools into /tmp/site)
#   COMMIT=<sha> bash device.sh feed           (one call per part: bench/device/device_refresh.sh feed)
#   COMMIT=<sha> bash device.sh collect [S]    (wait up to S seconds for the refresh, copy its results to $OUT)
#   bash device.sh ab BASE_SRC:LABEL           (bench/ab/gpu_check.sh $OUT ab against BASE_SRC, after the refresh)
set -u
cd "$(dirname "$0")/../../.." || exit 2
if [ "${1:-}" = tools ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && ls /tmp/site | head -50
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
    exit 0
fi
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
if [ "${1:-}" = ab ]; then
    export PYTHONPATH=$PWD/src:$PWD:/tmp/site
    exec bash bench/ab/gpu_check.sh "$OUT" ab "$2"
fi
export REFRESH_CARRY=.carry/in REFRESH_EXPECT="${EXPECT:-3.0.0,3.8.0,3.9.0}" REFRESH_INSTALLED="${INSTALLED:-1}"
export REFRESH_WAIT_S=600 REFRESH_DEADLINE_S="${DEADLINE_S:-1140}"
export NSA_SEL_GIT_COMMIT="${COMMIT:-}"
bash bench/device/device_refresh.sh "$@"
