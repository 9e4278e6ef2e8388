"""What the evidence of a release is about: which sources, which torch, which GPU.

Two hashes name the sources a record ran (:mod:`nsa_triton_sel.provenance`):

- *Stale*: a GPU record whose ``compiler_hash`` is not the compiler-facing hash being pinned (the
  Triton sources and the tables that decide their constexprs) is about other machine code.
  MATRIX.md shows it as stale and nothing counts it: not the cells, not known-good.  A record without
  the field is of unknown source and counts as stale for the GPU (records that predate the field were
  backfilled from the commit they name where that commit is trusted: :mod:`.backfill`).  CPU records
  are re-run by CI on every change; they keep counting, and MATRIX.md says how many are about other
  compiler-facing sources.
- *Contract stale*: a GPU ``contract`` record (the user contract on a GPU, ``tests/test_contract_gpu*.py``)
  whose ``runtime_hash`` is not the runtime being pinned ran another host side (arguments, routing,
  the operator, launchers).  A runtime edit cannot change what Triton compiles, so it stales only this
  record, which is re-run on the newest and the oldest release: a release keeps its GPU use, and
  MATRIX.md, known-good.txt and ``nsa-sel doctor`` say that its contract record is about another
  runtime.  Only a contract record of the current runtime can refuse GPU use.
- *Tested with*: the torch builds the records of a release actually ran with, per machine
  ("2.13.0+cpu (CPU)", "2.11.0+cu130 (H100, off-pair)"), beside the torch the release pairs with.
- *GPU use*: a release is admitted for GPU use on a GPU only with non-stale GPU evidence from it:
  parity forward and gradients each with a pass and no failure, no failed bench record (the bench
  lane holds the "auto within 5 % of the kernel" check), and a GPU contract run (a pass, and no
  failure where it ran the current runtime).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ... import provenance
from ..core.verdicts import BAD, PASS

GPU_ADMISSION_CHECKS = ("parity", "backward", "contract")  # each needs a pass and no failure, per GPU
GPU_BLOCKING_CHECKS = ("parity", "backward", "bench")  # any failure here refuses GPU use
CONTRACT = "contract"
COMPILER_FIELD, RUNTIME_FIELD = provenance.FIELDS[provenance.COMPILER], provenance.FIELDS[provenance.RUNTIME]


def current_hash() -> str | None:
    """This checkout's compiler-facing hash (None: the sources cannot be read)."""
    try:
        return provenance.compiler_hash()
    except (OSError, ValueError):
        return None


def current_runtime() -> str | None:
    """This checkout's runtime hash (None: the sources cannot be read)."""
    try:
        return provenance.runtime_hash()
    except (OSError, ValueError):
        return None


def is_gpu(rec: dict) -> bool:
    """Evidence from a GPU machine (any mode: GPU parity, or a compile on the GPU box)."""
    return rec.get("mode") == "gpu" or (rec.get("machine") or "cpu") != "cpu"


def on_gpu_machine(rec: dict) -> bool:
    """Ran on a machine with a GPU (a GPU-mode run on a CPU machine only records skips)."""
    return (rec.get("machine") or "cpu") != "cpu"


def is_stale(rec: dict, current: str | None) -> bool:
    """About other compiler-facing sources than ``current`` (unknown source counts as other)."""
    return current is None or rec.get(COMPILER_FIELD) != current


def runtime_stale(rec: dict, runtime: str | None) -> bool:
    """Ran another runtime than ``runtime`` (unknown counts as other)."""
    return runtime is None or rec.get(RUNTIME_FIELD) != runtime


def fresh(recs: list[dict], current: str | None) -> tuple[list[dict], list[dict]]:
    """(records that count, stale GPU records that do not)."""
    keep, stale = [], []
    for r in recs:
        (stale if is_gpu(r) and is_stale(r, current) else keep).append(r)
    return keep, stale


def hashes_text(recs: list[dict], name: str = COMPILER_FIELD, chars: int = 16) -> str:
    """The distinct hashes ``recs`` carry in field ``name`` ("unknown" for none), '/'-joined."""
    return "/".join(sorted({str(r.get(name) or "unknown")[:chars] for r in recs}))


def short_gpu(name: str | None) -> str:
    """'NVIDIA H100 80GB HBM3' -> 'H100'; 'NVIDIA GeForce RTX 4090' -> 'RTX 4090'."""
    words = [w for w in (name or "GPU").split() if w not in ("NVIDIA", "GeForce", "Tesla")]
    out = []
    for w in words:
        if "GB" in w or w.startswith(("HBM", "PCIe", "SXM")):
            break
        out.append(w)
    return " ".join(out) or (name or "GPU")


