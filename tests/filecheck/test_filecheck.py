"""Run every FileCheck test under tests/filecheck/passes/ and tests/filecheck/ (backend/ included): text in, text out.

A test file holds `// RUN: <command>` lines (`%s` is the file itself; `tkc` and `filecheck` are this
Python's `tkir.cli` and `filecheck` package; `not` inverts the exit status) and CHECK lines.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]  # tests/
FILES = sorted([*HERE.glob("filecheck/passes/*.tkir"), *HERE.glob("filecheck/passes/*.tk"), *HERE.glob("filecheck/*.tk*"),
                *HERE.glob("filecheck/backend/*.tkir")])
TOOLS = {"tkc": f"{shlex.quote(sys.executable)} -m tkir.cli",
         "filecheck": f"{shlex.quote(sys.executable)} -m filecheck"}


def run_lines(path: Path) -> list[str]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        s = line.strip()
        if s.startswith("// RUN:"):
            cmd = s[len("// RUN:"):].strip()
            if out and out[-1].endswith("\\"):
                out[-1] = out[-1][:-1] + " " + cmd
            else:
                out.append(cmd)
    return out


def expand(cmd: str, path: Path) -> str:
    stages = []
    for stage in cmd.split("|"):
        words = stage.strip().split()
        negate = words and words[0] == "not"
        if negate:
            words = words[1:]
        if words and words[0] in TOOLS:
            words[0] = TOOLS[words[0]]
        text = " ".join(words).replace("%s", shlex.quote(str(path)))
        stages.append(f"{{ ! {text}; }}" if negate else text)  # `! a | b` would negate the whole pipeline
    return " | ".join(stages)


@pytest.mark.parametrize("path", FILES, ids=[f.name for f in FILES])
def test_filecheck(path: Path) -> None:
    cmds = run_lines(path)
    assert cmds, f"{path} has no RUN line"
    for cmd in cmds:
        sh = expand(cmd, path)
        r = subprocess.run(["bash", "-o", "pipefail", "-c", sh], capture_output=True, text=True,
                           cwd=HERE.parent)
        assert r.returncode == 0, f"RUN: {cmd}\n$ {sh}\n--- stdout\n{r.stdout}\n--- stderr\n{r.stderr}"


def test_not_negates_only_its_own_stage(tmp_path: Path) -> None:
    """`not A | filecheck` passes only when A fails *and* the checks match (a bare `! A | B` in bash
    negates the whole pipeline, which let mismatched checks pass)."""
    f = tmp_path / "t.tkir"
    f.write_text("// CHECK: this text is not in the output\ntk.kernel @k {grid = [1]} {\n  ^()\n}\n")
    for cmd in ("not tkc opt %s | filecheck %s", "tkc opt %s | filecheck %s"):
        r = subprocess.run(["bash", "-o", "pipefail", "-c", expand(cmd, f)], capture_output=True, text=True)
        assert r.returncode != 0, cmd
