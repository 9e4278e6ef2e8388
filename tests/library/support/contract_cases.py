"""The user contract's cases: every entry point a user calls, with the float64 oracle of its output, LSE and
gradients (``tests/test_contract_gpu.py`` runs them in every mode).

One problem per entry point (bf16, G = 2 groups of h = 3 query heads, D = 64, blocks of 32, up to 4 causal
blocks per token including its own, fresh random values on every call), in the entry point's own layout.
:func:`oracle` computes the definition in float64 on the GPU (dense scores, keys outside the row's spans
masked), differentiable: the reference for the output, the LSE and the gradients of q, k and v through both.
"""

from __future__ import annotations

import importlib.metadata
import math
from dataclasses import dataclass
from typing import Callable

import pytest
import torch

from nsa_triton_sel import selection_attention
from nsa_triton_sel.contract import block_indices_to_ranges

G, H_PER_G, D, BS, TOP = 2, 3, 64, 32, 4
HQ = G * H_PER_G
DEV = "cuda"
DT = torch.bfloat16

OUT_TOL, LSE_TOL, GRAD_TOL = 1e-2, 2e-3, 2e-2  # relative (norm) errors against float64, bf16 inputs


def _torch_pins_triton() -> str | None:
    for req in importlib.metadata.requires("torch") or ():
        name = req.split(";")[0].strip()
        if name.startswith("triton==") and ("platform_system" not in req or "Linux" in req):
            return name.split("==", 1)[1]
    return None


def off_pair() -> str | None:
    """Why Inductor runs an unpaired Triton here (None: the pair)."""
    import triton

    pinned = _torch_pins_triton()
    if pinned is None or pinned == triton.__version__:
        return None
    return f"off-pair: torch {torch.__version__} pins triton {pinned}, this lane runs triton {triton.__version__}"


def recorded_off_pair(run):
    """``run()``; an error where Inductor runs an unpaired Triton becomes an xfail with the error (on the pair, and
    for a failed check anywhere, it is raised)."""
    try:
        return run()
    except AssertionError:
        raise
    except Exception as exc:  # noqa: BLE001 - a compile that fails off-pair is a recorded result
        why = off_pair()
        if why:
            pytest.xfail(f"{why}: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}")
        raise


def rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def causal_blocks(n_tok: int, positions, gen) -> torch.Tensor:
    """``[n_tok, G, TOP]`` int64 block indices: up to TOP distinct blocks of each token's past, own block
    included, -1 padding (random slots)."""
    out = torch.full((n_tok, G, TOP), -1, dtype=torch.int64)
    for t in range(n_tok):
        nb = int(positions[t]) // BS + 1
        for g in range(G):
            pick = torch.randperm(nb, generator=gen)[:TOP]
            pick = torch.unique(torch.cat([torch.tensor([nb - 1]), pick]))[:TOP]
            out[t, g, :pick.numel()] = pick
            out[t, g] = out[t, g][torch.randperm(TOP, generator=gen)]
    return out


def oracle(q5, k4, v4, ranges, scale=None):
    """Float64 ``(out [B, S, G, h, Dv], lse [B, S, G, h])`` of native views, differentiable; -inf / 0 for an
    empty row."""
    T = k4.shape[2]
    sc = 1.0 / math.sqrt(q5.shape[-1]) if scale is None else scale
    r = ranges.to(torch.int64)
    pos = torch.arange(T, device=q5.device)
    mask = ((pos >= r[..., 0, None]) & (pos < r[..., 1, None])).any(-2)  # [B, S, G, T]
    s = torch.einsum("bsghd,bgtd->bsght", q5, k4) * sc
    s = s.masked_fill(~mask[:, :, :, None, :], float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isfinite(lse), lse, torch.zeros_like(lse))[..., None])
    out = torch.einsum("bsght,bgtd->bsghd", p, v4)
    return out, lse


@dataclass
class Case:
    """One entry point's call on fresh inputs: ``call(q, k, v) -> (out, lse or None)`` in its own layout,
    ``native(q, k, v)`` its native views, ``ranges`` the native global ranges, ``out5(out)`` / ``lse4(lse)``
    its outputs as native views."""

    name: str
    make: Callable  # () -> (q, k, v) leaves in the entry's layout
    call: Callable
    native: Callable
    ranges: torch.Tensor
    out5: Callable
    lse4: Callable
    has_lse: bool = True


def _rand(*shape, gen):
    return torch.randn(*shape, generator=gen, device=DEV).to(DT)


