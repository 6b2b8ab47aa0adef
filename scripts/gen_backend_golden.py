"""Write (or `--check`) the tile IR of the backend golden tests, tests/filecheck/backend/*.tkir.

A backend golden is a FileCheck test that starts from tile IR text, as LLVM's CodeGen tests start
from .ll files: its RUN lines run the backend alone (`tkc compile %s --passes=verify --emit ptx`), so
a pass change never shows up as a backend diff. The file has two parts:

    // RUN: tkc compile %s --passes=verify --emit llvm --target sm_80 | filecheck %s
    // golden-from: tkc compile tests/filecheck/backend/src/sm80.tk --target sm_80 --emit tkir
    // (comments and CHECK lines, written by hand)
    // ---- tile IR below: written by scripts/gen_backend_golden.py from the golden-from command ----
    tk.kernel @f16t {...} {
      ...

Everything above the marker line is kept as written; everything below it is the output of the
`golden-from` command (the .tk source, its -D consts, --target and --passes: the tile IR after the
passes, which is what the backend reads). This script rewrites that part; with `--check` it rewrites
nothing and lists the goldens whose IR differs from what the passes produce today (exit status 1), so a
pass change shows as a stale golden that is regenerated on purpose and reviewed as an IR diff.

    python3 scripts/gen_backend_golden.py                  # regenerate every golden
    python3 scripts/gen_backend_golden.py FILE.tkir ...    # these (a new one: header only, no marker)
    python3 scripts/gen_backend_golden.py --check          # stale or malformed goldens, exit 1

Both modes also check each header: one `golden-from` line naming an existing .tk file and ending in
`--emit tkir`; every `tkc compile %s` RUN line runs only the verifier (`--passes=verify`) on the same
--target as the golden-from command (the IR does not record its target); no comment below the marker
(regenerating would drop it).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import io
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = ROOT / "tests" / "filecheck" / "backend"
FROM = "// golden-from:"
MARKER = "// ---- tile IR below: written by scripts/gen_backend_golden.py from the golden-from command ----"
DEFAULT_TARGET = "sm_90a"  # tkc compile's default --target (tkir/cli.py)
DIFF_LINES = 40  # lines of a stale golden's IR diff that --check prints


@dataclass
class Golden:
    path: Path
    header: str  # every line above the marker, as written (ends with a newline)
    ir: str | None  # the text below the marker; None where the file has no marker yet
    command: list[str]  # the golden-from command's words, `tkc compile` included (empty if missing)


def parse(path: Path) -> Golden:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    at = next((i for i, ln in enumerate(lines) if ln.rstrip("\n") == MARKER), None)
    header = "".join(lines if at is None else lines[:at])
    ir = None if at is None else "".join(lines[at + 1:])
    words: list[str] = []
    for ln in header.splitlines():
        if ln.startswith(FROM):
            words = shlex.split(ln[len(FROM):])
    return Golden(path, header if header.endswith("\n") or not header else header + "\n", ir, words)


def _target(words: list[str]) -> str:
    for i, w in enumerate(words):
        if w == "--target" and i + 1 < len(words):
            return words[i + 1]
        if w.startswith("--target="):
            return w.split("=", 1)[1]
    return DEFAULT_TARGET


def _run_lines(header: str) -> list[str]:
    """The header's RUN commands, continuation lines (a trailing backslash) joined."""
    out: list[str] = []
    for ln in header.splitlines():
        s = ln.strip()
        if s.startswith("// RUN:"):
            cmd = s[len("// RUN:"):].strip()
            if out and out[-1].endswith("\\"):
                out[-1] = out[-1][:-1] + " " + cmd
            else:
                out.append(cmd)
    return out


