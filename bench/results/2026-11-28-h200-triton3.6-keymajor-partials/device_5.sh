# Device call 5 (H200): the A/B's small-group rows again and the host rows' verdict (paired rounds), against
# the landed main 5b0b2eb.
set -u
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
T0=$SECONDS
PYTHONPATH=$PWD/src:$PWD timeout -k 5 90 python3 -m bench.ab.host_pair --base-src .carry/base-landed/src --base-name main-5b0b2eb --out $OUT/host-pair > $OUT/host-pair.log 2>&1
echo "host rc=$? [$((SECONDS - T0))s]"; cat $OUT/host-pair/host-pair.md 2>/dev/null || tail -5 $OUT/host-pair.log
PYTHONPATH=$PWD/src:$PWD timeout -k 5 100 python3 -m bench.ab.run --base-src .carry/base-landed/src --base-name main-5b0b2eb --out $OUT/ab-small -k small > $OUT/ab-small.log 2>&1
echo "ab rc=$? [$((SECONDS - T0))s]"; cat $OUT/ab-small/ab.md 2>/dev/null || tail -5 $OUT/ab-small.log