def build(name: str, seed: int = 0) -> Case:
    gen = torch.Generator().manual_seed(seed)
    dgen = torch.Generator(device=DEV).manual_seed(seed)
    if name in ("ranges5", "blocks5"):
        B, T = 2, 160
        blocks = torch.stack([causal_blocks(T, torch.arange(T), gen) for _ in range(B)]).to(DEV)  # [B, T, G, n]
        ranges = block_indices_to_ranges(blocks, BS, T)
        make = lambda: (_rand(B, T, G, H_PER_G, D, gen=dgen), _rand(B, G, T, D, gen=dgen),  # noqa: E731
                        _rand(B, G, T, D, gen=dgen))
        if name == "ranges5":
            call = lambda q, k, v: selection_attention(q, k, v, ranges, return_lse=True)  # noqa: E731
        else:
            call = lambda q, k, v: selection_attention(q, k, v, block_indices=blocks, block_size=BS,  # noqa: E731
                                                       return_lse=True)
        return Case(name, make, call, lambda q, k, v: (q, k, v), ranges, lambda o: o, lambda l: l)
    if name == "decode":
        B, T = 4, 300
        pos = torch.tensor([299, 150, 31, 200])
        blocks = torch.stack([causal_blocks(1, pos[b:b + 1], gen) for b in range(B)]).to(DEV)  # [B, 1, G, n]
        positions = pos.view(B, 1).to(DEV)
        ranges = block_indices_to_ranges(blocks, BS, T, positions)
        make = lambda: (_rand(B, 1, G, H_PER_G, D, gen=dgen), _rand(B, G, T, D, gen=dgen),  # noqa: E731
                        _rand(B, G, T, D, gen=dgen))
        call = lambda q, k, v: selection_attention(q, k, v, block_indices=blocks, block_size=BS,  # noqa: E731
                                                   positions=positions, return_lse=True)
        return Case(name, make, call, lambda q, k, v: (q, k, v), ranges, lambda o: o, lambda l: l)
    # the peers' layouts: q [B, T, HQ, D] / [T, HQ, D], k/v [B, T, G, D] / [T, G, D]
    lens = [100, 156]
    cu_list = [0, 100, 256]
    total = cu_list[-1]
    local = torch.cat([torch.arange(n) for n in lens])
    blocks = causal_blocks(total, local, gen).to(DEV)  # [total, G, n], sequence-local
    cu = torch.tensor(cu_list, device=DEV, dtype=torch.int32)
    bos = torch.cat([torch.full((n,), s) for n, s in zip(lens, cu_list)]).to(DEV)
    glob = torch.where(blocks >= 0, blocks * BS + bos[:, None, None], -1)
    start = glob.clamp_min(0)
    end = torch.minimum(start + BS, (bos + local.to(DEV) + 1)[:, None, None])
    rng = torch.where((blocks >= 0)[..., None], torch.stack([start, end], -1), 0)[None]  # [1, total, G, n, 2]
    native3 = lambda q, k, v: (q[None].unflatten(2, (G, H_PER_G)), k[None].permute(0, 2, 1, 3),  # noqa: E731
                               v[None].permute(0, 2, 1, 3))
    make3 = lambda: (_rand(total, HQ, D, gen=dgen), _rand(total, G, D, gen=dgen), _rand(total, G, D, gen=dgen))  # noqa: E731
    out3, lse3 = (lambda o: o[None].unflatten(2, (G, H_PER_G))), (lambda l: l[None].unflatten(2, (G, H_PER_G)))
    if name == "packed":
        call = lambda q, k, v: selection_attention(q, k, v, block_indices=blocks, block_size=BS,  # noqa: E731
                                                   cu_seqlens=cu, return_lse=True)
        return Case(name, make3, call, native3, rng, out3, lse3)
    if name == "xunhaolai":
        from nsa_triton_sel.interop.xunhaolai import topk_sparse_attention

        call = lambda q, k, v: (topk_sparse_attention(q, k, v, blocks.permute(1, 0, 2), BS, cu), None)  # noqa: E731
        return Case(name, make3, call, native3, rng, out3, lse3, has_lse=False)
    if name == "fla":
        from nsa_triton_sel.interop.fla import parallel_nsa

        make4 = lambda: tuple(x[None] for x in make3())  # noqa: E731
        call = lambda q, k, v: (parallel_nsa(q, k, v, blocks[None], block_size=BS, cu_seqlens=cu), None)  # noqa: E731
        return Case(name, make4, call, lambda q, k, v: native3(q[0], k[0], v[0]), rng,
                    lambda o: out3(o[0]), lse3, has_lse=False)
    if name in ("bthd", "thd"):  # one sequence (the first one's tokens), unpacked
        n = lens[1]
        b1 = causal_blocks(n, torch.arange(n), gen).to(DEV)
        r1 = block_indices_to_ranges(b1[None], BS, n)
        make1 = lambda: (_rand(n, HQ, D, gen=dgen), _rand(n, G, D, gen=dgen), _rand(n, G, D, gen=dgen))  # noqa: E731
        if name == "thd":
            call = lambda q, k, v: selection_attention(q, k, v, block_indices=b1, block_size=BS,  # noqa: E731
                                                       return_lse=True)
            return Case(name, make1, call, native3, r1, out3, lse3)
        make4 = lambda: tuple(x[None] for x in make1())  # noqa: E731
        call = lambda q, k, v: selection_attention(q, k, v, block_indices=b1[None], block_size=BS,  # noqa: E731
                                                   return_lse=True)
        return Case(name, make4, call, lambda q, k, v: native3(q[0], k[0], v[0]), r1,
                    lambda o: out3(o[0]), lambda l: lse3(l[0]))
    raise ValueError(name)


