# Device call 7 (H200): the whole-tile fast path in plain Triton (dkdv_variants LEAN bit 8: a chunk whose entries
# all read the whole tile walks without the key mask, chosen once per chunk), twice in opposite orders, beside the
# scalar feed and the best Gluon walk of this folder.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
L=hp-pf1-s3,hp-pf1-s3-w,feed-s4-o1,feed-s3-o1,feed-s2-o1-w,feed-s3-o1-w,feed-s4-o1-w,lean14-s2-o1,lean14-s3-o1
R=lean14-s3-o1,lean14-s2-o1,feed-s4-o1-w,feed-s3-o1-w,feed-s2-o1-w,feed-s3-o1,feed-s4-o1,hp-pf1-s3-w,hp-pf1-s3
timeout 170 python3 -m bench.probes.dkdv_variants --T 32768,8192,65536 --sel random,local --only $L --json $OUT/triton-w-1.json 2>&1 | tee $OUT/triton-w-1.log
echo "=== [$((SECONDS - T0))s] reversed"
timeout 170 python3 -m bench.probes.dkdv_variants --T 32768,8192,65536 --sel random,local --only $R --json $OUT/triton-w-2.json 2>&1 | tee $OUT/triton-w-2.log
echo "=== [$((SECONDS - T0))s] gluon"
timeout 100 python3 -m bench.probes.dkdv_gluon --T 32768,8192,65536 --sel random,local --only g-nb4-fast-i32 --json $OUT/gluon-ref.json 2>&1 | tee $OUT/gluon-ref.log
echo "=== [$((SECONDS - T0))s] done"
