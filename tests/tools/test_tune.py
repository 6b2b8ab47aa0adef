"""Autotuning on CPU: the @tune space and its errors, the compiler's and the model's pruning with their
reasons, the cost model, the rank statistics, the tuning cache (with the GPU timer replaced by a
stand-in), `tkc tune --dry-run`, and TunedKernel's choice per size bucket."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from limits import HANG_S  # tests/ is on sys.path under pytest

import tkir
from tkir.api import build_module
from tkir.diagnostics import CompileError
from tkir.frontend import compile_source
from tkir.frontend.tune import read_space
from tkir.tools import tune
from tkir.tools.examples import load_companion
from tkir.tools.tune_model import predict, ranks, spearman

ROOT = Path(__file__).resolve().parents[2]
GEMM = str(ROOT / "examples/gemm.tk")
GEMM_CONSTS = load_companion(GEMM).DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
BIG = dict(M=4096, N=4096, K=4096)

KERNEL = """{ann}
kernel g<BM=64, BN=128, BK=64, STAGES=3>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N])
    grid(cdiv(M, BM), cdiv(N, BN))
{{
    shared a: st<bf16, BM, BK>
    shared b: st<bf16, BK, BN>
    reg acc: rt<f32, BM, BN> = 0
    @stages(STAGES)
    for k in 0 .. cdiv(K, BK) {{
        a = A[block.x, k]
        b = B[k, block.y]
        acc += a @ b
    }}
    C[block.x, block.y] = bf16(acc)
}}
"""


def _src(ann: str) -> str:
    return KERNEL.format(ann=ann)


def test_space_points_where_and_pins() -> None:
    s = read_space(_src("@tune(BM=[64, 128], BN=[128, 256], where=BM * BN <= 16384, where=BN > 128)"), "g.tk")
    pts = s.points()
    assert [(p.consts["BM"], p.consts["BN"]) for p in pts] == [(64, 128), (64, 256), (128, 128), (128, 256)]
    assert [p.dropped for p in pts] == ["where BN > 128 is false", None, "where BN > 128 is false",
                                        "where BM * BN <= 16384 is false"]
    assert all(p.consts["BK"] == 64 and p.consts["STAGES"] == 3 for p in pts)  # the header fills the rest
    pinned = s.points({"BM": 128, "STAGES": 4})
    assert [(p.consts["BM"], p.consts["BN"], p.consts["STAGES"]) for p in pinned] == [(128, 128, 4), (128, 256, 4)]
    assert s.where[0][0] == "BM * BN <= 16384"


@pytest.mark.parametrize("ann, msg", [
    ("@tune(BX=[64])", "'@tune' names 'BX', which is not a const of kernel 'g'"),
    ("@tune(BM=64)", "'@tune' needs a non-empty list of values for 'BM'"),
    ("@tune(BM=[])", "'@tune' needs a non-empty list of values for 'BM'"),
    ("@tune(BM=[64, 64])", "value 64 of 'BM' is listed twice"),
    ("@tune(BM=[64.5])", "'BM' is an integer const: its values must be integers, got 64.5"),
    ("@tune(BM=[64], BM=[128])", "'@tune' lists const 'BM' twice"),
    ("@tune(BM=[64], where=BM < M)", "'M' in a 'where' condition is not a const"),
    ("@tune(BM=[N])", "'N' in a value to try is not a const (write a number)"),
    ("@tune(64)", "'@tune' takes named arguments"),
    ("@tune(BM=[64], where=[1])", "'where' takes one condition"),
])
def test_bad_tune_annotations_are_located_errors(ann: str, msg: str) -> None:
    with pytest.raises(CompileError) as e:
        compile_source(_src(ann), "g.tk")  # every compile checks the annotation, not only tkc tune
    text = e.value.format()
    assert text.startswith("g.tk:1:") and msg in text, text


def test_lists_are_annotation_arguments_only() -> None:
    with pytest.raises(CompileError) as e:
        compile_source(_src("@tune(BM=[64])").replace("@stages(STAGES)", "@stages([2, 3])"), "g.tk")
    assert "expected a positive integer" in e.value.format()
    with pytest.raises(CompileError):
        compile_source(_src("").replace("let", "let").replace("acc += a @ b", "acc += [a] @ b"), "g.tk")


def test_tune_annotation_leaves_the_ir_alone() -> None:
    plain = tkir.compile(GEMM.replace("gemm.tk", "gemm.tk"))
    src = Path(GEMM).read_text()
    assert "@tune(" in src
    untuned = compile_source("\n".join(ln for ln in src.splitlines() if not ln.startswith("@tune")), GEMM,
                             GEMM_CONSTS)
    tuned = build_module(GEMM, GEMM_CONSTS)
    from tkir.printer import print_module

    assert print_module(untuned) == print_module(tuned)
    assert "tune" not in plain.ir


def test_dry_run_drops_with_reasons_and_keeps_the_default_point() -> None:
    r = tune.dry_run(GEMM, BIG, jobs=1, fixed={"BN": 256, "SK": 0, "SKI": 16})
    by = {c.label(): c for c in r.candidates}
    assert len(r.candidates) == 8
    big = by["BM=128 BN=256 STAGES=6 SK=0 SKI=16"]
    assert big.status == "dropped" and big.stage == "compile" and "shared memory" in big.reason
    assert "232448" in big.reason  # the limit it broke, by number
    default = by["BM=128 BN=256 STAGES=4 SK=0 SKI=16"]
    assert default.status == "kept" and default.predicted_ms > 0
    assert default.prediction["blocks"] == 512 and default.prediction["waves"] == 4
    # the model ranks the big tile first at 4096^3 (and says why the others are slower: more tiles)
    kept = sorted((c for c in r.candidates if c.status == "kept"), key=lambda c: c.predicted_ms)
    assert kept[0].consts["BM"] == 128 and kept[0].consts["BN"] == 256
    text = tune.format_result(r, dry_run=True)
    assert "4 dropped by compile" in text and "[compile] shared memory" in text


def test_requires_drop_names_the_size(tmp_path: Path) -> None:
    # grid M / BM floors: a size that is not a multiple of BM would lose rows, so the launch requires it
    src = _src("@tune(BM=[64, 128])").replace("grid(cdiv(M, BM), cdiv(N, BN))", "grid(M / BM, cdiv(N, BN))")
    f = tmp_path / "g.tk"
    f.write_text(src)
    r = tune.dry_run(str(f), dict(M=192, N=256, K=128), jobs=1)
    by = {c.label(): c for c in r.candidates}
    assert by["BM=64"].status == "kept"
    assert by["BM=128"].status == "dropped" and by["BM=128"].stage == "requires" and "M" in by["BM=128"].reason


def test_model_drop_says_blocks_and_waves(tmp_path: Path) -> None:
    f = tmp_path / "g.tk"
    f.write_text(_src("@tune(BM=[64, 128], BN=[128, 256])"))
    # M = 64: 128-row tiles do twice the work of 64-row ones for the same output
    r = tune.dry_run(str(f), dict(M=64, N=256, K=8192), jobs=1)
    preds = {c.label(): c.predicted_ms for c in r.candidates if c.predicted_ms}
    assert preds["BM=64 BN=128"] < preds["BM=128 BN=256"]
    monkey = [c for c in r.candidates if c.stage == "model"]
    for c in monkey:
        assert "blocks" in c.reason and "wave" in c.reason


def test_model_waves_and_work() -> None:
    m = build_module(GEMM, {**GEMM_CONSTS, "BM": 128, "BN": 256})
    one = predict(m, dict(M=128 * 132, N=256, K=1024), blocks_per_sm=1, stages=4)
    more = predict(m, dict(M=128 * 133, N=256, K=1024), blocks_per_sm=1, stages=4)
    assert (one.blocks, one.waves) == (132, 1) and (more.blocks, more.waves) == (133, 2)
    assert more.ms == pytest.approx(2 * one.ms)
    assert one.tensor_flops_per_block == 2 * 128 * 256 * 1024
    assert one.bytes_per_block == (128 * 64 + 64 * 256) * 2 * 16 + 128 * 256 * 2  # A and B per k step, C once
    unpipelined = predict(m, dict(M=128 * 132, N=256, K=1024), blocks_per_sm=1, stages=1)
    assert unpipelined.ms > one.ms  # copies no longer overlap the math


def test_model_lone_blocks_have_their_sm_and_no_kernel_beats_the_floor() -> None:
    """One block (a row kernel at N = 1) shares its SM with nobody, whatever blocks per SM the
    plan allows, and no prediction is under KERNEL_FLOOR_S; before, layernorm's 4-warp points at N = 1
    were put at 12x the 16-warp ones and dropped untimed, though they measured fastest."""
    from tkir.tools import tune_model

    m = build_module(GEMM, {**GEMM_CONSTS, "BM": 128, "BN": 256})
    lone = [predict(m, dict(M=128, N=256, K=65536), blocks_per_sm=b, stages=4) for b in (1, 2)]
    assert lone[0].blocks == 1 and lone[0].blocks_per_sm == lone[1].blocks_per_sm == 1
    assert lone[0].ms == pytest.approx(lone[1].ms)
    tiny = predict(m, dict(M=1, N=1, K=64), blocks_per_sm=1, stages=4)
    assert tiny.ms == pytest.approx(tune_model.KERNEL_FLOOR_S * 1e3)
    ln = str(ROOT / "tests" / "data" / "rows" / "layernorm.tk")
    r = tune.dry_run(ln, dict(N=1), fixed=dict(D=768, ROWS=1, OCC=0, HOIST=1), jobs=1)
    kept = {c.consts["WG"] for c in r.candidates if c.status == "kept"}
    assert kept == {1, 2, 4}, [(c.label(), c.reason) for c in r.candidates]


def test_model_sees_the_stream_k_split() -> None:
    """With the compiled kernel's stream_k attr the model follows the kernel's split: at M = 1 the 16
    tiles of 128 x 256 spread over 132 blocks (about 8x less per block, at 75% of the rate, plus the
    fix-up); at 4096^3 the last round (116 of 132 blocks) is too full to split: the same prediction."""
    m = build_module(GEMM, {**GEMM_CONSTS, "BM": 128, "BN": 256})
    attr = {"min_iters": 16, "max_tail_pct": 60}
    skinny = dict(M=1, N=4096, K=14336)
    plain, split = predict(m, skinny, 1, 4), predict(m, skinny, 1, 4, stream_k=attr)
    assert (plain.blocks, plain.split_blocks) == (16, 0)
    assert (split.blocks, split.split_blocks, split.split_tiles) == (132, 132, 16)
    assert split.ms < plain.ms / 3
    assert predict(m, BIG, 1, 4, stream_k=attr) == predict(m, BIG, 1, 4)
    # 8192 x 8192: 2048 tiles, 15 rounds + 68 (52% of 132): the tail is split over all 132 blocks
    tail = predict(m, dict(M=8192, N=8192, K=8192), 1, 4, stream_k=attr)
    assert (tail.split_tiles, tail.split_blocks, tail.waves) == (68, 132, 16)
    # short K: 16 tiles x 16 iterations / 16 = 16 blocks, no more than tiles: not split
    assert predict(m, dict(M=1, N=4096, K=1024), 1, 4, stream_k=attr).split_blocks == 0


def test_model_follows_the_kernels_own_min_iters() -> None:
    """@stream_k(1, min_iters=SKI) reaches the model through the compiled kernel's stream_k attr: at M = 64,
    N = K = 4096 with 64 x 64 tiles (64 tiles of 64 iterations) SKI = 16 splits them over all 132 blocks,
    SKI = 32 over 128 (each tile in two halves, the faster split measured)."""
    sizes = dict(M=64, N=4096, K=4096)
    got = {}
    for ski in (16, 32):
        k = tkir.compile(GEMM, **{**GEMM_CONSTS, "BM": 64, "BN": 64, "SK": 1, "SKI": ski})
        got[ski] = predict(build_module(GEMM, {**GEMM_CONSTS, "BM": 64, "BN": 64}), sizes, 1, 8,
                           stream_k=k.module.kernel.attrs["stream_k"])
    assert (got[16].blocks, got[16].split_blocks, got[16].split_tiles) == (132, 132, 64)
    assert (got[32].blocks, got[32].split_blocks, got[32].split_tiles) == (128, 128, 64)


def test_rank_statistics() -> None:
    assert ranks([3.0, 1.0, 2.0, 1.0]) == [4.0, 1.5, 3.0, 1.5]
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
    assert spearman([1.0], [2.0]) is None and spearman([1, 1], [1, 2]) is None


def test_size_bucket() -> None:
    assert tune.size_bucket(dict(M=1, N=1000, K=4096, L=4097)) == dict(M=1, N=1024, K=4096, L=8192)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The GPU's name and count, and a stand-in timer (the model's prediction, perturbed) instead of CUDA."""
    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TKIR_CACHE", "1")
    monkeypatch.setattr(tune, "gpu_name", lambda: "Fake H200")
    monkeypatch.setattr(tune, "gpu_count", lambda: 1)
    calls = []

    def fake_time(path, sizes, cands, *, target, passes, reps, device_index=None):
        calls.append(len(cands))
        for i, c in enumerate(x for x in cands if x.status == "kept"):
            c.ms, c.status, c.rel_err, c.device = c.predicted_ms * (1 + 0.01 * (i % 3)), "timed", 1e-3, 0

    monkeypatch.setattr(tune, "time_points", fake_time)
    return calls


