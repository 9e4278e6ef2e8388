# Device call 4 (H200): query-major score variants (pairs as the MMA's rows) of the dk/dv walk.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
Q=hp-pf1-s3,qm-s3,qm-s2,qm-r64-s2,qm-r64-s3,qm-r64-s2-w8,qm-r64-s3-w8,qm-r128-s2-w8,mma-only-s3,mma-only-qm-r64-s2,mma-only-qm-r64-s2-w8
timeout 400 python3 -m bench.probes.dkdv_variants --T 32768,8192 --sel random,local --only $Q --json $OUT/variants-qm.json 2>&1 | tee $OUT/variants-qm.log
echo "=== [$((SECONDS - T0))s] done"
