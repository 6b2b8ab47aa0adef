"""`tkc tune` on the GPU (issue 15): gemm.tk at one size finishes in under two minutes and prints the
predicted-vs-measured table; a second call for the same size bucket times nothing (the cache);
`tkir.autotune` then launches the tuned point, and its result is right. Timing uses torch (as
`tkc bench` does): on a GPU machine without torch these fail, they do not skip."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from tkir.tools import tune

ROOT = Path(__file__).resolve().parents[2]
TUNE_LIMIT_S = 120  # issue 15: "finishes in under 2 minutes on the H200"


def _tkc(args: list[str], env: dict) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "tkir.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    return p, time.perf_counter() - t0


@pytest.mark.gpu
def test_tkc_tune_gemm_then_cached(tmp_path: Path) -> None:
    env = dict(os.environ, TKIR_CACHE="1", TKIR_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    args = ["tune", "examples/gemm.tk", "--size", "M=4096", "--size", "N=4096", "--size", "K=4096"]
    first, wall = _tkc([*args, "--json", str(tmp_path / "first.json")], env)
    print(first.stdout, f"\nwall {wall:.1f} s")
    assert first.returncode == 0, first.stderr[-3000:]
    assert wall < TUNE_LIMIT_S
    assert "Spearman rho" in first.stdout and "pred rank" in first.stdout and "best:" in first.stdout
    data = json.loads((tmp_path / "first.json").read_text())
    timed = [c for c in data["candidates"] if c["status"] == "timed"]
    assert len(timed) >= 4 and all(c["rel_err"] < 2e-2 and c["ms"] > 0 for c in timed)
    # the best: the fastest of the second round where points were timed again (the rounds are not
    # compared: a 4096^3 second round was measured ~11% slower), else of the first
    again = [c for c in timed if c["again_ms"] is not None]
    assert len(again) != 1
    if again:
        fastest = min(timed, key=lambda c: c["ms"])
        assert fastest in again and all(c["ms"] <= tune.REFINE_WITHIN * fastest["ms"] for c in again)
        assert data["best"] == min(again, key=lambda c: c["again_ms"])["consts"]
    else:
        assert data["best"] == min(timed, key=lambda c: c["ms"])["consts"]
    second, wall2 = _tkc(args, env)
    print(second.stdout, f"\nwall {wall2:.1f} s")
    assert second.returncode == 0 and "from the cache: nothing was timed" in second.stdout
    assert wall2 < wall


@pytest.mark.gpu
def test_autotune_launches_the_tuned_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKIR_CACHE", "1")
    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path / "cache"))
    import tkir
    from tkir.backend import cuda
    from tkir.tools import tune

    gemm = str(ROOT / "examples/gemm.tk")
    result = tune.tune(gemm, dict(M=1024, N=2048, K=512), fixed={"STAGES": 4}, reps=5)
    assert result.best is not None and not result.cached
    k = tkir.autotune(gemm, STAGES=4)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((1000, 512), np.float32).astype(ml_dtypes.bfloat16)   # same bucket as 1024
    b = rng.standard_normal((512, 2048), np.float32).astype(ml_dtypes.bfloat16)
    c = cuda.empty((1000, 2048), "bf16")
    k(cuda.to_device(a), cuda.to_device(b), c)
    assert k.last_consts == result.best
    ref = a.astype(np.float32) @ b.astype(np.float32)
    out = c.numpy().astype(np.float32)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < 1e-2


@pytest.mark.gpu
def test_the_gpu_workers_and_their_second_round_on_one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The multi-GPU path (_time_on_gpus: real `python -m tkir.tools.tune --worker` processes) run with one GPU:
    the worker times every kept point, then the points near the best are timed again together on GPU 0
    by a second worker (first_round=False), whose round picks the best, as tune() does on one GPU.
    Every timed point counts as near here: which points fall within 6% of the best depends on the
    timings (on a GPU shared by the suite's workers it can be one point, and then, rightly, no second round
    runs: the likely cause of this test's one unexplained failure under `-n 16`)."""
    monkeypatch.setattr(tune, "REFINE_WITHIN", float("inf"))
    gemm = str(ROOT / "examples/gemm.tk")
    sizes = dict(M=1024, N=1024, K=1024)
    cands = tune.plan(gemm, sizes, fixed={"BK": 64, "SK": 0})
    tune._time_on_gpus(gemm, sizes, cands, target="sm_90a", passes=None, reps=5, ngpus=1)
    timed = [c for c in cands if c.status == "timed"]
    assert len(timed) >= 2 and all(c.device == 0 and c.ms > 0 and c.rel_err < 2e-2 for c in timed)
    near = tune.refine_candidates(timed)
    assert len(near) == min(len(timed), tune.REFINE_TOP) and all(c.again_ms is not None and c.again_ms > 0 for c in near)
    assert all(c.again_ms is None for c in timed if c not in near)
    assert tune.best_candidate(timed) is min(near, key=lambda c: c.again_ms)
