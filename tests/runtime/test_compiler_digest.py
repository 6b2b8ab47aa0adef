"""The disk cache's compiler digest (tkir.api.compiler_digest) reads every source the backend's output
depends on, wherever the layout puts it: the IR core (tkir/, tkir/requires.py among it) and the
backend (backend/, with the launch description and the runtime); and what a cached tuning result
depends on: the tools (tkir/tools/: the tuner, its model and timing) and the interpreter."""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir.backend
from tkir import api

ROOT = Path(tkir.__file__).resolve().parent
BACKEND = Path(tkir.backend.__file__).resolve().parent


def test_digest_reads_every_source_of_tkir_and_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[Path] = []
    real = Path.read_bytes

    def spy(self: Path) -> bytes:
        read.append(self.resolve())
        return real(self)

    monkeypatch.setattr(Path, "read_bytes", spy)
    api.compiler_digest.__wrapped__()
    for f in ("requires.py", "ir.py", "types.py"):
        assert ROOT / f in read
    for f in ("launch.py", "cuda.py", "runtime.py", "lower.py", "lower_llvm.py"):
        assert BACKEND / f in read
    assert set(read) >= set(ROOT.glob("*.py")) | set(BACKEND.glob("*.py"))
    assert ROOT / "tools" / "tune.py" in read and ROOT / "tools" / "timing.py" in read
    assert set(read) >= set((ROOT / "tools").glob("*.py")) | set((ROOT / "interp").glob("*.py"))