ENTRIES = ("ranges5", "blocks5", "decode", "packed", "bthd", "thd", "fla", "xunhaolai")


# --- symbolic sizes: one call signature per entry point, every tensor an argument (nothing closed over, so
# the compiled graph sees the token and batch sizes as inputs) ---

SYMBOLIC_ENTRIES = ("blocks5", "fla", "xunhaolai")
SYMBOLIC_TOKENS = (160, 224, 288, 352)
# Batch rows (5-D) or packed sequences, taken in turn: never 0 or 1 (Dynamo specialises them), and never the size
# of another dimension (G, h, HQ, Dk, the slots; cu_seqlens has one more), which Dynamo's duck sizing would tie
# them to, so that the next size recompiles.
SYMBOLIC_BATCH = {"blocks5": (5, 7), "fla": (7, 9), "xunhaolai": (7, 9)}


def symbolic_sizes(entry: str, tokens=SYMBOLIC_TOKENS, batch=None) -> list:
    """``[(batch or sequences, tokens), ...]`` for ``entry``, one per token count."""
    batch = batch or SYMBOLIC_BATCH[entry]
    return [(batch[i % len(batch)], T) for i, T in enumerate(tokens)]


@dataclass
class Sized:
    """One entry point at one size: ``fn(*args)`` returns its output (and the LSE where it has one),
    ``dims`` maps an argument's position to its (tokens, batch) dimensions, ``native``/``ranges`` as in
    :class:`Case` for the float64 oracle."""

    fn: Callable
    args: tuple
    dims: dict
    native: Callable
    ranges: torch.Tensor
    out5: Callable


def _blocks5(q, k, v, blocks):
    return selection_attention(q, k, v, block_indices=blocks, block_size=BS, return_lse=True)


def _fla(q, k, v, blocks, cu):
    from nsa_triton_sel.interop.fla import parallel_nsa

    return parallel_nsa(q, k, v, blocks, block_size=BS, cu_seqlens=cu)


def _xunhaolai(q, k, v, topk, cu):
    from nsa_triton_sel.interop.xunhaolai import topk_sparse_attention

    return topk_sparse_attention(q, k, v, topk, BS, cu)


