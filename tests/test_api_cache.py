"""The disk cache in tkir.compile: a second compile of the same source, constants and options reads the
backend's output (llvm, ptx, launch) from $TKIR_CACHE_DIR instead of running LLVM; TKIR_CACHE=0 turns it off;
--time-passes says "cached"."""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir
import tkir.backend.lower as backend
from tkir.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
GEMM = str(EXAMPLES / "gemm.tk")
SOFTMAX = str(EXAMPLES / "softmax.tk")


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TKIR_CACHE", raising=False)
    return tmp_path / "cache"


def _no_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(module: object, options: object) -> dict:
        raise AssertionError("the backend ran although the cache holds this kernel")

    monkeypatch.setattr(backend, "compile_module", fail)


def test_second_compile_skips_the_backend(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tkir.compile(GEMM)
    first.lower()
    assert first.cached is False
    assert len(list(cache_dir.glob("*.json"))) == 1
    assert first.timings[-1][0] == "backend (llvm, ptx)"

    _no_backend(monkeypatch)
    second = tkir.compile(GEMM)
    second.lower()
    assert second.cached is True and second.timings[-1][0] == "backend (cached)"
    for stage in ("llvm", "ptx", "launch"):
        assert second.asm[stage] == first.asm[stage]


def test_other_consts_or_options_miss(cache_dir: Path) -> None:
    tkir.compile(SOFTMAX).lower()
    other_const = tkir.compile(SOFTMAX, ROWS=32)
    other_const.lower()
    other_target = tkir.compile(SOFTMAX, target="sm_80")
    other_target.lower()
    assert other_const.cached is False and other_target.cached is False
    assert len(list(cache_dir.glob("*.json"))) == 3
    assert other_target.asm["ptx"] != tkir.compile(SOFTMAX).asm["ptx"]


def test_cache_off(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKIR_CACHE", "0")
    for _ in range(2):
        k = tkir.compile(SOFTMAX)
        k.lower()
        assert k.cached is False
    assert not cache_dir.exists() or not list(cache_dir.iterdir())


def test_corrupt_entry_is_rebuilt(cache_dir: Path) -> None:
    tkir.compile(SOFTMAX).lower()
    (entry,) = cache_dir.glob("*.json")
    entry.write_text("{not json", encoding="utf-8")
    k = tkir.compile(SOFTMAX)
    k.lower()
    assert k.cached is False and "ptx" in k.asm
    assert tkir.compile(SOFTMAX).asm["ptx"] == k.asm["ptx"]  # rewritten, and read back whole
    again = tkir.compile(SOFTMAX)
    again.lower()
    assert again.cached is True


def test_time_passes_says_cached(cache_dir: Path, capsys: pytest.CaptureFixture[str],
                                 monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    out = tmp_path / "gemm.ptx"
    argv = ["compile", GEMM, "--emit", "ptx", "-o", str(out), "--time-passes"]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "backend (llvm, ptx)" in err and "cached" not in err
    first = out.read_text()

    _no_backend(monkeypatch)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "backend (cached)" in err and "backend (llvm, ptx)" not in err
    assert out.read_text() == first
