#!/usr/bin/env bash
# The device calls of this folder (H200, torch 2.11 + Triton 3.6 as installed), from the repository root, with
# the tools' wheels in .whl and the landed main's src/ in .carry/base-landed/src (both carried):
#   bash bench/results/2026-11-29-h200-triton3.6-host-launches/device.sh probe   # host vs GPU, base then head;
#                                                                                # the GPU kernel suites on head
#   bash bench/results/2026-11-29-h200-triton3.6-host-launches/device.sh check   # contract + A/B against base
set -u
OUT="${OUT:?set OUT to the output folder}"
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl > /dev/null 2>&1
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
BASE=.carry/base-landed/src
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
case "${1:?probe or check}" in
probe)
    for side in base head; do
        src=src; [ $side = base ] && src=$BASE
        echo "=== [$(date -u +%T)] probe, $side ($src)"
        PYTHONPATH="/tmp/site:$src:$PWD" timeout 240 python3 -m bench.probes.keymajor_host --T 2048,4096,8192,16384 \
            --h 1,4,8 --steps 4096:8 --profile= 2>&1 | grep -v -i warn | tee "$OUT/probe-$side.log"
    done
    echo "=== [$(date -u +%T)] GPU kernel suites (head)"
    PYTHONPATH="/tmp/site:$PWD/src:$PWD" timeout 280 python3 -m pytest -p no:cacheprovider -q -m gpu -n 4 \
        tests/library/kernels/test_backward_gpu.py tests/library/kernels/test_keymajor_gpu.py \
        tests/library/kernels/test_kernels_gpu.py tests/library/kernels/test_bind.py > "$OUT/kernels-gpu.log" 2>&1
    tail -3 "$OUT/kernels-gpu.log"
    ;;
check)
    PYTHONPATH=/tmp/site bash bench/ab/gpu_check.sh "$OUT" contract,ab "$BASE:main-d6aa423"
    ;;
esac
