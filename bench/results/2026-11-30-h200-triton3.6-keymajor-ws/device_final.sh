# Call 7: on the final tree (the path table written, the tests' shared graph helper): the two CUDA-graph tests of
# the key-major GPU files, then the GPU A/B and the host A/B against the landed main 17c704b.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>&1 | tail -1
export PYTHONPATH=$PWD/src:$PWD:/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "from nsa_triton_sel import provenance as p; print('hashes', p.compiler_hash(), p.runtime_hash())"
T0=$SECONDS
timeout 120 python3 -m pytest -p no:cacheprovider -q -m gpu -k "cuda_graph" tests/library/kernels/test_keymajor_ws_gpu.py \
    tests/library/kernels/test_keymajor_gpu.py > $OUT/graph-tests.log 2>&1
echo "graph tests rc=$? [$((SECONDS - T0))s]"; tail -2 $OUT/graph-tests.log
timeout $((400 - SECONDS + T0)) bash bench/ab/gpu_check.sh $OUT/check ab,host .carry/base-landed/src:main-17c704b
echo "gpu_check rc=$? [$((SECONDS - T0))s]"
