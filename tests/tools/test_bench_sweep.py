"""scripts/bench/sweep.py (the benchmark sweep) without a GPU: the point list, the bars, resume, the
budget cut-off, the supervisor's handling of a dead worker and a hung point, the report writer on a
synthetic sweep.jsonl, the chunked correctness check and the tune-cache pack. The GPU work
(`measure`) is replaced by fakes; torch is never imported."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from limits import HANG_S  # tests/ is on sys.path under pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench" / "sweep.py"


def _load() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("sweep", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sweep"] = mod
    spec.loader.exec_module(mod)
    return mod


sw = _load()


def _ok_record(p, ratio: float = 1.0, pct: float = 90.0, seconds: float | None = None) -> dict:
    rec = {"id": p.id, "part": p.part, "kernel": p.kernel, "sizes": p.sizes, "fixed": p.fixed, "status": "ok",
           "correct": True, "rel_err": 1e-3, "consts": {"BM": 64}, "finished_at": 1.0,
           "tune": {"key": None, "rho": 0.8, "survivors": 5, "points": 24, "best": {"BM": 64}}}
    if p.part == "gemm":
        rec.update(ratio=ratio, tflops=500.0, peer_tflops=500.0 / ratio, ms=1.0, peer_ms=ratio)
    else:
        rec.update(pct_copy=pct, ratio_eager=ratio, ratio_compiled=ratio, gbps=40 * pct, copy_gbps=4000.0,
                   x_bytes=2 * p.sizes["N"] * p.fixed["D"])
    rec["bars"] = sw.bars(p, rec)
    rec["pass"] = all(rec["bars"].values())
    return rec


def _args(tmp: Path, **kw: object) -> types.SimpleNamespace:
    return types.SimpleNamespace(cache_dir=str(tmp / "cache"), **kw)


def test_points_and_filters() -> None:
    pts = sw.all_points()
    assert len(pts) == 76 and len({p.id for p in pts}) == 76
    assert sum(p.part == "gemm" for p in pts) == 28 and sum(p.part == "rows" for p in pts) == 48
    assert pts[0].id == "gemm M=1 N=4096 K=4096"
    assert "softmax N=65536 D=16384" in {p.id for p in pts}
    assert len(sw.select(pts, "gemm")) == 28 and len(sw.select(pts, "rows")) == 48
    two = sw.select(pts, "gemm", m="1,16384", nk="128256x4096")
    assert [p.id for p in two] == ["gemm M=1 N=128256 K=4096", "gemm M=16384 N=128256 K=4096"]
    rows = sw.select(pts, "all", m="1", kernel="rmsnorm", rows="65536", d="768,16384")
    assert [p.id for p in rows if p.part == "rows"] == ["rmsnorm N=65536 D=768", "rmsnorm N=65536 D=16384"]
    assert "torch" not in sys.modules


def test_bars() -> None:
    pts = {p.id: p for p in sw.all_points()}
    assert sw.bars(pts["gemm M=1 N=4096 K=4096"], {"ratio": 0.81, "correct": True}) == \
        {"correct": True, "x cuBLAS >= 0.8": True}
    assert not sw.bars(pts["gemm M=64 N=4096 K=4096"], {"ratio": 0.84, "correct": True})["x cuBLAS >= 0.85"]
    assert sw.bars(pts["gemm M=256 N=4096 K=4096"], {"ratio": 0.95, "correct": True})["x cuBLAS >= 0.95"]
    small = sw.bars(pts["softmax N=4096 D=4096"], {"pct_copy": 10, "ratio_eager": 1.2, "ratio_compiled": 1.0,
                                                  "correct": True})
    assert all(small.values()) and not any(k.startswith("copy") for k in small)  # 32 MiB: no copy bar
    big = sw.bars(pts["softmax N=4096 D=8192"], {"pct_copy": 84.9, "ratio_eager": 1.2, "ratio_compiled": 0.99,
                                                "correct": True})
    assert big == {"correct": True, "copy >= 85%": False, "x eager >= 1.0": True, "x compiled >= 1.0": False}


def test_memory_plan_of_the_largest_gemm_is_under_the_limit() -> None:
    big = sw.select(sw.all_points(), "gemm", m="16384", nk="128256x4096")[0]
    plan = sw.memory_plan(big)
    assert plan["bench_sets"] == 2 and plan["tune_sets"] == 3
    assert 20 < plan["peak_gb"] < sw.MEM_LIMIT_GB
    assert max(sw.memory_plan(p)["peak_gb"] for p in sw.all_points()) == plan["peak_gb"]


def test_resume_budget_and_errors(tmp_path: Path) -> None:
    pts = sw.select(sw.all_points(), "gemm", nk="4096x4096")  # 7 points
    sd = sw.SweepDir(tmp_path)
    now = [0.0]
    seen: list[str] = []

    def fake(p, ctx) -> dict:
        seen.append(p.id)
        now[0] += sw.prior_seconds(p)  # each point takes exactly its prior
        if p.sizes["M"] == 64:
            raise RuntimeError("does not compile")
        return _ok_record(p)

    budget = sw.Budget(deadline=3.5 * 8.0 + 0.01, clock=lambda: now[0])  # room for 3.5 small points
    ctx = sw.Context(_args(tmp_path), sd)
    lines: list[str] = []
    assert sw.run_points(pts, sd, ctx, fake, budget, log=lines.append) == 0
    assert seen == [p.id for p in pts[:3]]  # the 4th does not fit; none after it either
    recs = sd.records()
    assert recs["gemm M=64 N=4096 K=4096"]["status"] == "error"
    assert "does not compile" in recs["gemm M=64 N=4096 K=4096"]["error"]
    assert sum("not started" in ln for ln in lines) == 4
    assert sd.state()["inflight"] is None and sd.state()["attempts"] == {}
    # the next call resumes: done points are skipped, the error too unless --redo-errors
    seen.clear()
    assert sw.run_points(pts, sw.SweepDir(tmp_path), ctx, fake, sw.Budget(None)) == 0
    assert seen == [p.id for p in pts[3:]]
    seen.clear()
    sw.run_points(pts, sd, ctx, fake, sw.Budget(None), redo_errors=True, since=1e12)
    assert seen == ["gemm M=64 N=4096 K=4096"]
    assert len(sd.records()) == 7
    lines_in_file = (tmp_path / sw.JSONL).read_text().splitlines()
    assert len(lines_in_file) == 8  # the redone point's second record is appended; the last one counts


def test_budget_calibrates_on_finished_points() -> None:
    p = sw.all_points()[0]
    b = sw.Budget(deadline=100.0, clock=lambda: 0.0)
    b.calibrate([{"seconds": 20.0, "prior_s": 10.0}])
    assert b.estimate(p) == pytest.approx(2 * sw.prior_seconds(p))
    b.calibrate([{"seconds": 1000.0, "prior_s": 1.0}])
    assert b.factor == 4.0


def test_interrupted_twice_is_an_error_and_truncated_line_is_skipped(tmp_path: Path) -> None:
    sd = sw.SweepDir(tmp_path)
    p = sw.all_points()[0]
    sd.save_state({"attempts": {p.id: 2}, "inflight": {"id": p.id, "pid": 1, "started": 0}})
    (tmp_path / sw.JSONL).write_text('{"id": "gemm M=16 N=4096 K=4096", "stat')  # a killed writer's half line
    sw.run_points([p], sd, sw.Context(_args(tmp_path), sd), lambda p, c: pytest.fail("must not run"),
                  sw.Budget(None), log=lambda s: None)
    rec = sd.records()[p.id]
    assert rec["status"] == "error" and rec["stage"] == "interrupted"
    assert list(sd.records()) == [p.id]


def test_report_on_a_synthetic_sweep(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pts = {p.id: p for p in sw.all_points()}
    sd = sw.SweepDir(tmp_path)
    sd.append(_ok_record(pts["gemm M=1 N=4096 K=4096"], ratio=0.83))
    sd.append(_ok_record(pts["gemm M=256 N=128256 K=4096"], ratio=0.91))
    sd.append(sw.error_record(pts["gemm M=16 N=4096 K=4096"], "tune", "no point of the space survived (24 by compile)"))
    sd.append(_ok_record(pts["softmax N=65536 D=4096"], ratio=1.3, pct=91.0))
    sd.append(_ok_record(pts["rmsnorm N=4096 D=8192"], ratio=0.97, pct=80.0))
    sd.save_state({"copy": [{"gbps": 4231.0, "at": 0}], "env": {"gpu": "NVIDIA H200", "torch": "2.11"}})
    rc = sw.main(["--report-only", str(tmp_path)])
    assert rc == 1  # a point misses a bar
    out = capsys.readouterr().out
    assert "gemm M=1 N=4096 K=4096" in out and "[x cuBLAS >= 0.8: ok]" in out
    assert "[x cuBLAS >= 0.95: FAIL]" in out and "ERROR [tune] no point of the space survived" in out
    assert re.search(r"^gemm M=4096 N=4096 K=4096 +not run$", out, re.M)
    md = (tmp_path / sw.REPORT_MD).read_text()
    assert "| 1 | 0.830 | not run | not run | not run | 0.8 |" in md
    assert "| 16 | ERROR |" in md and "| 256 | not run | not run | not run | 0.910 ✗ | 0.95 |" in md
    assert "| 65536 | not run | 91% · 1.30× · 1.30× | not run | not run |" in md
    assert "80%✗ · 0.97×✗ · 0.97×✗" in md
    assert "4231 GB/s" in md and "## Errors" in md and "`gemm M=16 N=4096 K=4096` [tune]" in md
    assert "5 of 76 points recorded" in md
    import importlib.util

    plots = [tmp_path / sw.PLOT_GEMM, tmp_path / sw.PLOT_ROWS]
    if importlib.util.find_spec("matplotlib") is not None:  # the `bench` extra: the plots are drawn
        assert all(p.stat().st_size > 0 for p in plots)
    else:  # the test extra alone (CI): the tables are written, the plots left out
        assert not any(p.exists() for p in plots)


def test_chunked_rel_err_matches_the_whole_tensor_value() -> None:
    class T(np.ndarray):  # the few tensor methods the check uses, on numpy
        def double(self) -> T:
            return self.astype(np.float64).view(T)

        def numel(self) -> int:
            return self.size

    fake_torch = types.SimpleNamespace(isnan=np.isnan)
    rng = np.random.default_rng(0)
    ref = rng.standard_normal((37, 11)).astype(np.float32)
    out = (ref + 1e-3 * rng.standard_normal(ref.shape)).astype(np.float32)
    want = np.linalg.norm(out.astype(np.float64) - ref) / np.linalg.norm(ref.astype(np.float64))
    got = sw.chunked_rel_err(fake_torch, out.view(T), ref.view(T), chunk=50)
    assert got == pytest.approx(want, rel=1e-12)
    out[30, 3] = np.nan
    assert sw.chunked_rel_err(fake_torch, out.view(T), ref.view(T), chunk=50) == math.inf
    calls: list[int] = []
    timing = types.SimpleNamespace(rel_err=lambda torch, o, r: calls.append(1) or 0.5)
    sw.patch_rel_err(timing, chunk=10**6)
    sw.patch_rel_err(timing, chunk=10**6)  # idempotent
    assert timing.rel_err(fake_torch, ref.view(T), ref.view(T)) == 0.5 and calls == [1]  # small: the original


def test_tune_cache_pack_and_unpack(tmp_path: Path) -> None:
    sd = sw.SweepDir(tmp_path / "d")
    cache = tmp_path / "cache"
    cache.mkdir()
    key = "ab" * 32
    (cache / f"{key}.json").write_text('{"format": 2}')
    (cache / f"{'cd' * 32}.json").write_text("{}")  # a compile entry: not packed
    rec = _ok_record(sw.all_points()[0])
    rec["tune"]["key"] = key
    sd.append(rec)
    sw.pack_tune_cache(sd, str(cache))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert sw.unpack_tune_cache(sd, str(fresh)) == 1
    assert [f.name for f in fresh.iterdir()] == [f"{key}.json"]


def test_setup_cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKIR_CACHE", "0")
    sw.setup_cache_env(str(tmp_path / "c"))
    from tkir.backend import cache

    assert cache.enabled() and cache.cache_dir() == tmp_path / "c"


FAKE = '''
import os, sys, time
def measure(p, ctx):
    if p.sizes["M"] == 16:
        os._exit(7)            # a kernel that kills the process
    if p.sizes["M"] == 64:
        time.sleep(60)         # a hang
    return {"status": "ok", "ratio": 1.0, "correct": True, "bars": {"x": True}, "pass": True}
'''


def test_supervisor_records_a_dead_worker_and_a_hang(tmp_path: Path) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE)
    env = dict(os.environ, SWEEP_FAKE_MEASURE=str(fake), PYTHONPATH=str(ROOT))
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(SCRIPT), "--part", "gemm", "--nk", "4096x4096", "--m", "1,16,64,256",
                        "--out", str(out), "--point-timeout-s", "1.5"], env=env, capture_output=True, text=True,
                       timeout=HANG_S)
    assert r.returncode == 1, r.stdout + r.stderr
    recs = {json.loads(x)["id"]: json.loads(x) for x in (out / sw.JSONL).read_text().splitlines()}
    assert recs["gemm M=1 N=4096 K=4096"]["status"] == "ok" and recs["gemm M=256 N=4096 K=4096"]["status"] == "ok"
    assert recs["gemm M=16 N=4096 K=4096"]["stage"] == "crash" and "exit status 7" in recs["gemm M=16 N=4096 K=4096"]["error"]
    assert recs["gemm M=64 N=4096 K=4096"]["stage"] == "timeout"
    assert (out / sw.REPORT_MD).is_file() and json.loads((out / sw.STATE).read_text())["not_run"]["ids"] == []


def test_dry_run_calls_tune_dry_run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import tkir.tools.tune

    seen = []

    def fake_dry_run(path: str, sizes: dict, *, fixed: dict | None = None, jobs: int | None = None) -> object:
        seen.append((Path(path).name, sizes, fixed))
        c = tkir.tools.tune.Candidate({"ROWS": 1}, {"ROWS": 1}, predicted_ms=0.01)
        d = tkir.tools.tune.Candidate({"ROWS": 16}, {"ROWS": 16}, status="dropped", stage="compile", reason="registers")
        return tkir.tools.tune.TuneResult(path, sizes, sizes, None, [c, d], None)

    monkeypatch.setattr(tkir.tools.tune, "dry_run", fake_dry_run)
    assert sw.main(["--dry-run", "--part", "rows", "--kernel", "softmax", "--rows", "65536", "--d", "16384"]) == 0
    assert seen == [("softmax.tk", {"N": 65536}, {"D": 16384})]
    out = capsys.readouterr().out
    assert "softmax N=65536 D=16384: 2 points, 1 kept, dropped 1 by compile; model's first: ROWS=1" in out


def test_consts_from_reads_ok_records_of_a_directory_or_a_gzipped_file(tmp_path: Path) -> None:
    """--consts-from: point id -> recorded consts, from ok records only, out of a sweep directory (plain or
    gzipped sweep.jsonl) or the file itself; a truncated last line is skipped."""
    import gzip

    pts = sw.all_points()
    good = {**_ok_record(pts[0]), "consts": {"BM": 64, "BN": 128}}
    bad = sw.error_record(pts[1], "bench", "boom")
    text = json.dumps(good) + "\n" + json.dumps(bad) + "\n" + '{"id": "trunc'
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / sw.JSONL).write_text(text)
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    with gzip.open(zipped / (sw.JSONL + ".gz"), "wt") as f:
        f.write(text)
    want = {pts[0].id: {"BM": 64, "BN": 128}}
    assert sw.load_given_consts(plain) == want
    assert sw.load_given_consts(zipped) == want
    assert sw.load_given_consts(zipped / (sw.JSONL + ".gz")) == want
    ctx = sw.Context(types.SimpleNamespace(consts_from=None), sw.SweepDir(tmp_path / "d"))
    assert ctx.given_consts() == {}
    ctx = sw.Context(types.SimpleNamespace(consts_from=str(plain)), sw.SweepDir(tmp_path / "e"))
    assert ctx.given_consts() == want


def test_consts_from_the_committed_sweep_consts_cover_every_point() -> None:
    """The one-call sweep benches the consts of the last whole sweep (scripts/bench/sweep_consts.jsonl): every
    point has consts."""
    merged = ROOT / "scripts" / "bench" / "sweep_consts.jsonl"
    given = sw.load_given_consts(merged)
    assert sorted(given) == sorted(p.id for p in sw.all_points())
    assert sw.parse_args(["--consts-from", str(merged)]).consts_from == str(merged)
