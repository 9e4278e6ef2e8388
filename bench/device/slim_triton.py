"""Triton wheels -> the smallest form that carries them to an offline NVIDIA GPU machine, and back.

The device tool carries at most 64 MiB per call (the working tree included), and a Triton wheel is
150-290 MB.  Three steps make twelve of them carriable in a few calls:

1. **slim**: drop what an NVIDIA run of this project never loads (:data:`DROP`: the AMD backend, proton the
   profiler and its CUPTI, ``nvdisasm``, test and instrumentation libraries; and of the two ``ptxas`` that
   Triton 3.7+ ship, the one the release does not call for ``--arch`` (default 90, the H100), read from the
   release's own ``get_ptxas`` (:func:`ptxas_for`): in 3.3 and 3.7-3.8 sm_90 uses ``ptxas`` and sm_100+
   ``ptxas-blackwell``, from 3.9 on every arch from sm_90 up uses ``ptxas-blackwell``; ``--arch 0`` keeps
   both) and strip debug information from the shared libraries
   (``strip --strip-debug``: ``libtriton.so`` 500 -> 235 MB).  The NVIDIA backend's Python, ``ptxas``,
   ``cuobjdump``, ``libdevice`` and the CUDA headers the launcher is compiled against stay.  The ``amd``
   entry point is dropped from the wheel's ``entry_points.txt`` (Triton >= 3.5 imports every backend its
   entry points name);
2. **deduplicate**: every file is stored once by content (sha256): the same ``ptxas``, ``libdevice`` or
   header in several releases travels once;
3. **compress**: the unique contents, release after release in version order, go into one solid xz stream
   whose dictionary (``--dict-mib``, default 512) spans more than one release, so a patch release's
   ``libtriton.so`` costs a few MB next to its sibling's.  Python's :mod:`lzma` decodes it anywhere.

The stream is split into parts of ``--part-mib`` (default: what the device tool's 64 MiB leaves beside the
working tree of the repository you run this from), named ``triton-slim.NNN-of-MMM.xz``.  It starts with a
manifest (releases, their files, modes and the byte offset where each release is complete), so the
device side can hand over each release as soon as the parts that hold it are there::

    python bench/device/slim_triton.py pack /work/wheels/triton-*.whl --out /work/carry/slim      # here
    python bench/device/slim_triton.py unpack --parts .refresh/parts --dest .refresh/trees --follow 900  # there
    python bench/device/slim_triton.py check .refresh/trees/triton-3.9.0                          # import + version
    python bench/device/slim_triton.py resplit --parts /work/carry/slim --part-mib 40             # other part size

``unpack`` writes ``DEST/triton-X.Y.Z/`` (a tree to put first on ``PYTHONPATH``: ``triton/`` and its
``dist-info``) and then ``DEST/triton-X.Y.Z.ready``; with ``--follow S`` it waits up to S seconds for each
missing part (parts arrive over several calls).  Standard library only; ``strip`` (binutils) on the packing side.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import io
import json
import lzma
import os
import re
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

MAGIC = b"NSASLIM1"
PART_RE = re.compile(r"triton-slim\.(\d{3})-of-(\d{3})\.xz$")
DEVICE_LIMIT_MIB = 64  # what one device call carries, the working tree included
# Never loaded by an NVIDIA run of this project (fnmatch patterns over the wheel's paths; `*` crosses `/`).
DROP = (
    "triton/backends/amd/*",  # the AMD backend: its compiler, device libraries, HIP headers
    "triton/_C/libproton.so", "triton/profiler/*",  # proton, the profiler (never imported by `import triton`)
    "triton/backends/nvidia/lib/cupti*", "triton/backends/nvidia/include/cupti*",  # proton's CUPTI
    "triton/backends/nvidia/bin/nvdisasm",  # only Triton's optional SASS dump
    "triton/instrumentation/*", "triton/plugins/*Test*", "triton/FileCheck",  # test and instrumentation libraries
    "*/tests/*",
)
PTXAS_DIR = "triton/backends/nvidia/bin/"
PTXAS = ("ptxas", "ptxas-blackwell")
STRIP_SUFFIXES = (".so",)  # shared libraries: debug information out, symbols kept (strip --strip-debug)


# ----------------------------------------------------------------------------------------------- pack

def wheel_version(name: str) -> str:
    m = re.match(r"triton-(\d+\.\d+\.\d+)", Path(name).name)
    if not m:
        raise SystemExit(f"slim_triton: {name} is not a triton wheel (expected triton-X.Y.Z-...whl)")
    return m.group(1)


def dropped(path: str, unused_ptxas: str | None = None) -> bool:
    if unused_ptxas and path == PTXAS_DIR + unused_ptxas:
        return True
    return any(fnmatch.fnmatchcase(path, p) for p in DROP)


def ptxas_for(compiler_py: str, arch: int) -> str | None:
    """Which of the release's ptxas binaries its NVIDIA backend runs for ``arch``, from its own
    ``backends/nvidia/compiler.py``; None where the source says neither plainly (then both are kept)."""
    if "ptxas_blackwell" not in compiler_py and "ptxas-blackwell" not in compiler_py:
        return "ptxas"  # one ptxas for every arch
    m = (re.search(r"ptxas_blackwell if arch >= (\d+) else knobs\.nvidia\.ptxas", compiler_py)  # 3.7, 3.8
         or re.search(r"\"ptxas-blackwell\" if arch >= (\d+) else \"ptxas\"", compiler_py))  # 3.3
    if m:
        return "ptxas-blackwell" if arch >= int(m.group(1)) else "ptxas"
    m = re.search(r"if arch < (\d+):\s*return knobs\.nvidia\.ptxas\s+.*?return knobs\.nvidia\.ptxas_blackwell",
                  compiler_py, re.S)  # 3.9: legacy ptxas below sm_90 only
    if m:
        return "ptxas" if arch < int(m.group(1)) else "ptxas-blackwell"
    return None


def _entry_points(text: str) -> str:
    """``entry_points.txt`` without the amd backend (its files are dropped)."""
    return "".join(ln for ln in text.splitlines(keepends=True) if not re.match(r"\s*amd\s*=", ln))


def slim_wheel(wheel: Path, arch: int, scratch: Path) -> tuple[list[tuple[str, bytes, int]], dict]:
    """``[(path, contents, mode)]`` of a wheel after :data:`DROP`, the ptxas ``arch`` does not use, and strip;
    and what it cost and saved.  ``arch`` 0 keeps every ptxas."""
    files, stats = [], {"wheel_bytes": wheel.stat().st_size, "dropped": [], "unpacked_bytes": 0, "kept_bytes": 0}
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        unused = None
        if arch and all(PTXAS_DIR + p in names for p in PTXAS):
            used = ptxas_for(z.read("triton/backends/nvidia/compiler.py").decode(), arch)
            unused = next((p for p in PTXAS if used and p != used), None)
        stats["ptxas_dropped"] = unused
        for info in z.infolist():
            if info.is_dir():
                continue
            stats["unpacked_bytes"] += info.file_size
            if dropped(info.filename, unused):
                stats["dropped"].append(info.filename)
                continue
            body = z.read(info)
            mode = (info.external_attr >> 16) & 0o777 or 0o644
            if info.filename.endswith("entry_points.txt"):
                body = _entry_points(body.decode()).encode()
            elif info.filename.endswith(STRIP_SUFFIXES) and body[:4] == b"\x7fELF":
                body = _strip(body, scratch)
            files.append((info.filename, body, mode))
            stats["kept_bytes"] += len(body)
    return files, stats


def _strip(body: bytes, scratch: Path) -> bytes:
    tmp = scratch / "strip.so"
    tmp.write_bytes(body)
    res = subprocess.run(["strip", "--strip-debug", str(tmp)], capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"slim_triton: strip --strip-debug failed: {res.stderr.strip()} (install binutils)")
    return tmp.read_bytes()


def default_part_mib(repo: Path) -> int:
    """What one device call can carry beside the working tree of ``repo`` (tracked and untracked-not-ignored
    files), with 2 MiB to spare; the device tool's limit is 64 MiB in all."""
    res = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                         capture_output=True)
    if res.returncode != 0:
        return 40
    tree = sum((repo / n).stat().st_size for n in res.stdout.decode().split("\0") if n and (repo / n).is_file())
    return max(8, int(DEVICE_LIMIT_MIB - tree / 2**20 - 2))