def test_tune_caches_the_best_and_a_second_call_times_nothing(fake_gpu) -> None:
    first = tune.tune(GEMM, BIG, jobs=1, fixed={"STAGES": 4, "SK": 0, "SKI": 16})
    assert fake_gpu == [len(first.candidates)] and not first.cached
    assert first.best == {"BM": 128, "BN": 256, "BK": 64, "STAGES": 4, "SK": 0, "SKI": 16}
    second = tune.tune(GEMM, dict(M=3000, N=4096, K=4096), jobs=1, fixed={"STAGES": 4, "SK": 0, "SKI": 16})  # same bucket
    assert second.cached and fake_gpu == [len(first.candidates)]  # no timing the second time
    assert second.best == first.best
    text = tune.format_result(second)
    assert "from the cache: nothing was timed" in text and "Spearman rho" in text
    other = tune.tune(GEMM, dict(M=512, N=4096, K=4096), jobs=1, fixed={"STAGES": 4, "SK": 0, "SKI": 16})  # another bucket
    assert not other.cached and len(fake_gpu) == 2
    assert tune.lookup(GEMM, dict(M=4000, N=4096, K=4096), fixed={"STAGES": 4, "SK": 0, "SKI": 16}) == first.best
    assert tune.lookup(GEMM, dict(M=4000, N=4096, K=4096), fixed={"STAGES": 3}) is None  # other pins: other key


