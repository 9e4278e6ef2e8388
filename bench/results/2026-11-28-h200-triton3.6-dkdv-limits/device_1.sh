# Device call 1 (H200): the dk/dv kernel's walk variants (8 warps, both score MMAs in flight, dv and dk in two
# programs) against the shipped kernel and the gather-copy ceiling; the backward kernels' registers and spills.
set -u
export PYTHONPATH=$PWD/src:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$SECONDS
echo "=== aot report"
timeout 60 python3 -m bench.probes.bwd_aot_report --arch 90 > $OUT/aot-shipped.log 2>&1; cat $OUT/aot-shipped.log
ONLY=hp-pf1-s3,hp-pf1-s3-o1,hp-pf1-s4-o1,hp-pf1-s3-w8,hp-pf1-s3-w8-o1,hp-pf1-s4-w8,hp-pf1-r64-s2-w8,hp-pf1-r64-s3-w8,hp-pf1-s3-split,hp-pf1-s2-split,hp-pf1-s3-split-o1,hp-pf1-r16-s4-split,hp-pf1-r64-s3-split-w8,hp-pf1-r64-s3-split-w8-o1
echo "=== [$((SECONDS - T0))s] variants 32K"
timeout 330 python3 -m bench.probes.dkdv_variants --T 32768 --sel random,local --only $ONLY --json $OUT/variants-32k.json 2>&1 | tee $OUT/variants-32k.log
echo "=== [$((SECONDS - T0))s] variants 8K, 64K"
timeout $((540 - SECONDS + T0)) python3 -m bench.probes.dkdv_variants --T 8192,65536 --sel random --only $ONLY --json $OUT/variants-8k-64k.json 2>&1 | tee $OUT/variants-8k-64k.log
echo "=== [$((SECONDS - T0))s] done"
