"""The launch planner: row caps from the known-bad windows, the decode and multi-token choices, and
the one place tokens per program are decided (the compile-smoke registry derived from it: compat/test_variants.py)."""

from __future__ import annotations

import itertools

import pytest

from nsa_triton_sel import device, known_bad, plan
from nsa_triton_sel.plan import tiles as M

KM = __import__("importlib").import_module("nsa_triton_sel.plan.keymajor")  # the package exports a function of its name

WINDOWS = known_bad.parse("""
schema = 1
[[window]]
id = "cap"
triton = ">=3.0,<3.2"
arch = [90]
max_rows = 32
reason = "64-row dots abort"
""")


def test_row_cap_comes_from_the_windows():
    assert known_bad.row_cap("3.1.0", 90, WINDOWS) == 32
    assert known_bad.row_cap("3.2.0", 90, WINDOWS) is None
    assert known_bad.row_cap("3.1.0", 80, WINDOWS) is None
    assert known_bad.row_cap("3.1.0", None, WINDOWS) is None  # the interpreter: nothing to cap
    assert known_bad.row_cap("", 90, WINDOWS) is None  # no Triton


@pytest.mark.parametrize("bad", ["24", "8", "true", "64.0", "-32"])
def test_max_rows_is_validated(bad):
    text = f'schema = 1\n[[window]]\nid = "w"\ntriton = "<4"\nreason = "r"\nmax_rows = {bad}\n'
    with pytest.raises(ValueError, match=r"window 'w' has max_rows = .*; accepted: a power of two >= 16"):
        known_bad.parse(text)


def test_a_capped_window_is_mitigated_not_warned(monkeypatch):
    monkeypatch.setattr(known_bad, "_installed_triton", lambda: "3.1.0")
    assert known_bad.check_installed(arch=90, windows=WINDOWS) is None