def tested_with(recs: list[dict]) -> list[str]:
    """The torch builds the records ran with: '2.13.0+cpu (CPU)', '2.4.1+cu121 (CPU, paired)' (a CPU lane that ran
    the torch its Triton pairs with), '2.11.0+cu130 (H100, off-pair)'."""
    seen: dict[str, None] = {}
    for r in sorted(recs, key=lambda r: (on_gpu_machine(r), r.get("torch") or "")):
        torch_v = r.get("torch") or "no torch"
        if not on_gpu_machine(r):
            seen[f"{torch_v} (CPU{', paired' if r.get('torch_paired') else ''})"] = None
        else:
            seen[f"{torch_v} ({short_gpu(r.get('machine'))}{'' if r.get('torch_paired') else ', off-pair'})"] = None
    return list(seen)


@dataclass
class GpuStatus:
    """GPU use of one release: the GPUs it is admitted on, and why not on the others."""

    admitted: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)  # GPU -> why not
    stale: dict[str, str] = field(default_factory=dict)  # GPU -> the compiler hashes its evidence is about
    contract_stale: dict[str, str] = field(default_factory=dict)  # GPU -> the runtime its contract record ran

    def text(self, current: str | None, runtime: str | None = None) -> str:
        parts = []
        if self.admitted:
            parts.append(f"admitted for GPU use on {', '.join(self.admitted)}")
        parts += [f"not on {g}: {why}" for g, why in self.refused.items()]
        parts += [f"{g}: stale evidence only (kernels {h}, now {current or '?'})" for g, h in self.stale.items()
                  if g not in self.admitted and g not in self.refused]
        parts += [f"{g}: contract record stale (runtime {h}, now {runtime or '?'}: re-run the GPU contract suite)"
                  for g, h in self.contract_stale.items()]
        return "; ".join(parts) or "no GPU evidence (CPU only: AOT compile + interpreter): not for GPU use"


def gpu_status(recs: list[dict], current: str | None, runtime: str | None = None) -> GpuStatus:
    """GPU use of one release from all its records (any check, any machine).

    ``current`` is the compiler-facing hash, ``runtime`` the runtime hash the contract records are
    judged against (a contract record of another runtime admits but cannot refuse, and is flagged)."""
    status = GpuStatus()
    machines = sorted({r.get("machine") for r in recs if is_gpu(r)} - {None, "cpu"})
    for m in machines:
        mine = [r for r in recs if is_gpu(r) and r.get("machine") == m]
        keep, stale = fresh(mine, current)
        if not keep:
            status.stale[m] = hashes_text(stale)
            continue
        why = []
        contract = [r for r in keep if r.get("check") == CONTRACT]
        old = [r for r in contract if runtime_stale(r, runtime)]
        blocking = [r for r in keep if r.get("check") in GPU_BLOCKING_CHECKS] + [r for r in contract if r not in old]
        for check in GPU_BLOCKING_CHECKS + (CONTRACT,):
            bad = [r for r in blocking if r.get("check") == check and r.get("verdict") in BAD]
            if bad:
                why.append(f"{check} {bad[0]['verdict']} ({bad[0].get('kernel')})")
        for check in GPU_ADMISSION_CHECKS:
            if not any(r.get("check") == check and r.get("verdict") == PASS and r.get("mode") == "gpu" for r in keep):
                why.append(f"no GPU {check} pass" if check != CONTRACT or contract else
                           "no GPU contract run (`pytest -m contract`: tests/test_contract_gpu*.py)")
        if old:
            status.contract_stale[m] = hashes_text(old, RUNTIME_FIELD)
        if why:
            status.refused[m] = "; ".join(why)
        else:
            status.admitted.append(m)
    return status


class ReleaseVerdict(tuple):
    """``(admitted, reasons)`` as before, plus what the evidence is about: ``gpu`` (:class:`GpuStatus`),
    ``tested`` (the torch builds run), ``stale`` (GPU records not counted) and ``runtime`` (the runtime
    hash the contract records were judged against)."""

    def __new__(cls, ok: bool, why: list[str], *, gpu: GpuStatus | None = None, tested: list[str] | None = None,
                stale: int = 0, runtime: str | None = None):
        self = super().__new__(cls, (ok, why))
        self.runtime = runtime
        self.gpu = gpu or GpuStatus()
        self.tested = list(tested or [])
        self.stale = stale
        return self