class _Cai:
    """A stand-in device array (CUDA Array Interface) for launch-time shape checks without a GPU."""

    def __init__(self, shape: tuple[int, ...]):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<V2", "data": (1 << 20, False),
                                         "version": 3, "strides": None, "descr": [("", "<V2")]}


def test_tuned_kernel_picks_per_bucket(fake_gpu) -> None:
    tune.tune(GEMM, BIG, jobs=1, fixed={"STAGES": 4})
    k = tkir.autotune(GEMM, STAGES=4)
    assert k.config_for(dict(M=4000, N=4096, K=4096))["BN"] == 256  # cached bucket: the tuned point
    assert k.config_for(dict(M=100, N=100, K=100)) == {"STAGES": 4}   # a miss: the kernel's defaults
    assert len(fake_gpu) == 1  # looking up never times


def test_autotune_refuses_a_kernel_without_space(tmp_path: Path) -> None:
    f = tmp_path / "g.tk"
    f.write_text(_src(""))
    with pytest.raises(CompileError, match="no @tune"):
        tkir.autotune(str(f))


def test_cli_dry_run(tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "tkir.cli", "tune", GEMM, "--size", "M=4096", "--size", "N=4096",
                           "--size", "K=4096", "--dry-run", "--jobs", "2", "-D", "BM=128", "-D", "SK=0", "-D", "SKI=16", "--json", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert "12 points: 1 dropped by model, 3 dropped by compile, 8 kept (not timed: --dry-run)" in proc.stdout
    data = json.loads(out.read_text())
    assert len(data["candidates"]) == 12 and data["best"] is None
    bad = subprocess.run([sys.executable, "-m", "tkir.cli", "tune", GEMM, "--size", "M=64", "--dry-run"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S)
    assert bad.returncode == 1 and "missing --size for" in bad.stderr and "Traceback" not in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "tkir.cli", "tune", GEMM, "--size", "M=64", "--size", "N=64",
                          "--size", "K=64", "-D", "BX=1", "--dry-run"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=HANG_S)
    assert bad.returncode == 1 and "-D BX: not a const" in bad.stderr


def test_model_ranks_stages_by_bytes_in_flight() -> None:
    """Few stages of small tiles cannot keep the feed busy (Little's law): on call 4's skinny shape
    (M = 64) the measured time fell from 34.6 to 21.6 us going from 3 to 6 stages of 64 x 64 tiles."""
    sizes = dict(M=64, N=4096, K=4096)
    ms = {s: predict(build_module(GEMM, {**GEMM_CONSTS, "BM": 64, "BN": 64, "STAGES": s}), sizes, 1, s).ms for s in (3, 4, 6)}
    assert ms[3] > ms[4] > ms[6]
    big = {s: predict(build_module(GEMM, {**GEMM_CONSTS, "BM": 128, "BN": 256, "STAGES": s}), BIG, 1, s).ms for s in (3, 4)}
    assert big[3] == big[4]  # enough in flight either way: compute- or feed-bound, not latency-bound


def test_cli_tune_where_the_header_point_does_not_fit() -> None:
    """layernorm at D = 16384 in one read (DC = D): its header's 16 rows overflow the register file, so
    the size check must read the sizes off a point that compiles (call 5 on the H200 failed here). The
    header's DC = 1024 would walk the row in chunks, which fits. OCC (@blocks_per_sm) is pinned to 0:
    the point here is the size check, not ptxas's spills at 4 blocks per SM (tests/frontend/test_blocks_per_sm.py);
    HOIST, FENCE and REREAD too (the hoisted, fenced and re-reading points are the same size check)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "tkir.cli", "tune", "tests/data/rows/layernorm.tk", "-D", "D=16384",
                           "-D", "DC=16384", "-D", "OCC=0", "-D", "HOIST=0", "-D", "FENCE=0", "-D", "REREAD=0",
                           "--size", "N=4096", "--dry-run", "--jobs", "2"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "15 points: 13 dropped by compile, 2 kept" in proc.stdout


FAKE_WORKER = r"""
import json, os, sys
spec = json.loads(open(sys.argv[-1]).read())
gpu = int(os.environ["CUDA_VISIBLE_DEVICES"])
assert spec["device"] == gpu, (spec["device"], gpu)
if spec.get("refine_only"):   # the second round: every point given was timed by a worker; all on GPU 0
    assert gpu == 0 and all(c["status"] == "timed" for c in spec["candidates"])
    out = [dict(c, again_ms=5.0 - 0.1 * i) for i, c in enumerate(spec["candidates"])]
else:
    out = [dict(c, ms=1.0 + gpu + 0.01 * i, status="timed", rel_err=1e-3, device=gpu)
           for i, c in enumerate(spec["candidates"])]
print(json.dumps(out))
"""


def test_points_are_split_over_the_gpus_and_merged_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two GPUs: one worker per GPU, all started before any is waited for, each seeing only its GPU
    (CUDA_VISIBLE_DEVICES) and its share of the points; results land on the right candidates. (The
    real worker is `python -m tkir.tools.tune --worker SPEC`; the first two-GPU run failed in this
    plumbing with "I/O operation on closed file".)"""
    monkeypatch.setattr(tune, "WORKER_CMD", [sys.executable, "-c", FAKE_WORKER])
    cands = [tune.Candidate({"BM": m}, {"BM": m}) for m in (64, 128, 192, 256, 320)]
    cands[2].status = "dropped"
    tune._time_on_gpus(GEMM, BIG, cands, target="sm_90a", passes=None, reps=3, ngpus=2)
    assert [(c.consts["BM"], c.status, c.device) for c in cands] == [
        (64, "timed", 0), (128, "timed", 1), (192, "dropped", None), (256, "timed", 0), (320, "timed", 1)]
    assert [c.ms for c in cands if c.status == "timed"] == [1.0, 2.0, 1.01, 2.01]
    # the second round: the points within REFINE_WITHIN of the best first round (BM = 64 and 256, from GPU 0's
    # share; GPU 1's are 2x slower) timed again together on GPU 0, and that round picks
    assert [c.again_ms for c in cands] == [5.0, None, None, 4.9, None]
    assert tune.best_candidate([c for c in cands if c.status == "timed"]).consts == {"BM": 256}


def test_a_failing_worker_names_its_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tune, "WORKER_CMD", [sys.executable, "-c", "import sys; sys.exit('no CUDA here')"])
    cands = [tune.Candidate({"BM": m}, {"BM": m}) for m in (64, 128)]
    with pytest.raises(tkir.diagnostics.TkirError, match="tune worker on GPU 0 failed: no CUDA here"):
        tune._time_on_gpus(GEMM, BIG, cands, target="sm_90a", passes=None, reps=3, ngpus=2)