def test_capped_device_never_plans_wider_tiles(monkeypatch):
    monkeypatch.setattr(known_bad, "_cached", lambda: tuple(WINDOWS))
    capped, free = device.Device.target(90, "3.1.0"), device.Device.target(90, "3.2.0")
    assert (capped.max_rows, free.max_rows) == (32, 64)
    for h, Dk in itertools.product((16, 20, 33, 64), (64, 192)):
        for decode in (False, True):
            p = plan.selection(1, 8, 2, h, Dk, 128, 512, 4, dev=capped, decode=decode)
            assert p.rows <= 32 and p.grid[1] == 2 * -(-h // p.rows)
        assert plan.selection(1, 8, 2, h, Dk, 128, 512, 4, dev=free).rows == min(64, M.next_pow2(max(h, 16)))
    tok = plan.auto_tokens(16, 4096, capped)
    assert tok == 2 and plan.selection(1, 4096, 2, 16, 128, 128, 4096, 4, dev=capped, tokens=tok).rows == 32
    assert "32" in plan.tokens_problem(4, 16, capped) and plan.tokens_problem(4, 16, free) is None


def test_decode_choice_and_splits():
    dev = device.Device.target(90, "3.6.0", sm_count=132)
    assert plan.use_decode(4, 1, 4, 16, False, dev)  # 16 programs < 132 SMs
    assert not plan.use_decode(64, 1, 4, 16, False, dev)  # 256 programs fill the GPU
    assert not plan.use_decode(1, 2, 4, 16, False, dev)  # two query positions: not decode
    p = plan.selection(4, 1, 4, 16, 128, 128, 32768, 16, dev=dev)
    assert p.kernel == "decode" and p.num_splits == plan.MAX_DECODE_SPLITS and p.merge_grid == (4, 4)
    assert plan.selection(64, 1, 4, 16, 128, 128, 32768, 16, dev=dev).kernel == "ranges"


def test_plans_are_cached_per_signature():
    dev = device.Device.target(80, "3.6.0")
    a = plan.selection(1, 8, 2, 16, 64, 64, 512, 4, dev=dev)
    assert plan.selection(1, 8, 2, 16, 64, 64, 512, 4, dev=dev) is a
    assert plan.selection(1, 8, 2, 16, 64, 64, 512, 4, dev=dev, tune=(("block_n", 64),)).meta.BLOCK_N == 64


def test_a_new_head_dimension_is_one_table_entry(monkeypatch):
    """``plan/tiles.py``'s ``HEAD_DIMS`` is the one place: the compile registry's forward sweep and backward
    variants pick a new entry up, and the planner plans it."""
    from nsa_triton_sel.compat.registry import variants
    from nsa_triton_sel.device import Device
    from nsa_triton_sel.plan import tiles

    monkeypatch.setattr(tiles, "HEAD_DIMS", tiles.HEAD_DIMS + (tiles.HeadDims(80, 40, backward=True),))
    dev = Device.target(90, "")
    assert any("/dk80-dv40/" in name for name, *_ in variants._sweep(dev))
    assert any("dk80-dv40" in v["name"] for v in variants.backward_variants(full=True))
    m = tiles.kernel_meta(mode=tiles.MODE_RANGES, h=4, Dk=80, Dv=40)
    assert (m.DK1, m.DK2, m.DV1, m.DV2) == (64, 16, 32, 16)


def test_keymajor_plan_rejects_more_heads_than_pairs_per_step():
    from nsa_triton_sel.plan.keymajor import keymajor_meta

    with pytest.raises(ValueError, match="at most 16 heads"):
        keymajor_meta(h=20, Dk=16, Dv=16, n_spans=2, T=64, span_len=64, aligned=False, B=1, S=2, G=1, sm_count=1,
                      pairs=16)


@pytest.mark.parametrize("arch, release, by_key", [(90, "3.6.0", True), (80, "3.3.1", True), (80, "3.2.0", False),
                                                   (89, "3.0.0", False), (90, "3.1.0", False)])
def test_the_planner_runs_token_major_where_the_keymajor_forward_does_not_compile(monkeypatch, arch, release, by_key):
    """Small groups go key-major, except where a window names the path (Triton < 3.3 on Ampere/Ada) or caps the
    rows (3.0/3.1 on sm_90): there the compiler would crash the process, so the plan is token-major."""
    import torch

    from nsa_triton_sel.plan import call

    dev = device.Device.target(arch, release, name="target")
    monkeypatch.setattr(call, "device_of", lambda d: dev)
    monkeypatch.setattr(call, "_SIGNATURES", {})
    B, S, G, h, D, T = 1, 4096, 1, 1, 64, 4096
    q = torch.empty(B, S, G, h, D, dtype=torch.bfloat16)
    k = v = torch.empty(B, G, T, D, dtype=torch.bfloat16)
    blocks = torch.zeros(B, S, G, 4, dtype=torch.int32)
    with KM.forced("key"):  # wherever the path can run: what the path table would prefer is not the question
        p = call.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=64, packed=False, traced=False)
    assert (p.forward.kernel == "keymajor") == by_key, (arch, release, p.forward.kernel)


# (ROWS, stages) of the dk/dv kernel per arch's shared memory a program and backward head dim (Dk, Dv).
DKDV_STEPS = {
    # 227 KiB: 32 pairs x 3 stages hold two programs an SM up to Dk + Dv = 384; at 448-512 only x 2 does
    232448: {(64, 64): (32, 3), (128, 128): (32, 3), (192, 128): (32, 3), (256, 256): (32, 2), (128, 64): (32, 3)},
    # 163 KiB: x 3 holds one program from D = 128 up, x 2 two; at 256 neither holds two: the deepest that fits
    166912: {(64, 64): (32, 3), (128, 128): (32, 2), (192, 128): (32, 2), (256, 256): (32, 3), (128, 64): (32, 3)},
    # 99 KiB: 32 pairs do not fit at 256 (x 3 would take 131 KiB): 16 pairs at the measured depth
    101376: {(64, 64): (32, 3), (128, 128): (32, 3), (192, 128): (32, 3), (256, 256): (16, 3), (128, 64): (32, 3)},
}