def pack(wheels: list[Path], out: Path, part_mib: float, preset: int, dict_mib: int, arch: int = 90) -> dict:
    """Slim, deduplicate and compress ``wheels`` into ``out/triton-slim.NNN-of-MMM.xz``; a report of the sizes."""
    wheels = sorted(wheels, key=lambda w: tuple(int(x) for x in wheel_version(w.name).split(".")))
    seen = [wheel_version(w.name) for w in wheels]
    if len(set(seen)) != len(seen):
        raise SystemExit(f"slim_triton: one wheel per release, got {seen}")
    out.mkdir(parents=True, exist_ok=True)
    for old in [*out.glob("triton-slim.*.xz"), *out.glob("triton-slim.*.tmp")]:
        old.unlink()
    t0 = time.monotonic()
    releases, report, order, sizes, offset = [], {"releases": {}}, [], {}, 0
    with tempfile.TemporaryDirectory(dir=out) as tmp:
        store = Path(tmp)
        for wheel in wheels:  # 1. slim each wheel into a content-addressed store on disk
            files, stats = slim_wheel(wheel, arch, store)
            entry = []
            for path, body, mode in files:
                sha = hashlib.sha256(body).hexdigest()
                if sha not in sizes:
                    (store / sha).write_bytes(body)
                    sizes[sha] = len(body)
                    order.append(sha)
                    offset += len(body)
                entry.append([path, sha, mode])
            version = wheel_version(wheel.name)
            releases.append({"version": version, "wheel": wheel.name, "files": entry, "end": offset})
            stats.pop("dropped")
            report["releases"][version] = stats
            print(f"slim_triton: {wheel.name}: {stats['unpacked_bytes'] / 2**20:.0f} MiB unpacked -> "
                  f"{stats['kept_bytes'] / 2**20:.0f} MiB kept; {offset / 2**20:.0f} MiB unique so far", flush=True)
        t_slim = time.monotonic() - t0
        manifest = json.dumps({"releases": releases, "blobs": [[s, sizes[s]] for s in order]}).encode()
        writer = PartWriter(out, int(part_mib * 2**20))
        comp = lzma.LZMACompressor(lzma.FORMAT_XZ, filters=[{"id": lzma.FILTER_LZMA2, "preset": preset,
                                                              "dict_size": dict_mib * 2**20}])
        writer.write(comp.compress(MAGIC + struct.pack("<Q", len(manifest)) + manifest))  # 2. one solid stream
        ends = {r["end"]: r["version"] for r in releases}
        plain = 0
        for sha in order:
            with (store / sha).open("rb") as f:
                while chunk := f.read(1 << 22):
                    writer.write(comp.compress(chunk))
            plain += sizes[sha]
            if plain in ends:  # the compressor holds some back: the part named is a lower bound
                report["releases"][ends[plain]]["compressed_mib_at_end"] = round(writer.total / 2**20, 1)
        writer.write(comp.flush())
        n = writer.close()
    report.update(parts=n, part_mib=part_mib, compressed_bytes=writer.total, unique_bytes=offset,
                  wheels_bytes=sum(w.stat().st_size for w in wheels), slim_seconds=round(t_slim, 1),
                  seconds=round(time.monotonic() - t0, 1), preset=preset, dict_mib=dict_mib, arch=arch)
    (out / "pack-report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


class PartWriter:
    """Compressed bytes -> ``triton-slim.NNN.tmp`` files of at most ``step`` bytes, renamed
    ``triton-slim.NNN-of-MMM.xz`` once the count is known."""

    def __init__(self, out: Path, step: int):
        self.out, self.step, self.total, self.parts, self.fh, self.left = out, step, 0, [], None, 0

    def write(self, data: bytes) -> None:
        while data:
            if self.left == 0:
                if self.fh:
                    self.fh.close()
                self.parts.append(self.out / f"triton-slim.{len(self.parts):03d}.tmp")
                self.fh, self.left = self.parts[-1].open("wb"), self.step
            take = data[: self.left]
            self.fh.write(take)
            self.left -= len(take)
            self.total += len(take)
            data = data[len(take):]

    def close(self) -> int:
        if self.fh:
            self.fh.close()
        n = len(self.parts)
        for i, tmp in enumerate(self.parts):
            tmp.rename(self.out / f"triton-slim.{i:03d}-of-{n:03d}.xz")
        return n


# --------------------------------------------------------------------------------------------- unpack

class Parts(io.RawIOBase):
    """The parts of the stream, read in order; with ``follow`` seconds, waits for a part that is not there
    yet (the next call brings it).  A part must be complete when it appears: move it into place
    (``os.replace``), never copy it in."""

    def __init__(self, folder: Path, follow: float = 0.0):
        self.folder, self.follow, self.index, self.total, self.fh = Path(folder), follow, 0, None, None

    def _find(self, i: int) -> Path | None:
        for p in self.folder.glob(f"triton-slim.{i:03d}-of-*.xz"):
            total = int(PART_RE.search(p.name).group(2))
            if self.total is not None and total != self.total:
                raise SystemExit(f"slim_triton: {p.name} belongs to a stream of {total} parts, not {self.total}")
            self.total = total
            return p
        return None

    def _open_next(self) -> bool:
        if self.total is not None and self.index >= self.total:
            return False
        deadline = time.monotonic() + self.follow
        while (path := self._find(self.index)) is None:
            if time.monotonic() >= deadline:
                raise SystemExit(f"slim_triton: part {self.index:03d} not in {self.folder} "
                                 f"(waited {self.follow:.0f} s); carry it and run unpack again")
            time.sleep(1.0)
        print(f"slim_triton: reading {path.name}", flush=True)
        self.fh = path.open("rb")
        self.index += 1
        return True

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while True:
            if self.fh is None and not self._open_next():
                return 0
            n = self.fh.readinto(b)
            if n:
                return n
            self.fh.close()
            self.fh = None


def unpack(parts: Path, dest: Path, follow: float = 0.0) -> list[str]:
    """Decode the stream into ``dest/store/<sha>`` and each release's tree ``dest/triton-X.Y.Z/`` (hard
    links into the store), then ``dest/triton-X.Y.Z.ready``; releases already ready are kept.  Returns the
    versions made ready."""
    dest.mkdir(parents=True, exist_ok=True)
    store = dest / "store"
    store.mkdir(exist_ok=True)
    stream = lzma.LZMAFile(io.BufferedReader(Parts(parts, follow), buffer_size=1 << 20))
    if stream.read(len(MAGIC)) != MAGIC:
        raise SystemExit(f"slim_triton: {parts} does not start a slim_triton stream (part 000 first)")
    (size,) = struct.unpack("<Q", stream.read(8))
    manifest = json.loads(stream.read(size))
    releases = list(manifest["releases"])
    done, pos = [], 0
    for sha, length in manifest["blobs"]:
        target = store / sha
        if target.exists() and target.stat().st_size == length:
            _skip(stream, length)
        else:
            _copy(stream, target, length, sha)
        pos += length
        while releases and releases[0]["end"] <= pos:
            done.append(_materialise(releases.pop(0), store, dest))
    while releases:  # releases that need no new blob
        done.append(_materialise(releases.pop(0), store, dest))
    return [v for v in done if v]


def _skip(stream, length: int) -> None:
    while length:
        length -= len(stream.read(min(length, 1 << 22)))


def _copy(stream, target: Path, length: int, sha: str) -> None:
    h, tmp = hashlib.sha256(), target.with_suffix(".part")
    with tmp.open("wb") as f:
        left = length
        while left:
            chunk = stream.read(min(left, 1 << 22))
            if not chunk:
                raise SystemExit("slim_triton: the stream ended early (a truncated part?)")
            h.update(chunk)
            f.write(chunk)
            left -= len(chunk)
    if h.hexdigest() != sha:
        raise SystemExit(f"slim_triton: blob {sha[:12]} does not match its hash (a corrupted part?)")
    os.replace(tmp, target)


def _materialise(rel: dict, store: Path, dest: Path) -> str | None:
    version = rel["version"]
    ready = dest / f"triton-{version}.ready"
    if ready.exists():
        return None
    tree = dest / f"triton-{version}"
    shutil.rmtree(tree, ignore_errors=True)
    for path, sha, mode in rel["files"]:
        target = tree / path
        target.parent.mkdir(parents=True, exist_ok=True)
        # A copy, not a hard link: modes differ between releases that share a file, and a test must
        # never edit the store through a link.  Copies of ~250 MB per release take a second.
        shutil.copyfile(store / sha, target)
        os.chmod(target, mode | stat.S_IRUSR)
    ready.write_text(json.dumps({"version": version, "wheel": rel["wheel"], "tree": str(tree)}) + "\n")
    print(f"slim_triton: triton {version} ready in {tree}", flush=True)
    return version


def resplit(folder: Path, part_mib: float) -> int:
    """Cut the stream in ``folder`` into parts of ``part_mib`` instead (no recompression: parts are byte
    slices of one stream); the number of parts."""
    old = sorted(folder.glob("triton-slim.*-of-*.xz"))
    totals = {int(PART_RE.search(p.name).group(2)) for p in old}
    if not old or len(totals) != 1 or len(old) != totals.pop():
        raise SystemExit(f"slim_triton: {folder} does not hold every part of one stream")
    writer = PartWriter(folder, int(part_mib * 2**20))
    for p in old:
        writer.write(p.read_bytes())
        p.unlink()
    return writer.close()


def check(tree: Path, python: str) -> int:
    """Import triton from ``tree`` in a child process (first on its path) and print what it found."""
    code = ("import triton, triton.language, triton.backends as b; "
            "print(triton.__version__, triton.__file__, sorted(b.backends))")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")]))}
    res = subprocess.run([python, "-c", code], env=env, capture_output=True, text=True)
    print((res.stdout + res.stderr).strip())
    return res.returncode


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python bench/device/slim_triton.py", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    pk = sub.add_parser("pack", help="wheels -> slim, deduplicated, compressed parts")
    pk.add_argument("wheels", nargs="+", type=Path)
    pk.add_argument("--out", type=Path, required=True)
    pk.add_argument("--part-mib", default="auto", help="MiB per part; auto: 64 MiB less this repository's tree")
    pk.add_argument("--preset", type=int, default=3,
                    help="xz preset 0-9 (default 3: 6 is 2-3x slower for a few %% less)")
    pk.add_argument("--dict-mib", type=int, default=512, help="xz dictionary: spans more than one release")
    pk.add_argument("--arch", type=int, default=90,
                    help="the GPU arch the trees will run on (keeps the ptxas it needs; 0 keeps every ptxas)")
    up = sub.add_parser("unpack", help="parts -> one tree per release")
    up.add_argument("--parts", type=Path, required=True)
    up.add_argument("--dest", type=Path, required=True)
    up.add_argument("--follow", type=float, default=0.0, help="seconds to wait for each missing part")
    rs = sub.add_parser("resplit", help="cut the parts to another size (a larger working tree: smaller parts)")
    rs.add_argument("--parts", type=Path, required=True)
    rs.add_argument("--part-mib", default="auto")
    ck = sub.add_parser("check", help="import triton from a tree")
    ck.add_argument("tree", type=Path)
    ck.add_argument("--python", default=sys.executable)
    args = p.parse_args(argv)
    if args.cmd == "pack":
        missing = [w for w in args.wheels if not w.is_file()]
        if missing:
            print(f"slim_triton: no such wheel: {', '.join(map(str, missing))}", file=sys.stderr)
            return 2
        part = default_part_mib(Path(__file__).resolve().parents[2]) if args.part_mib == "auto" else float(args.part_mib)
        report = pack(args.wheels, args.out, part, args.preset, args.dict_mib, args.arch)
        print(f"slim_triton: {len(args.wheels)} wheels, {report['wheels_bytes'] / 2**20:.0f} MiB -> "
              f"{report['unique_bytes'] / 2**20:.0f} MiB unique -> {report['compressed_bytes'] / 2**20:.1f} MiB "
              f"compressed in {report['parts']} part(s) of <= {part} MiB ({report['seconds']:.0f} s): {args.out}")
        return 0
    if args.cmd == "unpack":
        t0 = time.monotonic()
        done = unpack(args.parts, args.dest, args.follow)
        print(f"slim_triton: {len(done)} release(s) unpacked in {time.monotonic() - t0:.0f} s: {', '.join(done) or 'none new'}")
        return 0
    if args.cmd == "resplit":
        part = default_part_mib(Path(__file__).resolve().parents[2]) if args.part_mib == "auto" else float(args.part_mib)
        print(f"slim_triton: {resplit(args.parts, part)} part(s) of <= {part} MiB in {args.parts}")
        return 0
    return check(args.tree, args.python)


if __name__ == "__main__":
    sys.exit(main())
