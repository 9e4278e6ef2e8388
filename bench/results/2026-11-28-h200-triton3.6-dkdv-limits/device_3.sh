# Device call 3 (H200): the dk/dv walk variants on mma.sync (DISABLE_MMA_V3=1, fresh Triton cache) against the
# same machine's wgmma kernels.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
V2=hp-pf1-s3,hp-pf1-s3-o1,hp-pf1-s3-w8,hp-pf1-s2-w8,hp-pf1-s4-w8,hp-pf1-r64-s3-w8,hp-pf1-r64-s4-w8,hp-pf1-r16-s4-w8,mma-only-s3,mma-only-s3-w8,mma-only-r64-s3-w8
echo "=== mma.sync (DISABLE_MMA_V3=1)"
DISABLE_MMA_V3=1 TRITON_CACHE_DIR=/tmp/cache-v2 timeout 300 python3 -m bench.probes.dkdv_variants --T 32768,8192,65536 --sel random,local --only $V2 --json $OUT/variants-mma-v2.json 2>&1 | tee $OUT/variants-mma-v2.log
echo "=== [$((SECONDS - T0))s] wgmma (default)"
timeout 200 python3 -m bench.probes.dkdv_variants --T 32768,8192,65536 --sel random,local --only hp-pf1-s3,hp-pf1-s3-o1,mma-only-s3 --json $OUT/variants-wgmma.json 2>&1 | tee $OUT/variants-wgmma.log
echo "=== [$((SECONDS - T0))s] done"
