"""The canaries: deliberately broken kernels (:mod:`.kernels`) and the verdict each must reach.

``nsa-sel smoke --canaries`` compiles them beside the real variants: each must fail the way
the seeds' kernels failed, on the Triton versions where that failure class exists, so the
harness is proven to still tell the classes apart.  They ship inside the package, so an
installed toolkit runs them too.  The kernels are referenced by name: only the compile
children import them (and Triton).  The GPU miscompile canaries are :mod:`.gpu` (their kernels in
:mod:`.gpu_kernels`), and :mod:`.notes` says why a canary that fired does not hit this package's
kernels.  May import: core, registry.
"""

from ..registry.compile_spec import CompileSpec

KERNELS = "nsa_triton_sel.compat.canaries.kernels"
_BCAST = "Cannot broadcast"

SPECS = [
    CompileSpec(
        name="canary/broadcast_load", kernel=f"{KERNELS}:broadcast_load", constexprs={"BLOCK": 64}, canary=True,
        expected={"<3.5": "compile_error", ">=3.5": "ok"}, expected_message={"<3.5": _BCAST},
        note="[1,64] pointer, [64,64] mask, load",
    ),
    CompileSpec(
        name="canary/broadcast_store", kernel=f"{KERNELS}:broadcast_store", constexprs={"BLOCK": 64}, canary=True,
        expected={">=3.0": "compile_error"},
        expected_message={"<3.6": _BCAST, ">=3.6": "Expected pointer argument to have shape"},
        note="[1,64] pointer, [64,64] mask, store",
    ),
    CompileSpec(
        name="canary/loop_bound_tensor", kernel=f"{KERNELS}:loop_bound_tensor", constexprs={"BLOCK": 64},
        canary=True, expected={">=3.0": "crash"}, expected_message={">=3.0": "isIntOrFloat"},
        note="for-loop bound is a 1-element tensor: MLIR assertion abort",
    ),
    CompileSpec(
        name="canary/block_ptr", kernel=f"{KERNELS}:block_ptr", constexprs={"BLOCK": 64}, canary=True,
        expected={"<3.9": "ok", ">=3.9": ["unsupported", "compile_error"]},
        note="tl.make_block_ptr / tl.advance (removed in 3.9; deliberately used here)",
    ),
]
