# Device call 1 (H200): the key-major path's partial results in float32 / float16 / bfloat16 at h = 8 and 4 (32K),
# then forward + backward against XunhaoLai at 32K random, twice in opposite orders (the training-speed row).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
echo "=== [$((SECONDS - T0))s] key-major partials"
timeout 330 python3 -m bench.probes.keymajor_partials --T 32768 --HQ 32 --H 4,8 --json $OUT/partials-1.json 2>&1 | tee $OUT/partials-1.log
echo "rc=$?"
for order in xunhaolai,ours-api ours-api,xunhaolai; do
  echo "=== [$((SECONDS - T0))s] 32K random, $order"
  timeout 100 python3 -m bench.train.train_nsa --peers .carry/peers --contenders $order --T 32768 --sel random --rep-ms 100 > $OUT/train-32k-$order.log 2>&1
  echo "rc=$?"; grep -A3 '  T sel' $OUT/train-32k-$order.log
done
echo "=== [$((SECONDS - T0))s] done"