def problems(g: Golden) -> list[str]:
    """What is wrong with a golden's header (empty: nothing)."""
    out = []
    froms = [ln for ln in g.header.splitlines() if ln.startswith(FROM)]
    if len(froms) != 1:
        return [f"{len(froms)} '{FROM}' lines (want one: the command that produces the IR)"]
    w = g.command
    if w[:2] != ["tkc", "compile"] or len(w) < 3 or w[-2:] != ["--emit", "tkir"]:
        out.append(f"'{FROM}' is not `tkc compile SOURCE.tk [flags] --emit tkir`: {' '.join(w)}")
    elif not w[2].endswith(".tk") or not (ROOT / w[2]).is_file():
        out.append(f"'{FROM}' names {w[2]}, which is not a .tk file of the repository (a path from its root)")
    backend_runs = 0
    for cmd in _run_lines(g.header):
        first = cmd.split("|")[0].split()
        if first[:3] != ["tkc", "compile", "%s"]:
            continue
        backend_runs += 1
        if "--passes=verify" not in first:
            out.append(f"RUN line runs passes (want --passes=verify, the backend alone): {cmd}")
        if _target(first) != _target(w):
            out.append(f"RUN line's target {_target(first)} differs from the IR's ({_target(w)}): {cmd}")
    if not backend_runs:
        out.append("no `tkc compile %s` RUN line")
    if g.ir is not None and any(ln.lstrip().startswith("//") for ln in g.ir.splitlines()):
        out.append("a comment below the marker (regenerating would drop it: move it above)")
    return out


def produce(command: list[str]) -> str:
    """The tile IR the golden-from command prints (run in this process: `tkc` is tkir.cli)."""
    from tkir import cli

    args = ["compile", str(ROOT / command[2]), *command[3:]]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = cli.main(args)
    if rc:
        raise RuntimeError(f"`{shlex.join(command)}` failed ({rc}):\n{err.getvalue()}")
    return out.getvalue()


def goldens(paths: list[str] | None = None) -> list[Path]:
    return [Path(p).resolve() for p in paths] if paths else sorted(GOLDEN_DIR.glob("*.tkir"))


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def check(paths: list[Path], out: io.TextIOBase) -> int:
    """Report malformed and stale goldens; 0 when every one is well formed and current."""
    bad = 0
    for p in paths:
        g = parse(p)
        errs = problems(g)
        if not errs:
            ir = produce(g.command)
            if g.ir is None:
                errs = ["no tile IR yet (no marker line)"]
            elif g.ir != ir:
                diff = list(difflib.unified_diff(g.ir.splitlines(), ir.splitlines(), "golden", "passes today",
                                                 lineterm="", n=1))
                more = f"\n  ... {len(diff) - DIFF_LINES} more diff lines" if len(diff) > DIFF_LINES else ""
                errs = ["stale: the passes produce other IR today; regenerate it with "
                        f"`python3 scripts/gen_backend_golden.py {_rel(p)}` and review the diff\n  "
                        + "\n  ".join(diff[:DIFF_LINES]) + more]
        for e in errs:
            print(f"{_rel(p)}: {e}", file=out)
        bad += bool(errs)
    print(f"{len(paths) - bad} of {len(paths)} backend goldens current", file=out)
    return 1 if bad else 0


def write(paths: list[Path], out: io.TextIOBase) -> int:
    """Rewrite each golden's IR from its golden-from command; 1 if a header is malformed."""
    rc = 0
    for p in paths:
        g = parse(p)
        errs = problems(g)
        if errs:
            for e in errs:
                print(f"{_rel(p)}: {e}", file=out)
            rc = 1
            continue
        ir = produce(g.command)
        new = g.header + MARKER + "\n" + ir
        if new != p.read_text(encoding="utf-8"):
            p.write_text(new, encoding="utf-8")
            print(f"{_rel(p)}: written", file=out)
    return rc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", help="goldens (default: every tests/filecheck/backend/*.tkir)")
    ap.add_argument("--check", action="store_true", help="write nothing; list stale or malformed goldens (exit 1)")
    args = ap.parse_args(argv)
    paths = goldens(args.files)
    if not paths:
        print(f"no goldens under {_rel(GOLDEN_DIR)}", file=sys.stderr)
        return 1
    return (check if args.check else write)(paths, sys.stdout)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
