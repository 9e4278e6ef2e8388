"""The launch planner: row caps from the known-bad windows, the decode and multi-token choices, and
the one place tokens per program are decided (the compile-smoke registry derived from it: compat/test_variants.py)."""

from __future__ import annotations

import itertools

import pytest

from nsa_triton_sel import device, known_bad, plan
from nsa_triton_sel.plan import tiles as M

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
    p = call.plan_call(q, k, v, blocks, None, per_head=False, tokens=0, span_len=64, packed=False, traced=False)
    assert (p.forward.kernel == "keymajor") == by_key, (arch, release, p.forward.kernel)
