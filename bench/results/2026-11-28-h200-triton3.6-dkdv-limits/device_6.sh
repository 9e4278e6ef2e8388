# Device call 6 (H200): the scalar feed of the dk/dv walk (entries as scalars, int32 row offsets chosen per
# pair, LSE and delta interleaved, no column mask), twice in opposite orders, against the shipped kernel.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
L=hp-pf1-s3,lean6-s3-o1,feed-s3,feed-s3-o1,feed-s4-o1,feed-s2-o1
R=feed-s2-o1,feed-s4-o1,feed-s3-o1,feed-s3,lean6-s3-o1,hp-pf1-s3
timeout 250 python3 -m bench.probes.dkdv_variants --T 32768,8192,65536 --sel random,local --only $L --json $OUT/variants-feed-1.json 2>&1 | tee $OUT/variants-feed-1.log
echo "=== [$((SECONDS - T0))s] reversed"
timeout 250 python3 -m bench.probes.dkdv_variants --T 32768,8192,65536 --sel random,local --only $R --json $OUT/variants-feed-2.json 2>&1 | tee $OUT/variants-feed-2.log
echo "=== [$((SECONDS - T0))s] done"