@pytest.mark.parametrize("arch", sorted(device.SHARED_PER_BLOCK))
def test_the_dkdv_step_fits_the_archs_shared_memory_and_keeps_two_programs_an_sm(arch):
    """The dk/dv kernel's pairs a step and pipeline stages come from the arch's shared memory: the steps whose
    buffers fit; of the 32-pair ones, the deepest pipeline that leaves room for two programs an SM (what the
    registers allow), else the deepest that fits."""
    from nsa_triton_sel.plan.backward import KV_PROGRAMS_PER_SM, KV_SHARED_SLACK, backward_meta, dkdv_shared_bytes

    limit = device.SHARED_PER_BLOCK[arch]
    dims = [(d.Dk, d.Dv) for d in M.HEAD_DIMS if d.backward]
    assert sorted(dims) == sorted(DKDV_STEPS[limit])
    for Dk, Dv in dims:
        m = backward_meta(h=16, Dk=Dk, Dv=Dv, shared=limit)
        assert (m.ROWS, m.kv_stages) == DKDV_STEPS[limit][Dk, Dv], (arch, Dk, Dv)

        def need(rows, stages, m=m):
            return dkdv_shared_bytes(m.KV_BLOCK_N, rows, m.DK1 + m.DK2, m.BLOCK_DV, stages) + KV_SHARED_SLACK
        assert need(m.ROWS, m.kv_stages) <= limit, (arch, Dk, Dv)
        two = KV_PROGRAMS_PER_SM * need(m.ROWS, m.kv_stages) <= limit
        deeper = [s for s in range(m.kv_stages + 1, 4) if need(m.ROWS, s) <= limit]
        assert not any(KV_PROGRAMS_PER_SM * need(m.ROWS, s) <= limit for s in deeper), (arch, Dk, Dv)
        assert two or not deeper, (arch, Dk, Dv)  # a shallower step only where it buys the second program
    # the caller's own choices stand: a given pair count keeps it, with the stages the same rule gives around it
    assert (backward_meta(h=16, Dk=256, Dv=256, shared=limit, rows=32).kv_stages
            == {232448: 2, 166912: 3, 101376: 1}[limit])
    assert backward_meta(h=16, Dk=256, Dv=256, shared=limit, rows=32, kv_stages=3).kv_stages == 3
    m = backward_meta(h=16, Dk=256, Dv=256, shared=limit, rows=16, kv_stages=1)
    assert (m.ROWS, m.kv_stages) == (16, 1)


def test_the_dkdv_step_without_a_known_shared_memory_is_the_measured_default():
    from nsa_triton_sel.plan.backward import backward_meta

    for d in (d for d in M.HEAD_DIMS if d.backward):
        m = backward_meta(h=16, Dk=d.Dk, Dv=d.Dv)
        assert (m.ROWS, m.kv_stages) == (32, 3), d


@pytest.mark.parametrize("arch, step", [(89, (16, 3)), (120, (16, 3)), (90, (32, 2)), (80, (32, 3))])
def test_the_operator_plans_the_dkdv_kernel_for_the_devices_shared_memory(monkeypatch, arch, step):
    import torch

    from nsa_triton_sel.plan import call

    monkeypatch.setattr(call, "device_of", lambda d: device.Device.target(arch, "3.6.0", name="target"))
    monkeypatch.setattr(call, "_SIGNATURES", {})
    q = torch.empty(1, 256, 1, 16, 256, dtype=torch.bfloat16)
    k = v = torch.empty(1, 1, 256, 256, dtype=torch.bfloat16)
    blocks = torch.zeros(1, 256, 1, 4, dtype=torch.int32)
    p = call.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=64, packed=False, traced=False)
    assert (p.backward.ROWS, p.backward.kv_stages) == step


