"""The table of :mod:`cli_fuzz`: damaged-file and bad-argument cases of every ``nsa-sel`` command.

A :class:`Case` is an argv (run in the case's copy of the template project, see
:func:`cli_fuzz.build_template`), the damages applied to that copy first (:func:`cli_fuzz.damage` names
the kinds), and, where the documented statuses are not precise enough, the exit statuses and the stderr
it must give.  :func:`all_cases` is the whole table; :func:`sample` the part the test suite runs.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

# The exit statuses each command documents (`nsa-sel --help`, and docs/matrix.md's "Exit statuses and bad input").
EXIT_CODES = {
    "": {0, 2},                    # nsa-sel itself: --help, or a usage error
    "doctor": {0, 2},
    "pin": {0, 1, 2},              # 1: --check found files of different generations
    "releases": {0, 1, 2},         # 1: --fail-on-new and something is new
    "check-upgrade": {0, 1, 2, 3},  # 1 blocked, 3 environment
    "smoke": {0, 1, 2, 3, 4},
    "matrix": {0, 1, 2},           # 1: a kernel of the spec module does not compile on a release run
}
CAND_VERSION = "3.10.0"
RAW = object()  # marks a value spliced into JSON text as is (NaN, 1e400, nesting, a 5000-digit number)


@dataclass(frozen=True)
class Case:
    name: str
    argv: tuple[str, ...]  # "{root}" and "{index}" are filled in; the working directory is the root
    damages: tuple = ()  # ((target, kind, *args), ...)
    rc: frozenset | None = None  # stricter than the command's documented statuses
    err: str | None = None  # a regex the stderr must match
    debug: bool = False  # --debug: the traceback is expected
    fresh: bool = False  # a new interpreter (the real entry point), not a fork
    env: tuple = ()  # extra environment variables ((name, value), ...)
    ignore: tuple = ()  # changes allowed anyway (prefixes)

    @property
    def command(self) -> str:
        args = [a for a in self.argv if a != "--debug"]
        return args[0] if args and args[0] in EXIT_CODES else ""


GENERIC = ("empty", "truncate", "garbage", "binary", "latin1", "nul", "bom", "utf16", "directory", "fifo", "loop",
           "dangling", "devzero", "missing", "noperm", "sparse")
C = ("--constraints", "constraints")
NAN, INF, NINF, BIG_FLOAT = (RAW, "NaN"), (RAW, "Infinity"), (RAW, "-Infinity"), (RAW, "1e400")
DEEP = (RAW, "[" * 50_000 + "]" * 50_000)
BIG_INT = (RAW, "7" * 5000)
WRONG_VALUES = (("nan", NAN), ("inf", INF), ("-inf", NINF), ("1e400", BIG_FLOAT), ("deep", DEEP), ("bigint", BIG_INT),
                ("null", None), ("true", True), ("int", 12), ("str", "x"), ("list", [1, "a"]), ("dict", {"a": [1]}),
                ("surrogate", "\ud800 lone"))

# Who reads which file, and the command lines that read it.
DOCTOR = (("doctor", "--no-interp"), ("doctor", "--no-interp", "--json"), ("doctor", "--no-interp", *C))
PIN = (("pin", *C, "--results", "results"),)
PIN_CHECK = (("pin", *C, "--check"),)
UPGRADE = (("check-upgrade", CAND_VERSION, *C, "--from-results", "cand", "--skip-index-check"),)
ADMIT = (("check-upgrade", CAND_VERSION, *C, "--from-results", "cand", "--skip-index-check", "--admit"),)
RELEASES = (("releases", *C, "--index-url", "{index}", "--timeout", "5"),)
RELEASES_JSON = (("releases", *C, "--index-url", "{index}", "--json", "out.json", "--fail-on-new"),)

READERS = {
    "constraints/lanes.toml": DOCTOR[:2] + PIN + RELEASES + UPGRADE,
    "constraints/ledger.jsonl": DOCTOR[:2] + PIN + PIN_CHECK + UPGRADE,
    "constraints/known-good.txt": DOCTOR[:2] + PIN + PIN_CHECK,
    "constraints/MATRIX.md": PIN + PIN_CHECK,
    "results/parity-3.5.json": PIN,
    "cand/parity-candidate.json": UPGRADE,
    "index/triton/json": RELEASES,
    "index/torch/json": RELEASES_JSON,
    "index/torch/2.16.0/json": RELEASES,
}

TOML_DAMAGES = (
    ("syntax", "replace", r"^schema = 1$", "schema = = 1"),
    ("schema-str", "replace", r"^schema = 1$", 'schema = "1"'),
    ("schema-2", "replace", r"^schema = 1$", "schema = 2"),
    ("schema-bigint", "replace", r"^schema = 1$", "schema = 1" + "0" * 5000),
    ("schema-float", "replace", r"^schema = 1$", "schema = inf"),
    ("deep-array", "append", "\nzzz = " + "[" * 50_000 + "]" * 50_000 + "\n"),
    ("deep-table", "append", "\nzzz = " + "{a=" * 20_000 + "1" + "}" * 20_000 + "\n"),
    ("required-str", "replace", r"^required = .*$", 'required = "compile, parity"'),
    ("required-unknown", "replace", r"^required = .*$", 'required = ["compile", "speed"]'),
    ("lane-str", "append", '\nlane = "x"\n'),
    ("triton-int", "replace", r'^triton = "3.9.0"$', "triton = 3"),
    ("triton-junk", "replace", r'^triton = "3.9.0"$', 'triton = "three"'),
    ("triton-huge", "replace", r'^triton = "3.9.0"$', 'triton = "3.' + "9" * 5000 + '"'),
    ("torch-ints", "replace", r'^torch = \["2.15.0"\]$', "torch = [2, 15]"),
    ("python-junk", "replace", r'^python = ">=3.11"$', 'python = ">=>3"'),
    ("label-mismatch", "replace", r'^label = "3.9"$', 'label = "3.8"'),
    ("duplicate-lane", "append", '\n[[lane]]\nlabel = "3.9"\ntriton = "3.9.0"\ntorch = []\npython = ">=3"\n'),
    ("unknown-key", "append", "\nsurprise = 1\n"),
    ("no-lanes", "replace", r"\[\[lane\]\][\s\S]*", ""),
    ("archs-bad", "replace", r"^\[matrix\]$", "[matrix]\narchs = [0, 1e3, true]"),
    ("patch-str", "append", '\n[[lane.patch]]\ntriton = "3.9.1"\ntorch = 2\n'),
)
LEDGER_DAMAGES = tuple((f"{key}-{name}", "jsonl", 0, key, value) for key in ("metrics", "verdict", "triton", "arch", "date")
                       for name, value in WRONG_VALUES) + (
    ("metric-nan", "jsonl", 1, ("metrics", "seconds"), NAN),
    ("metric-inf", "jsonl", 2, ("metrics", "other"), INF),
    ("process-nan", "jsonl", 0, ("process", "x"), NAN),
    ("knobs-deep", "jsonl", 0, "knobs", DEEP),
    ("message-surrogate", "jsonl", 3, "message", "\ud800 lone"),
    ("line-list", "jsonl-line", 1, "[1, 2, 3]"),
    ("line-nan", "jsonl-line", 1, "NaN"),
    ("line-deep", "jsonl-line", 2, "[" * 50_000 + "]" * 50_000),
    ("line-bigint", "jsonl-line", 2, "9" * 5000),
    ("cut-last-byte", "cut-last-byte"),
)
RUNFILE_DAMAGES = tuple((f"{'.'.join(map(str, where))}={name}", "json", where, value)
                        for where in (("records", 0, "verdict"), ("records", 0, "metrics"), ("records",), ("status",),
                                      ("kind",), ("base",), ("records", 1, "triton"))
                        for name, value in WRONG_VALUES) + (
    ("top-list", "json", (), [1, 2]),
    ("top-nan", "json", (), NAN),
    ("top-deep", "json", (), DEEP),
    ("record-metric-nan", "json", ("records", 0, "metrics", "seconds"), NAN),
    ("record-other-inf", "json", ("records", 0, "metrics", "x"), INF),
)
INDEX_DAMAGES = tuple((f"{'.'.join(map(str, where)) or 'top'}={name}", "json", where, value)
                      for where in ((), ("releases",), ("info",), ("releases", "*"), ("releases", "*", 0),
                                    ("releases", "*", 0, "yanked"), ("info", "requires_dist"))
                      for name, value in WRONG_VALUES) + (
    ("version-key-huge", "json", ("releases", "3" + "0" * 5000), [{"yanked": False}]),
    ("version-key-junk", "json", ("releases", "not a version"), [{"yanked": False}]),
    ("requires-junk", "json", ("info", "requires_dist"), ["triton (((", "triton==" + "9" * 5000, 7, None]),
)
KNOWN_GOOD_DAMAGES = (
    ("spec-junk", "append", "triton>>>3\n"),
    ("spec-huge", "append", "triton==3." + "9" * 5000 + "\n"),
    ("no-spec", "replace", r"^triton.*$", "# nothing"),
    ("long-line", "append", "#" + "x" * 100_000 + "\n"),
    ("generation-junk", "replace", r"generation [0-9a-f]{16}", "generation zzzz"),
    ("surrogate", "append", "\ud800\n"),
)
MATRIX_DAMAGES = (("generation-junk", "replace", r"generation [0-9a-f]{16}", "generation 0000000000000000"),
                  ("generation-gone", "replace", r"generation [0-9a-f]{16}", "no generation"))


def _damage_cases() -> list[Case]:
    out = []
    specific = {"constraints/lanes.toml": TOML_DAMAGES, "constraints/ledger.jsonl": LEDGER_DAMAGES,
                "constraints/known-good.txt": KNOWN_GOOD_DAMAGES, "constraints/MATRIX.md": MATRIX_DAMAGES,
                "results/parity-3.5.json": RUNFILE_DAMAGES, "cand/parity-candidate.json": RUNFILE_DAMAGES,
                "index/triton/json": INDEX_DAMAGES, "index/torch/json": INDEX_DAMAGES[:30],
                "index/torch/2.16.0/json": INDEX_DAMAGES[-25:]}
    for target, readers in READERS.items():
        damages = [(kind, (target, kind)) for kind in GENERIC]
        damages += [(d[0], (target, *d[1:])) for d in specific.get(target, ())]
        for i, (label, dmg) in enumerate(damages):
            argv = readers[i % len(readers)]  # every reader sees every kind of damage across the targets
            out.append(Case(f"{argv[0]}:{target}:{label}", argv, (dmg,)))
            if target.startswith("constraints/") and label in GENERIC and len(readers) > 1:
                for other in readers:  # the generic damages of a constraints file: every command that reads it
                    if other is not argv:
                        out.append(Case(f"{other[0]}:{target}:{label}:{readers.index(other)}", other, (dmg,)))
    return out


def _argument_cases() -> list[Case]:
    bad_numbers = ("inf", "-inf", "nan", "NaN", "-1", "0", "1e400", "1e308", "9" * 400, "x", "", "0x10", "1_0")
    out = []
    for n in bad_numbers:
        label = n if len(n) < 12 else f"{n[:3]}...({len(n)} digits)"
        out.append(Case(f"releases:--timeout={label}", ("releases", *C, "--index-url", "{index}", "--timeout", n),
                        rc=frozenset({0, 2} if n in ("1e308", "9" * 400, "1_0") else {2})))
        out.append(Case(f"smoke:--timeout={label}", ("smoke", "--timeout", n, "--arch", "1"), rc=frozenset({2})))
        out.append(Case(f"smoke:--jobs={label}", ("smoke", "--jobs", n, "--arch", "1"), rc=frozenset({2})))
        out.append(Case(f"smoke:--progress-every={label}", ("smoke", "--progress-every", n, "--arch", "zz"),
                        rc=frozenset({2})))
        out.append(Case(f"check-upgrade:--max-slowdown={label}",
                        ("check-upgrade", CAND_VERSION, *C, "--from-results", "cand", "--skip-index-check",
                         "--max-slowdown", n), rc=frozenset({0, 2} if n in ("1e308", "9" * 400, "1_0") else {2})))
        out.append(Case(f"doctor:--arch={label}", ("doctor", "--no-interp", "--arch", n), rc=frozenset({2})))
    for arch in ("80", "sm_90", "100", "1" + "0" * 40, "-80", "000"):
        out.append(Case(f"doctor:--arch={arch[:12]}", ("doctor", "--no-interp", "--arch", arch)))
    for arch in ("", ",", "sm_", "80,,90", "1" + "0" * 5000, "٨٠", "²", "80;90", "sm_9999"):
        out.append(Case(f"smoke:--arch={arch[:12]!r}", ("smoke", "--arch", arch, "--progress-every", "0"), rc=frozenset({2})))
    for version in ("", "x", "3", "3.10.0.0.0.0", "1" * 5000, "3.10.0+local", "v3.10.0", "2.0.0", "3.10.0rc1",
                    "../../etc", "--", "3.1O.0"):
        out.append(Case(f"check-upgrade:version={version[:12]!r}",
                        ("check-upgrade", version, *C, "--from-results", "cand", "--skip-index-check")))
    for version in ("x", "1" * 5000, "", "3.9.0 ; rm"):
        out.append(Case(f"smoke:--expect-triton={version[:12]!r}", ("smoke", "--expect-triton", version, "--arch", "zz"),
                        rc=frozenset({2})))
    # Paths given on the command line: missing, a directory or a file where the other is needed, a FIFO,
    # a loop, a file that is not an interpreter, not executable.
    paths = (("missing", ()), ("dir", (("outside/d", "directory"),)), ("fifo", (("outside/f", "fifo"),)),
             ("loop", (("outside/l", "loop"),)), ("devzero", (("outside/z", "devzero"),)),
             ("file", ()))
    where = {"missing": "outside/none", "dir": "outside/d", "fifo": "outside/f", "loop": "outside/l",
             "devzero": "outside/z", "file": "outside/keep.txt"}
    for label, dmg in paths:
        p = where[label]
        out += [
            Case(f"pin:--results={label}", ("pin", *C, "--results", p), dmg),
            Case(f"pin:--ledger={label}", ("pin", *C, "--results", "results", "--ledger", p), dmg),
            Case(f"pin:--check --matrix={label}", ("pin", *C, "--check", "--matrix", p), dmg),
            Case(f"pin:--known-good={label}", ("pin", *C, "--results", "results", "--known-good", p), dmg),
            Case(f"pin:--constraints={label}", ("pin", "--constraints", p, "--results", "results"), dmg),
            Case(f"doctor:--constraints={label}", ("doctor", "--no-interp", "--constraints", p), dmg),
            Case(f"releases:--constraints={label}", ("releases", "--constraints", p, "--index-url", "{index}"), dmg),
            Case(f"releases:--json={label}", ("releases", *C, "--index-url", "{index}", "--json", p), dmg,
                 rc=frozenset({0, 2}) if label == "missing" else None),
            Case(f"releases:--index-url={label}", ("releases", *C, "--index-url", f"file://{{root}}/{p}",
                                                   "--timeout", "2"), dmg, rc=frozenset({2})),
            Case(f"check-upgrade:--from-results={label}",
                 ("check-upgrade", CAND_VERSION, *C, "--from-results", p, "--skip-index-check"), dmg),
            Case(f"check-upgrade:--ledger={label}",
                 ("check-upgrade", CAND_VERSION, *C, "--ledger", p, "--from-results", "cand", "--skip-index-check"),
                 dmg),
            Case(f"matrix:--results={label}", ("matrix", "--results", p), dmg, rc=frozenset({2})),
            Case(f"check-upgrade:--specs={label}", ("check-upgrade", CAND_VERSION, *C, "--specs", p, "--from-results",
                                                    "cand", "--skip-index-check"), dmg, rc=frozenset({2})),
        ]
    out += _team_cases()
    out += _smoke_path_cases()
    for url in ("ftp://example.invalid/x", "gopher://x", "data:,{}", "not a url", "file:///dev/zero",
                "file://other-host/x", "http://", "http://[::1", "file:///proc/self/status", "", "file:relative"):
        out.append(Case(f"releases:--index-url={url[:20]!r}", ("releases", *C, "--index-url", url, "--timeout", "2"),
                        rc=frozenset({2})))
    out.append(Case("releases:file:// FIFO with --timeout", ("releases", *C, "--index-url", "{index}", "--timeout", "2"),
                    (("index/triton/json", "fifo"),), rc=frozenset({2}), err=r"FIFO"))
    out.append(Case("releases:NSA_SEL_INDEX_URL=FIFO", ("releases", *C), (("index/triton/json", "fifo"),),
                    rc=frozenset({2}), env=(("NSA_SEL_INDEX_URL", "{index}"),)))
    # The project found from the environment or the working directory rather than --constraints.
    for label, dmg in (("ledger", ("constraints/ledger.jsonl", "binary")), ("table", ("constraints/lanes.toml", "garbage")),
                       ("known-good", ("constraints/known-good.txt", "fifo"))):
        out.append(Case(f"doctor:env:{label}", ("doctor", "--no-interp"), (dmg,), rc=frozenset({2}),
                        env=(("NSA_SEL_CONSTRAINTS", "{root}/constraints"),)))
        out.append(Case(f"pin:cwd:{label}", ("pin", "--check"), (dmg,)))
    for value in ("{root}/outside/none", "{root}/outside/keep.txt", "", "{root}/constraints/lanes.toml"):
        out.append(Case(f"doctor:NSA_SEL_CONSTRAINTS={value[-12:]!r}", ("doctor", "--no-interp"),
                        env=(("NSA_SEL_CONSTRAINTS", value),)))
    out += [
        Case("nsa-sel:no command", (), rc=frozenset({2})),
        Case("nsa-sel:--help", ("--help",), rc=frozenset({0})),
        Case("nsa-sel:unknown", ("frobnicate",), rc=frozenset({2})),
        Case("nsa-sel:--debug alone", ("--debug",), rc=frozenset({2})),
        Case("pin:unknown option", ("pin", "--frobnicate"), rc=frozenset({2})),
        Case("doctor:unknown option", ("doctor", "--frobnicate"), rc=frozenset({2})),
        Case("releases:unknown option", ("releases", "--frobnicate"), rc=frozenset({2})),
        Case("check-upgrade:no version", ("check-upgrade",), rc=frozenset({2})),
        Case("smoke:unknown option", ("smoke", "--frobnicate"), rc=frozenset({2})),
        Case("pin:--results twice, one missing", ("pin", *C, "--results", "results", "--results", "outside/none"),
             rc=frozenset({2})),
        Case("pin:--matrix is the ledger", ("pin", *C, "--results", "results", "--matrix", "constraints/ledger.jsonl"),
             rc=frozenset({2}), err="three different files"),
        Case("pin:--known-good is MATRIX.md via a link", ("pin", *C, "--results", "results", "--known-good", "outside/m"),
             (("outside/m", "link", "../constraints/MATRIX.md"),), rc=frozenset({2})),
        Case("pin:--check --ledger is MATRIX.md", ("pin", *C, "--check", "--ledger", "constraints/MATRIX.md"),
             rc=frozenset({2})),
        Case("pin:refused leaves no lock", ("pin", *C, "--results", "results"),
             (("constraints/ledger.jsonl", "jsonl", 0, "verdict", "great"),), rc=frozenset({2})),
        Case("pin --check:NaN in the ledger", ("pin", *C, "--check"),
             (("constraints/ledger.jsonl", "jsonl", 1, ("metrics", "x"), NAN),), rc=frozenset({2}),
             err=r"ledger\.jsonl:2: .*NaN"),
        Case("pin:Infinity in a run file", ("pin", *C, "--results", "results"),
             (("results/parity-3.5.json", "json", ("records", 0, "metrics", "x"), INF),), rc=frozenset({2}),
             err=r"parity-3\.5\.json.*Infinity"),
        Case("doctor:known-good FIFO", ("doctor", "--no-interp"), (("constraints/known-good.txt", "fifo"),),
             rc=frozenset({2}), err=r"known-good\.txt.*FIFO"),
        Case("releases:--json directory", ("releases", *C, "--index-url", "{index}", "--json", "outside"),
             rc=frozenset({2}), err=r"--json"),
        Case("admit:clean", ADMIT[0], rc=frozenset({0})),
        Case("upgrade:clean", UPGRADE[0], rc=frozenset({0})),
        Case("pin:clean", PIN[0], rc=frozenset({0})),
        Case("pin --check:clean", PIN_CHECK[0], rc=frozenset({0})),
        Case("releases:clean", RELEASES_JSON[0], rc=frozenset({1})),
        Case("doctor:clean", DOCTOR[0], rc=frozenset({0})),
    ]
    for target in ("constraints/ledger.jsonl", "constraints/lanes.toml", "cand/parity-candidate.json"):
        for kind in ("garbage", "directory", "fifo"):
            out.append(Case(f"admit:{target}:{kind}", ADMIT[0], ((target, kind),), rc=frozenset({2})))
    return out


def _team_cases() -> list[Case]:
    """A user's spec module: ``check-upgrade --specs`` and ``matrix`` refuse what they cannot use, before any lane."""
    spec = (("outside/s.py", "exec", "SPECS = []\n"),)
    up = ("check-upgrade", CAND_VERSION, *C, "--from-results", "cand", "--skip-index-check", "--specs", "outside/s.py")
    out = [Case(f"check-upgrade:--specs {label}", up + extra, spec, rc=frozenset({2}), err=err)
           for label, extra, err in (("--admit", ("--admit",), "--admit with --specs"),
                                     ("--ledger", ("--ledger", "constraints/ledger.jsonl"), "--ledger with --specs"),
                                     ("--max-slowdown", ("--max-slowdown", "0.2"), "--max-slowdown with --specs"),
                                     ("--baseline not listed", ("--baseline", "3.4.1"), "not a release of lanes.toml"),
                                     ("--baseline junk", ("--baseline", "x" * 5000), "not a version"),
                                     ("--archs junk", ("--archs", "sm_"), "--archs"),
                                     ("no team run", (), "no run of --specs"))]
    out += [Case("check-upgrade:--baseline without --specs", ("check-upgrade", CAND_VERSION, *C, "--from-results", "cand",
                                                              "--skip-index-check", "--baseline", "3.5.1"),
                 rc=frozenset({2}), err="only with --specs"),
            Case("check-upgrade:--specs ref=':'", up[:-1] + (":",), rc=frozenset({2})),
            Case("check-upgrade:--specs --baseline the candidate", ("check-upgrade", "3.9.0", *C, "--specs", "outside/s.py",
                                                                    "--baseline", "3.9.0", "--from-results", "cand"),
                 spec, rc=frozenset({2}), err="the candidate itself"),
            Case("matrix:project results", ("matrix", "--results", "results"), rc=frozenset({2}),
                 err="no run of a spec module"),
            Case("matrix:--output directory", ("matrix", "--results", "results", "--output", "outside"),
                 rc=frozenset({2}), err="--output"),
            Case("matrix:no --results", ("matrix",), rc=frozenset({2})),
            Case("matrix:unknown option", ("matrix", "--frobnicate"), rc=frozenset({2}))]
    return out


