"""The disk cache in tkir.compile: a second compile of the same source, constants and options reads the
backend's output (llvm, ptx, launch) from $TKIR_CACHE_DIR instead of running LLVM; TKIR_CACHE=0 turns it off;
--time-passes says "cached". Every read is verified (content hash, artifact types): an invalid entry warns,
is rebuilt and rewritten. `cache.info()` and `cache.clear()` are what `tkc cache info|clear` print."""

from __future__ import annotations

import json
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

import tkir
import tkir.backend.lower as backend
from tkir.backend.launch import LaunchDescription
from tkir.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GEMM = str(EXAMPLES / "gemm.tk")
SOFTMAX = str(Path(__file__).resolve().parents[2] / "tests" / "data" / "rows" / "softmax.tk")  # -D ROWS=32: a knob


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TKIR_CACHE", raising=False)
    return tmp_path / "cache"


def _no_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(module: object, options: object) -> dict:
        raise AssertionError("the backend ran although the cache holds this kernel")

    monkeypatch.setattr(backend, "compile_module", fail)


# gemm.tk's schedule consts are auto, and choosing them lowers the chosen point once (its ptxas check), which fills
# the cache before the compile's own lower(): the counts below are for a kernel whose consts are all given
GEMM_CONSTS = dict(BM=128, BN=256, STAGES=4, SK=0, SKI=16)