def _cells(sel, rows):
    """Path-table cells ``(T, h, fwd_token, fwd_key, train_token, train_key)``."""
    return [dict(sel=sel, T=T, h=h, fwd_token=ft, fwd_key=fk, train_token=tt, train_key=tk)
            for T, h, ft, fk, tt, tk in rows]


TABLE = ({"gpu": "GPU A", "triton": "3.6.0", "source": "test", "cells": _cells("random", [
    (4096, 1, 10, 5, 20, 10), (4096, 4, 10, 9.8, 20, 15), (4096, 8, 10, 12, 20, 25),
    (65536, 1, 100, 50, 200, 100), (65536, 4, 100, 90, 200, 150), (65536, 8, 100, 80, 200, 250),
]) + _cells("local", [
    (4096, 1, 10, 10.2, 20, 10), (4096, 4, 10, 20, 20, 30), (4096, 8, 10, 20, 20, 30),
    (65536, 1, 100, 102, 200, 100), (65536, 4, 100, 200, 200, 300), (65536, 8, 100, 200, 200, 300),
])},)


@pytest.mark.parametrize("gpu, h, T, grad, want", [
    ("GPU A", 1, 4096, True, KM.ALWAYS),  # key-major trains faster on both kinds of selection
    ("GPU A", 1, 4096, False, KM.UNSHARED),  # forward on local selections: key-major 2 % slower
    ("GPU A", 4, 4096, False, KM.NEVER),  # 2 % faster: inside the measured margin
    ("GPU A", 4, 65536, False, KM.UNSHARED),
    ("GPU A", 2, 65536, False, KM.UNSHARED),  # h = 1 and h = 4 both prefer key-major on random selections
    ("GPU A", 6, 65536, False, KM.UNSHARED),  # between h = 4 and 8, both of which prefer it at 64K
    ("GPU A", 6, 4096, False, KM.NEVER),  # h = 8 at 4K does not
    ("GPU A", 8, 65536, True, KM.NEVER),  # the forward prefers it, training does not
    ("GPU A", 4, 8192, False, KM.NEVER),  # nearest measured T (log scale): 4096
    ("GPU A", 4, 32768, False, KM.UNSHARED),  # nearest: 65536
    ("GPU A", 16, 65536, False, KM.UNSHARED),  # above the measured groups: the largest measured
    ("GPU B", 1, 4096, True, KM.ALWAYS),  # unmeasured GPU: 2x faster passes the default margin
    ("GPU B", 4, 65536, False, KM.NEVER),  # 10 % faster does not
    ("GPU B", 4, 65536, True, KM.UNSHARED),  # 25 % faster does
])
def test_the_path_table_decides_by_the_measured_cells_around_the_call(gpu, h, T, grad, want):
    assert KM.path_verdict(TABLE, gpu, h=h, T=T, grad=grad) == want


def test_without_a_path_table_entry_no_call_runs_key_major():
    assert KM.path_verdict((), "GPU A", h=1, T=4096, grad=True) == KM.NEVER


def test_a_missing_key_major_time_counts_as_token_major():
    table = ({**TABLE[0], "cells": [{**c, "train_key": None} if c["h"] == 1 else c for c in TABLE[0]["cells"]]},)
    assert KM.path_verdict(table, "GPU A", h=1, T=4096, grad=True) == KM.NEVER
    assert KM.path_verdict(table, "GPU A", h=1, T=4096, grad=False) == KM.UNSHARED


