"""Registers, spills, shared memory and MMA kind of the backward kernels as a real launch compiles them.

The compile smoke (``nsa-sel smoke``) gives integer arguments no value hints, so its kernels
see every stride and head dim as an unknown ``i32``: loads cannot be vectorised, the software
pipeliner does not use ``cp.async``, and ptxas reports spills a launch never has.  A launch on
contiguous tensors specialises stride-1 arguments to the constant 1 and marks multiples of 16
as divisible by 16; this script compiles each launch configuration of ``backward_meta`` that
way (ahead of time, no GPU, in a child process per compile) and prints one line per kernel:

    python -m bench.probes.bwd_aot_report [--arch 80,90] [--python /path/to/other/venv/python]

``--python`` runs the compiles under another Triton (a lane's venv; it needs no torch).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = [  # (kernel kind, backward_meta keywords)
    ("dq", {"h": 16, "Dk": 128, "Dv": 128}),
    ("dq_tok", {"h": 16, "Dk": 128, "Dv": 128, "dq_tokens": "auto"}),
    ("dkdv", {"h": 16, "Dk": 128, "Dv": 128}),
    ("dq", {"h": 16, "Dk": 192, "Dv": 128}),
    ("dkdv", {"h": 16, "Dk": 192, "Dv": 128}),
    ("dq", {"h": 64, "Dk": 128, "Dv": 128}),
    ("dkdv", {"h": 16, "Dk": 256, "Dv": 256}),
]
ONES = ("sq_d", "sk_d", "sv_d", "so_d", "sdo_d", "sl_h", "sr_e")  # unit strides of contiguous inputs
DIV16 = {"Dk", "Dv", "sq_b", "sq_s", "sq_g", "sq_h", "sk_b", "sk_g", "sk_t", "sv_b", "sv_g", "sv_t",
         "so_b", "so_s", "so_g", "so_h", "sdo_b", "sdo_s", "sdo_g", "sdo_h", "sl_b", "sl_s"}

CHILD = r'''
import json, sys
from nsa_triton_sel.compat.smoke import aot
from nsa_triton_sel.compat.registry.compile_spec import derive_signature
from nsa_triton_sel.plan import backward as bm
from nsa_triton_sel.compat.registry import variants as cv
kind, arch, cfg, ones, div16 = json.loads(sys.argv[1])
triton, ASTSource, GPUTarget, family = aot.triton_api()
cap = 32 if arch == 90 and tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 1) else 64
if cfg.get("dq_tokens") == "auto":
    cfg["dq_tokens"] = bm.dq_tokens_per_program(cfg["h"], cap)
m = bm.backward_meta(n_spans=16, max_rows=cap, **cfg)
ce, w, st, name = {
    "dq": (m.dq_constexprs(), m.dq_warps, m.dq_stages, "sel_bwd_dq_kernel"),
    "dq_tok": (m.dq_tok_constexprs(), m.tok_warps, m.tok_stages, "sel_bwd_dq_tok_kernel"),
    "dkdv": (m.dkdv_constexprs(), m.kv_warps, m.kv_stages, "sel_bwd_dkdv_kernel"),
}[kind]
fn = aot._load_kernel(cv.BACKWARD_MODULE + ":" + name)
types, constexprs = derive_signature(fn, {"name": kind, "dtype": "bf16", "types": cv.BACKWARD_TYPES,
                                          "constexprs": ce})
ones = [n for n in ones if n in types]
aligned = [n for n, t in types.items() if t.startswith("*") or n in div16]
if family == aot.FAMILY_CONSTEXPRS:
    for n in ones:
        types.pop(n)
        constexprs[n] = 1
    src = aot.make_source(ASTSource, family, fn, types, constexprs, aligned=aligned)
else:  # 3.0 - 3.2: the unit strides as equal_to_1 attributes
    from triton.compiler.compiler import AttrsDescriptor
    names = list(fn.arg_names)
    attrs = AttrsDescriptor(divisible_by_16={names.index(n) for n in aligned},
                            equal_to_1={names.index(n) for n in ones})
    sig = {n: types[n] for n in names if n not in constexprs}
    src = ASTSource(fn, sig, constants={**constexprs, **{n: 1 for n in ones}}, attrs=attrs)
c = triton.compile(src, target=GPUTarget("cuda", arch, 32), options={"num_warps": w, "num_stages": st})
met = aot.collect_metrics(c)
ttgir = c.asm["ttgir"]
print(json.dumps({"triton": triton.__version__, "config": ce, "warps": w, "stages": st, "max_rows": cap,
                  **{k: met.get(k) for k in ("registers", "spills", "shared", "mma")},
                  "async_copies": ttgir.count("async_copy_global_to_local")}))
'''


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="80,90")
    ap.add_argument("--python", default=sys.executable)
    a = ap.parse_args(argv)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])),
               TRITON_DEFAULT_FP_FUSION=os.environ.get("TRITON_DEFAULT_FP_FUSION", "1"))
    env.pop("TRITON_INTERPRET", None)
    for arch in (int(x) for x in a.arch.split(",")):
        for kind, cfg in CONFIGS:
            job = json.dumps([kind, arch, cfg, list(ONES), sorted(DIV16)])
            res = subprocess.run([a.python, "-c", CHILD, job], capture_output=True, text=True, env=env)
            label = f"sm{arch} {kind:6s} {json.dumps(cfg)}"
            if res.returncode != 0:
                print(f"{label}: FAILED ({(res.stderr.strip().splitlines() or ['?'])[-1][:200]})")
                continue
            r = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"{label}: triton {r['triton']} M<={r['max_rows']} warps={r['warps']} stages={r['stages']} "
                  f"regs={r['registers']} spills={r['spills']} shared={r['shared']} {r['mma']} "
                  f"cp.async={r['async_copies']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