def _smoke_path_cases() -> list[Case]:
    """Bad paths for ``nsa-sel smoke``, each refused before any compile (a valid one would run the smoke:
    the fuzz's children refuse to, see :func:`_guard`)."""
    exe = lambda text: (("outside/x", "exec", text),)  # noqa: E731 - an executable file with this content
    out = [Case(f"smoke:--python={label}", ("smoke", "--python", "outside/x", "--arch", "90", "--timeout", "3"), dmg,
                rc=frozenset({2}))
           for label, dmg in (("missing", ()), ("directory", (("outside/x", "directory"),)),
                              ("fifo", (("outside/x", "fifo"),)), ("loop", (("outside/x", "loop"),)),
                              ("devzero", (("outside/x", "devzero"),)), ("not-executable", (("outside/x", "append", ""),)),
                              ("shell-script", exe("#!/bin/sh\necho hello\n")), ("elf-garbage", exe("\x7fELF junk")),
                              ("text", exe("just text, no shebang\n")), ("exits-3", exe("#!/bin/sh\nexit 3\n")),
                              ("hangs", exe("#!/bin/sh\nsleep 60\n")),
                              ("old-python", exe("#!/bin/sh\necho 'Python 2.7.18'\n")))]
    for opt in ("--json", "--keep"):
        for label, path, dmg in (("directory", "outside", ()), ("fifo", "outside/x", (("outside/x", "fifo"),)),
                                 ("loop", "outside/x", (("outside/x", "loop"),)),
                                 ("devzero", "outside/x", (("outside/x", "devzero"),)),
                                 ("under-a-file", "outside/keep.txt/x", ()),
                                 ("empty", "", ())):
            if opt == "--keep" and label == "directory":
                continue  # a valid --keep
            out.append(Case(f"smoke:{opt}={label}", ("smoke", opt, path, "--arch", "90"), dmg, rc=frozenset({2})))
    out.append(Case("smoke:--json=no-parent", ("smoke", "--json", "outside/none/x", "--arch", "90"), rc=frozenset({2})))
    out.append(Case("smoke:--keep=a file", ("smoke", "--keep", "outside/keep.txt", "--arch", "90"), rc=frozenset({2})))
    spec = lambda text: (("outside/s.py", "exec", text),)  # noqa: E731
    for label, dmg in (("missing", ()), ("directory", (("outside/s.py", "directory"),)),
                       ("fifo", (("outside/s.py", "fifo"),)), ("loop", (("outside/s.py", "loop"),)),
                       ("devzero", (("outside/s.py", "devzero"),)), ("binary", (("outside/s.py", "exec", "\x00\xff"),)),
                       ("syntax-error", spec("SPECS = [\n")), ("wrong-type", spec("SPECS = 5\n")),
                       ("hangs", spec("import time\ntime.sleep(60)\n"))):
        # importing a module writes its __pycache__ beside it, as any Python import does
        out.append(Case(f"smoke:--specs={label}", ("smoke", "--specs", "outside/s.py:SPECS", "--arch", "90",
                                                   "--timeout", "3"), dmg, rc=frozenset({2}),
                        ignore=("outside/__pycache__",)))
    for ref in ("", ":", "nomodule", "no.such.module:X", "os:path", "outside/s.py", "outside/s.py:"):
        out.append(Case(f"smoke:--specs ref={ref!r}", ("smoke", "--specs", ref, "--arch", "90", "--timeout", "3"),
                        spec("SPECS = []\n"), rc=frozenset({2}), ignore=("outside/__pycache__",)))
    return out


