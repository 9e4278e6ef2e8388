# One cold run of the 3.6 GPU lane on a fresh 1 x H100, every line timestamped (seconds since the start).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
stamp() { python3 -u -c "
import sys, time
t0 = time.monotonic()
for line in sys.stdin:
    print(f'{time.monotonic() - t0:6.1f} {line}', end='', flush=True)"; }
/usr/bin/time -v timeout 300 nox --no-venv -s parity-3.6 bench-3.6 -- --results $OUT/lanes 2>&1 | stamp > $OUT/nox.log
echo "== rc=${PIPESTATUS[0]}"
grep -E "jit_warm|Triton JIT|compiled|Running session|Session .* (was|failed)|passed|Elapsed|Maximum resident" $OUT/nox.log | grep -v " tests: " | tail -40
tar czf $OUT/lanes.tgz -C $OUT lanes
cp .nox/.cache/triton/*/nsa-sel-jit-warm-keys.jsonl $OUT/ 2>/dev/null; rm -rf $OUT/lanes
ls -la $OUT