def sized(entry: str, n: int, T: int, *, device=DEV, dtype=DT, seed: int = 0, d: int = D, g: int = G,
          h: int = H_PER_G) -> Sized:
    """``entry`` with ``n`` batch rows (5-D) or packed sequences (the drop-ins), ``T`` tokens each (5-D) or in
    all (packed), ``g`` groups of ``h`` query heads."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    def pick(n_tok, positions):
        return causal_blocks(n_tok, positions, gen)[:, :1].expand(n_tok, g, TOP).contiguous() if g != G else \
            causal_blocks(n_tok, positions, gen)

    if entry == "blocks5":
        blocks = torch.stack([pick(T, torch.arange(T)) for _ in range(n)]).to(device)
        args = (rand(n, T, g, h, d), rand(n, g, T, d), rand(n, g, T, d), blocks)
        return Sized(_blocks5, args, {0: (1, 0), 1: (2, 0), 2: (2, 0), 3: (1, 0)}, lambda q, k, v: (q, k, v),
                     block_indices_to_ranges(blocks, BS, T), lambda o: o)
    lens = [T // n + (i < T % n) for i in range(n)]
    starts = [sum(lens[:i]) for i in range(n)]
    local = torch.cat([torch.arange(m) for m in lens])
    blocks = pick(T, local).to(device)  # [T, g, TOP], sequence-local
    cu = torch.tensor(starts + [T], device=device, dtype=torch.int32)
    bos = torch.cat([torch.full((m,), s) for m, s in zip(lens, starts)]).to(device)
    start = (blocks * BS + bos[:, None, None]).clamp_min(0)
    end = torch.minimum(start + BS, (bos + local.to(device) + 1)[:, None, None])
    rng = torch.where((blocks >= 0)[..., None], torch.stack([start, end], -1), 0)[None]  # [1, T, g, n, 2]
    q, k, v = rand(T, g * h, d), rand(T, g, d), rand(T, g, d)
    native3 = lambda q, k, v: (q[None].unflatten(2, (g, h)), k[None].permute(0, 2, 1, 3),  # noqa: E731
                               v[None].permute(0, 2, 1, 3))
    out3 = lambda o: o[None].unflatten(2, (g, h))  # noqa: E731
    if entry == "fla":
        return Sized(_fla, (q[None], k[None], v[None], blocks[None], cu), {0: (1,), 1: (1,), 2: (1,), 3: (1,), 4: (0,)},
                     lambda q, k, v: native3(q[0], k[0], v[0]), rng, lambda o: out3(o[0]))
    if entry == "xunhaolai":
        return Sized(_xunhaolai, (q, k, v, blocks.permute(1, 0, 2).contiguous(), cu),
                     {0: (0,), 1: (0,), 2: (0,), 3: (1,), 4: (0,)}, native3, rng, out3)
    raise ValueError(entry)


COMPILES = {"dynamic": 1, "mark_dynamic": 1, "automatic": 2}  # compiles for every size (automatic dynamic
# shapes: the first compile is static, the second makes the changed sizes symbolic)


def graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


def compile_at_sizes(entry, mode, sizes, make, backend, check) -> int:
    """Compile ``entry``'s call once in ``mode`` and run it at every size: ``make(entry, n, T, seed)`` builds
    the case, ``check(compiled, case)`` runs and judges it.  Returns the number of graphs Dynamo compiled."""
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = None
    for i, (n, T) in enumerate(sizes):
        case = make(entry, n, T, i)
        if compiled is None:
            kw = {"dynamic": True} if mode == "dynamic" else {}
            compiled = torch.compile(case.fn, fullgraph=True, backend=backend, **kw)
        if mode == "mark_dynamic":
            for pos, dims in case.dims.items():
                for dim in dims:
                    torch._dynamo.mark_dynamic(case.args[pos], dim)
        check(compiled, case)
    return graphs()


class Prefill(torch.nn.Module):
    """A module a user exports: prefill with block indices."""

    def forward(self, q, k, v, blocks):
        return selection_attention(q, k, v, block_indices=blocks, block_size=BS, return_lse=True)


class Decode(torch.nn.Module):
    """A module a user exports: decode with ranges."""

    def forward(self, q, k, v, ranges):
        return selection_attention(q, k, v, ranges, return_lse=True)


def decode_inputs(n: int, T: int, seed: int, *, device=DEV, dtype=DT, d: int = D, g: int = G) -> tuple:
    """``(q, k, v, ranges)`` of ``B = n`` decode rows at the last position of ``T`` keys."""
    gen = torch.Generator().manual_seed(seed)
    blocks = torch.stack([causal_blocks(1, torch.tensor([T - 1]), gen)[:, :g] for _ in range(n)]).to(device)
    ranges = block_indices_to_ranges(blocks, BS, T, torch.full((n, 1), T - 1, device=device))
    rand = lambda *s: torch.randn(*s, generator=gen).to(device=device, dtype=dtype)  # noqa: E731
    return rand(n, 1, g, H_PER_G, d), rand(n, g, T, d), rand(n, g, T, d), ranges


def export_checked(which: str, sizes, check, *, device=DEV, dtype=DT, d: int = D, g: int = G):
    """Export ``which`` ("prefill" or "decode") once, non-strict, with the token and batch sizes dynamic, check
    that the program calls the library's operator and reads nothing back to the host, and run it at every size
    of ``sizes``: ``check(got, want)`` against eager.  Returns the exported program."""
    from torch.export import Dim, export

    T, B = Dim("T", min=BS + 1, max=1 << 16), Dim("B", min=2, max=64)
    if which == "prefill":
        make = lambda n, t, s: sized("blocks5", n, t, seed=s, device=device, dtype=dtype, d=d, g=g).args  # noqa: E731
        module, shapes = Prefill(), ({0: B, 1: T}, {0: B, 2: T}, {0: B, 2: T}, {0: B, 1: T})
    else:
        make = lambda n, t, s: decode_inputs(n, t, s, device=device, dtype=dtype, d=d, g=g)  # noqa: E731
        module, shapes = Decode(), ({0: B}, {0: B, 2: T}, {0: B, 2: T}, {0: B})
    program = export(module, make(*sizes[0], 0), dynamic_shapes=shapes, strict=False)
    code = program.graph_module.code
    assert "torch.ops.nsa_triton_sel.sel_fwd" in code, code
    assert "_local_scalar_dense" not in code and ".item()" not in code, f"a host read in the program:\n{code}"
    for i, (n, t) in enumerate(sizes):
        args = make(n, t, i)
        check(program.module()(*args), module(*args))
    return program
