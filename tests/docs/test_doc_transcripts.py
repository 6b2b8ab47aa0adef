"""The shell transcripts in the docs are true: each `$ command` block is run and its output compared.

A fenced block whose first line starts with `$ ` is a transcript: `$ ` lines are commands (a line
ending in `\\` continues on the next), the lines up to the next command are the expected output
(stdout and stderr together). In expected output, a line `...` matches any number of lines and
`[...]` inside a line matches any text (timings, paths, hashes). A transcript preceded by the
comment `<!-- transcript: not run: REASON -->` is not run (a GPU, a C compiler and CUDA headers, or
a damaged cache entry), and its reason is printed in this module's summary test.

Commands run with bash in a fresh directory holding links to examples/, tests/ and docs/, with
`tkc` on PATH, a private disk cache, and the blocks of one file run in order in one directory (a
later block may read what an earlier one wrote, as a reader following the page would).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from limits import HANG_S  # tests/ is on sys.path under pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ["docs/cli.md", "docs/first-kernel.md", "docs/tuning.md", "README.md"]
NOT_RUN = re.compile(r"<!--\s*transcript:\s*not run:\s*(.+?)\s*-->")
TIMEOUT_S = HANG_S  # one command (a hang guard; the slowest takes about 20 s on a quiet machine)


@dataclass
class Step:
    command: str
    expected: list[str] = field(default_factory=list)


@dataclass
class Transcript:
    doc: str
    line: int
    steps: list[Step]
    not_run: str | None

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"


def transcripts(doc: str) -> list[Transcript]:
    """Every transcript block of one markdown file, in order."""
    lines = (ROOT / doc).read_text().splitlines()
    found: list[Transcript] = []
    i = 0
    while i < len(lines):
        if not lines[i].startswith("```"):
            i += 1
            continue
        start = i + 1
        end = start
        while end < len(lines) and not lines[end].startswith("```"):
            end += 1
        body = lines[start:end]
        if body and body[0].startswith("$ "):
            before = "\n".join(lines[max(0, i - 3):i])
            m = NOT_RUN.search(before)
            found.append(Transcript(doc, start + 1, _steps(body), m.group(1) if m else None))
        i = end + 1
    return found


def _steps(body: list[str]) -> list[Step]:
    steps: list[Step] = []
    i = 0
    while i < len(body):
        line = body[i]
        if line.startswith("$ "):
            cmd = line[2:]
            while cmd.endswith("\\") and i + 1 < len(body):
                i += 1
                cmd = cmd[:-1] + " " + body[i].strip()
            steps.append(Step(cmd))
        else:
            steps[-1].expected.append(line)
        i += 1
    return steps


def matches(expected: list[str], actual: list[str]) -> bool:
    """Does `actual` fit `expected` (`...` lines: any lines; `[...]`: any text within a line)?"""
    pats = [None if e.strip() == "..." else re.compile(
        ".*".join(re.escape(p) for p in e.rstrip().split("[...]")) + r"\Z") for e in expected]
    act = [a.rstrip() for a in actual]
    while act and not act[-1]:  # a trailing blank line is not shown in a block
        act.pop()

    def go(p: int, a: int, memo: dict) -> bool:
        if (p, a) in memo:
            return memo[(p, a)]
        if p == len(pats):
            ok = a == len(act)
        elif pats[p] is None:
            ok = go(p + 1, a, memo) or (a < len(act) and go(p, a + 1, memo))
        else:
            ok = a < len(act) and pats[p].match(act[a]) is not None and go(p + 1, a + 1, memo)
        memo[(p, a)] = ok
        return ok

    return go(0, 0, {})


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    d = tmp_path_factory.mktemp("transcripts")
    for name in ("examples", "tests", "docs"):
        (d / name).symlink_to(ROOT / name)
    bin_dir = d / ".bin"
    bin_dir.mkdir()
    tkc = bin_dir / "tkc"
    tkc.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" -m tkir.cli "$@"\n')
    tkc.chmod(0o755)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", TKIR_CACHE_DIR=str(d / ".cache"),
               COLUMNS="200", PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    env.pop("TKIR_CACHE", None)
    return d, env


ALL = [t for doc in DOCS for t in transcripts(doc)]


def test_the_docs_have_transcripts() -> None:
    """The parser finds the docs' blocks (a regex that stopped matching would make every test vanish)."""
    by_doc = {doc: [t for t in ALL if t.doc == doc] for doc in DOCS}
    assert len(by_doc["docs/cli.md"]) >= 10, [t.id for t in by_doc["docs/cli.md"]]
    assert len(by_doc["docs/first-kernel.md"]) >= 4
    not_run = [f"{t.id}: {t.not_run}" for t in ALL if t.not_run]
    print("transcripts not run:\n  " + "\n  ".join(not_run))
    assert len(not_run) < len(ALL) / 2


def test_matcher_is_strict() -> None:
    assert matches(["a", "...", "c"], ["a", "b", "b", "c"])
    assert matches(["x [...] z"], ["x 1.25 s z"])
    assert not matches(["a", "c"], ["a", "b", "c"])          # no silent extra lines
    assert not matches(["a", "b"], ["a"])                     # nor missing ones
    assert not matches(["x [...] z"], ["x 1 y"])


@pytest.mark.parametrize("t", [t for t in ALL if not t.not_run], ids=lambda t: t.id)
def test_transcript(t: Transcript, workdir: tuple[Path, dict[str, str]]) -> None:
    d, env = workdir
    # a compile cache of its own: what another transcript compiled first (in whatever order xdist runs
    # them) must not turn this one's "backend (llvm, ptx)" into "backend (cached)"
    env = dict(env, TKIR_CACHE_DIR=str(d / "caches" / re.sub(r"\W", "_", t.id) / ".cache"))
    for step in t.steps:
        proc = subprocess.run(["bash", "-o", "pipefail", "-c", f"{{ {step.command} ; }} 2>&1"], cwd=d, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT_S)
        actual = proc.stdout.splitlines()
        assert matches(step.expected, actual), (
            f"{t.id}: $ {step.command}\n--- expected ---\n" + "\n".join(step.expected)
            + "\n--- got ---\n" + "\n".join(actual))


def test_first_kernel_page_shows_the_file_it_runs() -> None:
    """docs/first-kernel.md prints bias_relu.tk in full; the transcripts compile the file itself."""
    page = (ROOT / "docs/first-kernel.md").read_text()
    shown = page.split("```tk\n", 1)[1].split("```", 1)[0]
    assert shown == (ROOT / "docs/first-kernel/bias_relu.tk").read_text()
