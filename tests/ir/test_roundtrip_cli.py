"""`tkc opt` round-trips every example's IR byte for byte: after the front end and after every pass."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tkir
from tkir.parser import parse_module
from tkir.printer import print_module

EXAMPLES = sorted(Path("examples").glob("*.tk"))


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_tkc_opt_round_trips_example_ir(path: Path, tmp_path: Path) -> None:
    front = subprocess.run([sys.executable, "-m", "tkir.cli", "compile", str(path), "--passes=verify"],
                           capture_output=True, text=True, check=True).stdout
    f = tmp_path / "k.tkir"
    f.write_text(front)
    again = subprocess.run([sys.executable, "-m", "tkir.cli", "opt", str(f)], capture_output=True, text=True,
                           check=True).stdout
    assert again == front


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_ir_after_every_pass_round_trips(path: Path) -> None:
    k = tkir.compile(str(path))
    for name in k.pipeline:
        text = k.ir_after(name)
        assert print_module(parse_module(text)) == text, f"{path.stem} after {name}"