def test_second_compile_skips_the_backend(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = tkir.compile(GEMM, **GEMM_CONSTS)
    first.lower()
    assert first.cached is False
    assert len(list(cache_dir.glob("*.json"))) == 1
    assert first.timings[-1][0] == "backend (llvm, ptx)"

    _no_backend(monkeypatch)
    second = tkir.compile(GEMM, **GEMM_CONSTS)
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
    from tkir.backend import cache

    with pytest.warns(cache.CacheWarning, match="not JSON"):
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
    argv = ["compile", GEMM, "--emit", "ptx", "-o", str(out), "--time-passes",
            *(f"-D{k}={v}" for k, v in GEMM_CONSTS.items())]  # all given: no auto choice lowers it first
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "backend (llvm, ptx)" in err and "cached" not in err
    first = out.read_text()

    _no_backend(monkeypatch)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "backend (cached)" in err and "backend (llvm, ptx)" not in err
    assert out.read_text() == first


# --- verified entries: a content hash and a type check on every read ---------------------------------

def _entry(cache_dir: Path) -> Path:
    (entry,) = cache_dir.glob("*.json")
    return entry


def _rewrite(entry: Path, change: Callable[[dict], None], rehash: bool = True) -> None:
    """Change an entry's artifacts; with `rehash`, store the matching content hash, so only the type
    check can catch the change."""
    from tkir.backend import cache

    data = json.loads(entry.read_text(encoding="utf-8"))
    change(data["artifacts"])
    if rehash:
        data["sha256"] = cache.content_hash(data["artifacts"])
    entry.write_text(json.dumps(data), encoding="utf-8")


def _set(name: str, value: object) -> Callable[[dict], None]:
    return lambda artifacts: artifacts.__setitem__(name, value)


BAD_ENTRIES = {
    "ptx not a str": (_set("ptx", 5), True, "'ptx' has type int, expected str"),
    "launch not a dict": (_set("launch", ["gemm"]), True, "'launch' has type list, expected dict"),
    "launch without a grid": (lambda a: a["launch"].pop("grid"), True, "'launch' has no grid list"),
    "launch that does not read": (lambda a: a["launch"].update(block=[4096, 1, 1]), True,
                                  "'launch' does not read: launch description of 'softmax': block [4096, 1, 1] is not "
                                  "1..1024 threads"),
    "llvm missing": (lambda a: a.pop("llvm"), True, "no llvm artifact"),
    "edited ptx": (_set("ptx", "// tampered\n"), False, "content hash mismatch"),
}


@pytest.mark.parametrize("case", list(BAD_ENTRIES))
def test_invalid_entry_warns_and_is_rebuilt(case: str, cache_dir: Path) -> None:
    """A parseable entry with a value of the wrong type, a missing stage or a changed value is treated
    as missing: a CacheWarning names the file and the reason, the backend runs again, and the entry is
    rewritten whole (the next compile reads it)."""
    from tkir.backend import cache

    change, rehash, reason = BAD_ENTRIES[case]
    first = tkir.compile(SOFTMAX)
    first.lower()
    entry = _entry(cache_dir)
    _rewrite(entry, change, rehash)

    with pytest.warns(cache.CacheWarning, match=re.escape(reason)) as record:
        k = tkir.compile(SOFTMAX)
        k.lower()
    assert str(entry) in str(record[0].message)
    assert k.cached is False
    assert isinstance(k.asm["ptx"], str) and isinstance(k.asm["launch"], LaunchDescription)
    assert k.asm["ptx"] == first.asm["ptx"] and k.asm["launch"] == first.asm["launch"]

    again = tkir.compile(SOFTMAX)
    again.lower()
    assert again.cached is True and again.asm["ptx"] == first.asm["ptx"]


@pytest.mark.parametrize("damage", ["truncated", "empty", "old format"])
def test_truncated_or_stale_entry_warns_and_is_rebuilt(damage: str, cache_dir: Path) -> None:
    from tkir.backend import cache

    tkir.compile(SOFTMAX).lower()
    entry = _entry(cache_dir)
    text = entry.read_text(encoding="utf-8")
    if damage == "truncated":
        entry.write_text(text[: len(text) // 2], encoding="utf-8")
    elif damage == "empty":
        entry.write_text("", encoding="utf-8")
    else:
        data = json.loads(text)
        data["format"] = 1
        entry.write_text(json.dumps(data), encoding="utf-8")
    with pytest.warns(cache.CacheWarning, match="rebuilding"):
        k = tkir.compile(SOFTMAX)
        k.lower()
    assert k.cached is False
    assert json.loads(entry.read_text(encoding="utf-8"))["format"] == cache.FORMAT


def test_entry_carries_its_content_hash(cache_dir: Path) -> None:
    from tkir.backend import cache

    tkir.compile(SOFTMAX).lower()
    data = json.loads(_entry(cache_dir).read_text(encoding="utf-8"))
    assert data["format"] == cache.FORMAT == 2
    assert data["sha256"] == cache.content_hash(data["artifacts"])
    assert set(data["artifacts"]) == {"llvm", "ptx", "launch"}


def test_put_refuses_an_artifact_of_the_wrong_type(cache_dir: Path) -> None:
    from tkir.backend import cache

    key = "ab" * 32
    with pytest.raises(TypeError, match="'ptx' has type int, expected str"):
        cache.put(key, {"ptx": 5})
    with pytest.raises(TypeError, match="'launch' has type str, expected dict"):
        cache.put(key, {"launch": "{}"})
    assert not cache_dir.exists() or not list(cache_dir.iterdir())
    cache.put(key, {"cubin": bytearray(b"\x7fELF"), "note": 5})  # unknown names are not checked
    assert cache.get(key) == {"cubin": b"\x7fELF", "note": 5}


def test_a_missing_entry_is_silent(cache_dir: Path) -> None:
    from tkir.backend import cache

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.get("cd" * 32) is None


# --- tkc cache info / clear ------------------------------------------------------------------------

def test_info_counts_entries_and_bytes(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tkir.backend import cache

    empty = cache.info()
    assert (empty.directory, empty.enabled, empty.format, empty.entries, empty.bytes) == (cache_dir, True, 2, 0, 0)
    tkir.compile(SOFTMAX).lower()
    tkir.compile(SOFTMAX, ROWS=32).lower()
    cache_dir.joinpath("notes.txt").write_text("not an entry")
    info = cache.info()
    entries = sorted(cache_dir.glob("*.json"))
    assert info.entries == 2 and info.bytes == sum(p.stat().st_size for p in entries)
    monkeypatch.setenv("TKIR_CACHE", "0")
    assert cache.info().enabled is False and cache.info().entries == 2


def test_clear_removes_entries_only(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tkir.backend import cache

    tkir.compile(SOFTMAX).lower()
    tkir.compile(SOFTMAX, ROWS=32).lower()
    (cache_dir / "notes.txt").write_text("not an entry")
    (cache_dir / ".0123456789abcdef.x1.tmp").write_text("a crashed writer's temporary file")
    monkeypatch.setenv("TKIR_CACHE", "0")  # clearing works with the cache off
    assert cache.clear() == 2
    assert sorted(p.name for p in cache_dir.iterdir()) == ["notes.txt"]
    assert cache.clear() == 0
    monkeypatch.delenv("TKIR_CACHE")
    k = tkir.compile(SOFTMAX)
    k.lower()
    assert k.cached is False


def test_clear_without_a_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tkir.backend import cache

    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path / "never-made"))
    assert cache.clear() == 0 and cache.info().entries == 0


def test_choosing_auto_consts_and_compiling_share_one_entry(cache_dir: Path) -> None:
    """The ptxas check of the chosen point and the compile after it read and write the same cache entry: the auto
    attrs the IR records are not part of the key."""
    k = tkir.compile(GEMM)  # auto: the choice lowers the point once
    assert len(list(cache_dir.glob("*.json"))) == 1
    k.lower()
    assert k.cached is True and len(list(cache_dir.glob("*.json"))) == 1
