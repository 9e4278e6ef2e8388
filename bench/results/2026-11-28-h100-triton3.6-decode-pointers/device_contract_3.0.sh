# Device calls: the GPU contract stage of Triton 3.0.0 (the oldest release) from the slim parts, on this runtime.
# Each call carries a piece of the first two parts (.carry/hN/PART.K, 15 MiB: the tree leaves no room for a whole
# part); the pieces wait in .carry/acc (ignored, kept while the machine is warm); with all four the parts are
# whole and the refresh runs the contract stage of 3.0.0 (`bash dev_c30.sh` again collects).
set -u
python3 -c "import packaging" 2>/dev/null || python3 -m pip install -q --no-index --no-deps --target /tmp/site .carry/mini/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1
mkdir -p .carry/acc .carry/in && mv .carry/h*/00* .carry/acc/ 2>/dev/null; ls -la .carry/acc
for p in 000 001; do
    [ -f .carry/acc/$p.0 ] && [ -f .carry/acc/$p.1 ] && cat .carry/acc/$p.0 .carry/acc/$p.1 > .carry/in/triton-slim.$p-of-011.xz \
        && rm .carry/acc/$p.0 .carry/acc/$p.1 && echo "part $p whole"
done
export REFRESH_CARRY=.carry/in REFRESH_EXPECT=3.0.0 REFRESH_INSTALLED=0 REFRESH_WAIT_S=240 REFRESH_DEADLINE_S=500
export REFRESH_ARGS="--stages contract --no-warm" NSA_SEL_GIT_COMMIT="2380eb45e8f4dfed449e6b478589d42ac5b78c2b"
if ls .carry/in/*.xz >/dev/null 2>&1 || [ -d .refresh ]; then
    bash bench/device/device_refresh.sh feed
    [ "${1:-}" = collect ] && bash bench/device/device_refresh.sh collect "${2:-480}"
fi
exit 0
