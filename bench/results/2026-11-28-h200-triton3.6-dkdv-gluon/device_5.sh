# Device call 5 (H200): the Gluon walk with a step's key mask skipped when every pair reads the whole tile
# (-fast) and int32 row offsets (-i32), twice in opposite orders, against g-nb4 and the shipped kernel.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
T0=$SECONDS
L=g-nb4,g-nb4-fast,g-nb4-i32,g-nb4-fast-i32,g-nb3-fast-i32
R=g-nb3-fast-i32,g-nb4-fast-i32,g-nb4-i32,g-nb4-fast,g-nb4
timeout 200 python3 -m bench.probes.dkdv_gluon --T 32768,8192,65536 --sel random,local --only $L --json $OUT/fast-1.json 2>&1 | tee $OUT/fast-1.log
echo "=== [$((SECONDS - T0))s] reversed"
timeout 200 python3 -m bench.probes.dkdv_gluon --T 32768,8192,65536 --sel random,local --only $R --json $OUT/fast-2.json 2>&1 | tee $OUT/fast-2.log
echo "=== [$((SECONDS - T0))s] done"
