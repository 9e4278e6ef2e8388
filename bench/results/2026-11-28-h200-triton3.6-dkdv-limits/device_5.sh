# Device call 5 (H200): leaner steps of the dk/dv walk (int32 row offsets, no column mask, both score MMAs issued
# first), run twice in opposite orders, against the shipped kernel and the gather-copy ceiling.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
L=hp-pf1-s3,hp-pf1-s3-o1,lean2-s3,lean4-s3,lean6-s3,lean6-s3-o1,lean6-s4-o1,lean6-s2-o1,mma-only-s3-o1,mma-only-lean6-s3-o1
R=mma-only-lean6-s3-o1,mma-only-s3-o1,lean6-s2-o1,lean6-s4-o1,lean6-s3-o1,lean6-s3,lean4-s3,lean2-s3,hp-pf1-s3-o1,hp-pf1-s3
timeout 250 python3 -m bench.probes.dkdv_variants --T 32768,8192,65536 --sel random,local --only $L --json $OUT/variants-lean-1.json 2>&1 | tee $OUT/variants-lean-1.log
echo "=== [$((SECONDS - T0))s] reversed"
timeout 250 python3 -m bench.probes.dkdv_variants --T 32768,8192,65536 --sel random,local --only $R --json $OUT/variants-lean-2.json 2>&1 | tee $OUT/variants-lean-2.log
echo "=== [$((SECONDS - T0))s] done"