@pytest.mark.parametrize("pattern, kernel, several_tokens", [("random", "keymajor", False), ("local", "tokens", True)])
def test_where_the_table_prefers_key_major_for_random_selections_shared_spans_go_token_major(
        monkeypatch, pattern, kernel, several_tokens):
    """UNSHARED: the call measures whether neighbouring tokens share their spans (read at once off CUDA) and
    runs the multi-token kernels where they do, key-major where they do not."""
    import torch

    from nsa_triton_sel.plan import call
    from nsa_triton_sel.testing import nsa_block_indices

    dev = device.Device.target(90, "3.6.0", name="GPU A")
    monkeypatch.setattr(call, "device_of", lambda d: dev)
    monkeypatch.setattr(call, "_SIGNATURES", {})
    monkeypatch.setattr(call, "load_path_entries", lambda: TABLE)
    B, S, G, h, D, T = 1, 4096, 2, 4, 64, 65536
    q = torch.empty(B, S, G, h, D, dtype=torch.bfloat16)
    k = v = torch.empty(B, G, T, D, dtype=torch.bfloat16)
    blocks = nsa_block_indices(B, S, G, T, 64, 16, pattern, torch.Generator().manual_seed(0),
                               torch.arange(T - S, T))
    p = call.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=64, packed=False)
    assert (p.forward.kernel, p.tokens > 1) == (kernel, several_tokens)
    assert (p.dq_groups_per_pass > 0) == (kernel == "keymajor")


def test_the_committed_path_table_keeps_every_choice_within_5_percent_of_the_faster_path():
    """On every cell the table measured, the path the planner takes is at most 5 % slower than the faster one, for
    a forward and for a training step (random selections run key-major where the verdict is ALWAYS or
    UNSHARED, local ones only where it is ALWAYS)."""
    from nsa_triton_sel import config

    entries = config.load_path_entries(config.paths_path())
    assert entries, "the committed path table has no entry: this test would check nothing"
    for e in entries:
        for c in e["cells"]:
            for col, grad in (("fwd", False), ("train", True)):
                verdict = KM.path_verdict(entries, e["gpu"], h=c["h"], T=c["T"], grad=grad)
                key = verdict == KM.ALWAYS or (verdict == KM.UNSHARED and c["sel"] == "random")
                best = min(x for x in (c[f"{col}_token"], c[f"{col}_key"]) if x is not None)
                chosen = c[f"{col}_key"] if key else c[f"{col}_token"]
                assert chosen <= 1.05 * best, (e["gpu"], c, col, verdict)


@pytest.mark.parametrize("text, problem", [
    ('{"schema": 2, "entries": []}', "not a path table of schema 1"),
    ('{"schema": 1, "entries": [{"gpu": "A", "triton": "3.6.0", "source": "x", "cells": []}]}', "'cells'"),
    ('{"schema": 1, "entries": [{"gpu": "A", "triton": "3.6.0", "source": "x", "cells": [{"sel": "wide", "T": 1, '
     '"h": 1, "fwd_token": 1, "fwd_key": 1, "train_token": 1, "train_key": 1}]}]}', "'sel'"),
    ('{"schema": 1, "entries": [{"gpu": "A", "triton": "3.6.0", "source": "x", "cells": [{"sel": "local", "T": 1, '
     '"h": 1, "fwd_token": 0, "fwd_key": 1, "train_token": 1, "train_key": 1}]}]}', "'fwd_token'"),
])
def test_a_bad_path_table_is_refused_naming_the_file_and_the_problem(tmp_path, monkeypatch, text, problem):
    from nsa_triton_sel import config

    f = tmp_path / "paths.json"
    f.write_text(text)
    monkeypatch.setenv(config.PATHS_ENV, str(f))
    config.refresh()
    try:
        with pytest.raises(ValueError, match=problem) as err:
            config.load_path_entries()
        assert str(f) in str(err.value)
    finally:
        monkeypatch.delenv(config.PATHS_ENV)
        config.refresh()