def _fresh_and_debug_cases() -> list[Case]:
    """The real entry point (a new interpreter) on a few of the damaged-file cases, and --debug."""
    return [
        Case("fresh:doctor on a corrupt ledger", ("doctor", "--no-interp"), (("constraints/ledger.jsonl", "garbage"),),
             rc=frozenset({2}), err=r"ledger\.jsonl:1", fresh=True, env=(("NSA_SEL_CONSTRAINTS", "{root}/constraints"),)),
        Case("fresh:releases --json on a directory", ("releases", *C, "--index-url", "{index}", "--json", "outside"),
             rc=frozenset({2}), fresh=True),
        Case("fresh:smoke --python not an interpreter", ("smoke", "--python", "outside/keep.txt", "--arch", "90"),
             (("outside/keep.txt", "exec", "#!/bin/sh\necho hi\n"),), rc=frozenset({2}), fresh=True),
        Case("debug:doctor on a corrupt ledger", ("--debug", "doctor", "--no-interp", *C),
             (("constraints/ledger.jsonl", "garbage"),), rc=frozenset({2}), debug=True),
        Case("debug:pin on a NaN ledger", ("pin", *C, "--check", "--debug"),
             (("constraints/ledger.jsonl", "jsonl", 1, ("metrics", "x"), NAN),), rc=frozenset({2}), debug=True),
        Case("debug:releases on a FIFO", ("--debug", "releases", *C, "--index-url", "{index}"),
             (("index/triton/json", "fifo"),), rc=frozenset({2}), debug=True),
    ]


def all_cases() -> list[Case]:
    cases = _damage_cases() + _argument_cases() + _fresh_and_debug_cases()
    names = [c.name for c in cases]
    dupes = {n for n in names if names.count(n) > 1}
    assert not dupes, f"duplicate case names: {sorted(dupes)}"
    return cases


def sample() -> list[Case]:
    """The cases the test suite runs (within its budget): every argument, entry-point and --debug case; every
    generic damage of every file for its first reader (doctor: for every reader); half of the file-specific
    damages, chosen by a hash of the name (stable across runs and machines)."""
    def keep(c: Case) -> bool:
        if not c.damages or not c.name.startswith(tuple(f"{a[0]}:{t}:" for t, rs in READERS.items() for a in rs)):
            return True
        if c.damages[0][1] in GENERIC:
            return c.command == "doctor" or not c.name.rpartition(":")[2].isdigit()
        return zlib.crc32(c.name.encode()) % 2 == 0
    return [c for c in all_cases() if keep(c)]