def test_points_with_the_same_code_are_timed_once(tmp_path: Path) -> None:
    """A const the kernel never reads (U) doubles the space but not the kernels: of each pair the second
    is dropped as "same", naming the first; the kept points all differ in code."""
    f = tmp_path / "g.tk"
    f.write_text(_src("@tune(BM=[64, 128], U=[0, 1])").replace("STAGES=3>", "STAGES=3, U=0>"))
    r = tune.dry_run(str(f), BIG, jobs=1)
    by = {c.label(): c for c in r.candidates}
    assert by["BM=64 U=0"].status == by["BM=128 U=0"].status == "kept"
    assert by["BM=64 U=0"].code != by["BM=128 U=0"].code
    for bm in (64, 128):
        c = by[f"BM={bm} U=1"]
        assert c.status == "dropped" and c.stage == "same" and f"BM={bm} U=0" in c.reason


class _FakeTensor:
    def __init__(self) -> None:
        self.device = type("D", (), {"type": "cuda"})()

    def fill_(self, _v: float) -> _FakeTensor:
        return self


def test_the_points_nearest_the_best_are_timed_again_and_decide(monkeypatch: pytest.MonkeyPatch) -> None:
    """time_points: a first round over every point, then the points within REFINE_WITHIN of its best
    (here A = 0, 1, 2; A = 3 is 10% off) timed again in a group of their own with REFINE_REPS_FACTOR x
    the reps; the second round decides (A = 1), and the table says so. CPU only: torch, the compiler and
    the timer are fakes that record what they are asked."""
    import types

    from tkir import api
    from tkir.tools import timing

    ran: list[int] = []
    first = {0: 1.00, 1: 1.01, 2: 1.02, 3: 1.10}
    second = {0: 1.15, 1: 1.12, 2: 1.13}   # the clocks drifted: every point slower than A = 3's first round
    groups: list[tuple[list[int], int]] = []

    def fake_time(_torch, fns, _nsets, reps, _warmup, rotate=True):
        ids = []
        for f in fns:
            f(0)()
            ids.append(ran[-1])
        groups.append((ids, reps))
        table = first if len(groups) == 1 else second
        return [table[i] for i in ids]

    class Kernel:
        def __init__(self, a: int) -> None:
            self.a = a

        def __call__(self, *_args) -> None:
            ran.append(self.a)

    comp = types.SimpleNamespace(PARAMS=["X", "Y"], TOLERANCE=1e-2,
                                 torch_inputs=lambda sizes, consts: [_FakeTensor(), _FakeTensor()],
                                 torch_reference=lambda sets, sizes, consts: {"Y": _FakeTensor()})
    fake_torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: None))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setattr(timing, "time_pair_ms", fake_time)
    monkeypatch.setattr(timing, "rel_err", lambda _t, _o, _r: 1e-3)
    monkeypatch.setattr(api, "compile", lambda path, target, passes, **consts: Kernel(consts["A"]))
    cands = [tune.Candidate({"A": a}, {"A": a}) for a in range(4)]
    tune.time_points("k.tk", {"N": 1}, cands, target="sm_90a", passes=None, reps=20, companion=comp)
    assert groups[0] == ([0, 1, 2, 3], 20)
    assert groups[1] == ([0, 1, 2], tune.REFINE_REPS_FACTOR * 20)
    assert [c.ms for c in cands] == [1.00, 1.01, 1.02, 1.10]      # the first round's, for the table's ranks
    assert [c.again_ms for c in cands] == [1.15, 1.12, 1.13, None]
    assert tune.best_candidate(cands).consts == {"A": 1}
    r = tune.TuneResult("k.tk", {"N": 1}, {"N": 1}, {"A": 1}, cands, None)
    for c in cands:
        c.predicted_ms = 1.0
    assert "timed again" in tune.format_result(r) and "A=1 1.0100 -> 1.1200" in tune.format_result(r)
    assert "best: A=1 (1.0100 ms; 1.1200 ms when timed again)" in tune.format_result(r)
    # the table ranks by the first round: A = 0 first, A = 3 last (not above the drifted second round)
    rows = [ln.split()[0] for ln in tune.format_result(r).splitlines() if ln.startswith("A=")]
    assert rows == ["A=0", "A=1", "A=2", "A=3"]
    # a worker of the multi-GPU path sees only its share: it does not refine
    groups.clear()
    cands = [tune.Candidate({"A": a}, {"A": a}) for a in range(4)]
    tune.time_points("k.tk", {"N": 1}, cands, target="sm_90a", passes=None, reps=20, companion=comp, refine=False)
    assert len(groups) == 1 and all(c.again_ms is None for c in cands)


def test_same_code_but_another_launch_is_not_a_duplicate(tmp_path: Path) -> None:
    """G only scales the grid of a row copy: the PTX of G = 2 and 3 is the same, their launches are not, so
    both are timed (the `same` digest covers the launch description too). (Not G = 1: a grid factor of 1 is
    folded away, the grid is then exactly N rows and the row bound's predicate goes, so that PTX differs.)"""
    f = tmp_path / "c.tk"
    f.write_text("@tune(G=[2, 3])\n"
                 "kernel copyrows<ROWS=1, D=768, G=2>(X: gl<bf16>[N, D], Y: gl<bf16>[N, D]) grid(cdiv(N, ROWS) * G)\n"
                 "{\n    reg x: rt<bf16, ROWS, D> = X[block.x, 0]\n    Y[block.x, 0] = x\n}\n")
    assert tkir.compile(str(f), G=2).asm["ptx"] == tkir.compile(str(f), G=3).asm["ptx"]
    r = tune.dry_run(str(f), dict(N=4096), jobs=1)
    by = {c.label(): c for c in r.candidates}
    assert by["G=2"].status == by["G=3"].status == "kept", [(c.label(), c.stage, c.reason) for c in r.candidates]
    assert by["G=2"].code != by["G=3"].code