@pytest.mark.parametrize("release,arch,interp,has", [
    ("3.6.0", 90, False, True), ("3.9.0", 90, False, True), ("3.6.0rc1", 90, False, True),
    ("3.5.1", 90, False, False), ("3.0.0", 90, False, False), ("3.6.0", 100, False, False),
    ("3.6.0", 80, False, False), ("3.6.0", None, True, False), ("3.6.0", 90, True, False), ("", 90, False, False),
    ("not-a-version", 90, False, False),
])
def test_the_warp_specialised_kernel_needs_sm90_and_triton_3_6(release, arch, interp, has):
    assert device.gluon_ws(release, arch, interp) is has
    if not interp and release != "not-a-version":  # a target device is interpreted only where it has no arch
        assert device.Device.target(arch, release).gluon_ws is has


@pytest.mark.parametrize("Dk,Dv,bf16,tune,ws", [
    (128, 128, True, (), True),
    (128, 128, False, (), False),  # fp16: the Triton partial kernel
    (192, 128, True, (), False),  # two Dk slices, 32-key tiles
    (128, 64, True, (), False),
    (128, 128, True, (("gluon_ws", False),), False),  # the tune knob
    (128, 128, True, (("block_n", 32),), False),
    (128, 128, True, (("pairs", 32),), False),
])
def test_the_keymajor_plan_takes_the_warp_specialised_kernel_where_it_is_written_for(Dk, Dv, bf16, tune, ws):
    dev = device.Device.target(90, "3.6.0", sm_count=132)
    launch = plan.keymajor(1, 8192, 4, 4, Dk, Dv, 8192, 16, dev=dev, span_len=64, aligned=True, bf16=bf16,
                           tune=tune)
    assert launch.meta.ws is ws
    if ws:
        assert launch.meta.ws_constexprs() == {"BLOCK_N": 64, "ROWS": 64, "D": 128, "HP": 4, "SLOTS": KM.WS_SLOTS,
                                               "REGISTERS": KM.WS_REGISTERS}


@pytest.mark.parametrize("Dk,Dv,bf16,tune,gluon", [
    (128, 128, True, (), True),
    (128, 128, False, (), False),  # fp16: the Triton kernel alone
    (192, 128, True, (), False),  # two Dk slices, 32-key tiles
    (128, 64, True, (), False),
    (128, 128, True, (("gluon_bwd", False),), False),  # the tune knob
    (128, 128, True, (("gluon_ws", False),), True),  # the forward's knob leaves the backward's kernel
    (128, 128, True, (("block_n", 32),), False),
])
def test_the_keymajor_plan_takes_the_gluon_backward_where_it_is_written_for(Dk, Dv, bf16, tune, gluon):
    dev = device.Device.target(90, "3.6.0", sm_count=132)
    meta = plan.keymajor(1, 8192, 4, 4, Dk, Dv, 8192, 16, dev=dev, span_len=64, aligned=True, bf16=bf16,
                         tune=tune).meta
    assert meta.bwd_gluon is gluon
    if gluon:
        assert meta.bwd_gluon_constexprs() == {"BLOCK_N": 64, "ROWS": KM.BWD_ROWS, "D": 128, "HP": 4,
                                               "SLOTS": KM.BWD_GLUON_SLOTS}


@pytest.mark.parametrize("arch,release", [(90, "3.5.1"), (100, "3.6.0"), (None, "3.6.0")])
def test_the_keymajor_plan_runs_the_triton_backward_kernel_where_the_device_has_no_gluon_kernel(arch, release):
    dev = device.Device.target(arch, release, sm_count=132)
    meta = plan.keymajor(1, 8192, 4, 4, 128, 128, 8192, 16, dev=dev, span_len=64, aligned=True, bf16=True).meta
    assert meta.bwd_gluon is False


@pytest.mark.parametrize("arch,release", [(90, "3.5.1"), (100, "3.6.0"), (None, "3.6.0")])
def test_the_keymajor_plan_runs_the_triton_partial_kernel_where_the_device_has_no_gluon_kernel(arch, release):
    dev = device.Device.target(arch, release, sm_count=132)
    launch = plan.keymajor(1, 8192, 4, 4, 128, 128, 8192, 16, dev=dev, span_len=64, aligned=True, bf16=True)
    assert launch.meta.ws is False
