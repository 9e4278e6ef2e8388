"""Do neighbouring tokens share their selections?  The multi-token kernel's switch, without a host sync.

Real NSA selections keep a block for many consecutive tokens, random ones do not, and the
multi-token kernel pays only for the former (on random selections it is slower than the
single-token kernel).  The switch: at least :data:`SHARE_MIN` of the (token, group) rows select
the same span starts (or block indices, slot by slot) as the token before.

Reading that fraction is a host sync, and a sync before a prefill launch leaves the GPU idle
while the host launches the kernel.  So on CUDA the fraction is measured on the device and
copied to pinned memory without waiting; a call uses the newest measurement that has arrived
for its signature (the spans' shape, dtype and device).  Only the first call of a signature
waits for its own.  Under CUDA-graph capture nothing is measured: the last answer is frozen into
the graph (no answer yet: the single-token kernel, right for any selection).  On the CPU (the
interpreter) the fraction is read at once: there the read costs nothing.  Both kernels are exact
for every selection; the switch only chooses the faster one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .. import caches


SHARE_MIN = 0.5


def share_fraction(spans: torch.Tensor) -> torch.Tensor:
    """Fraction of rows (b, s >= 1, g) whose span starts equal token s - 1's, as a 0-dim float tensor."""
    starts = spans[..., 0] if spans.dim() == 5 else spans  # [B, S, G, n]
    if starts.shape[1] < 2:
        return torch.zeros((), device=spans.device)
    return (starts[:, 1:] == starts[:, :-1]).all(-1).float().mean()


@dataclass
class _Probe:
    host: torch.Tensor  # pinned [1] float32: the newest measurement copied back
    event: object = field(default=None)
    pending: bool = False
    shared: bool | None = None  # the answer in use


_PROBES: dict[tuple, _Probe] = caches.register("share_probes", {})


def _key(spans) -> tuple:
    return (spans.device, spans.dtype, tuple(spans.shape))


def shared(spans: torch.Tensor) -> bool:
    """Whether neighbouring tokens share their spans (at least :data:`SHARE_MIN` of the rows)."""
    if spans.device.type != "cuda":
        return float(share_fraction(spans)) >= SHARE_MIN
    return _shared_async(spans)


def _shared_async(spans: torch.Tensor) -> bool:
    key = _key(spans)
    probe = _PROBES.get(key)
    if torch.cuda.is_current_stream_capturing():
        return bool(probe and probe.shared)
    if probe is None:
        probe = _PROBES[key] = _Probe(host=torch.empty(1, dtype=torch.float32, pin_memory=True),
                                      event=torch.cuda.Event())
    if probe.pending and probe.event.query():
        probe.shared, probe.pending = float(probe.host[0]) >= SHARE_MIN, False
    if not probe.pending:
        probe.host.copy_(share_fraction(spans).reshape(1), non_blocking=True)
        probe.event.record()
        probe.pending = True
    if probe.shared is None:  # the first call of this signature waits for its own measurement
        probe.event.synchronize()
        probe.shared, probe.pending = float(probe.host[0]) >= SHARE_MIN, False
    return probe.shared
