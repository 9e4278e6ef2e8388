# Two cold runs of the 3.6 GPU lane on one machine: the warm-up beside the parity tests, then none.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
cold() { rm -rf .nox/.cache/triton ~/.triton /tmp/torchinductor_* ; }
for v in beside:1 none:0; do
  name=${v%%:*}; cold
  NSA_SEL_JIT_WARM=${v##*:} /usr/bin/time -v timeout 290 nox --no-venv -s parity-3.6 bench-3.6 -- --results $OUT/lanes-$name > $OUT/nox-$name.log 2>&1
  echo "== $name rc=$?"
  grep -E "jit_warm|Triton JIT|== (compile|parity|bench)|passed|Elapsed" $OUT/nox-$name.log | grep -v "^tests:" | tail -12
done
