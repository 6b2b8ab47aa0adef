"""`@stages(S)` is honoured or refused: a loop that asks for S >= 2 stages which neither pipeline nor
pipeline-cp-async ring-buffers is a located error at the loop (passes/pipeline_cp_async.py,
check_stages_honoured), on both targets; S = 1 asks for nothing a loop lacks."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.passes.pipeline_cp_async import StagesWarning
from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.printer import print_module

TARGETS = ("sm_90a", "sm_80")

# register loads only: nothing to ring-buffer
REGISTER_LOOP = """kernel k(X: gl<f32>[N, W], Y: gl<f32>[N, 64])
    grid(cdiv(N, 64))
{
    reg s: rt<f32, 64, 64> = 0
    @stages(S)
    for j in 0 .. cdiv(W, 64) {
        reg t: rt<f32, 64, 64> = X[block.x, j]
        s += t
    }
    Y[block.x, 0] = s
}
"""

# a GEMM K loop nested in a run-time loop over row tiles: only a loop at the kernel's top level is pipelined
NESTED_LOOP = """kernel k(A: gl<bf16>[M, K], B: gl<bf16>[K, 64], C: gl<bf16>[M, 64])
    grid(1)
{
    shared a: st<bf16, 64, 64>
    shared b: st<bf16, 64, 64>
    for i in 0 .. cdiv(M, 64) {
        reg acc: rt<f32, 64, 64> = 0
        @stages(2)
        for k in 0 .. cdiv(K, 64) {
            a = A[i, k]
            b = B[k, 0]
            acc += a @ b
        }
        C[i, 0] = bf16(acc)
    }
}
"""

# a GEMM loop that reads its tiles before loading them (each iteration multiplies the previous one's): a ring
# buffer would hand it the wrong stage, so on sm_80 pipeline-cp-async's conditions exclude the loop, which used to
# drop the requested depth silently
READ_BEFORE_LOAD_LOOP = """kernel k(A: gl<bf16>[M, K], B: gl<bf16>[K, 64], C: gl<bf16>[M, 64])
    grid(cdiv(M, 64))
{
    shared a: st<bf16, 64, 64>
    shared b: st<bf16, 64, 64>
    reg acc: rt<f32, 64, 64> = 0
    a = A[block.x, 0]
    b = B[0, 0]
    @stages(2)
    for k in 1 .. cdiv(K, 64) {
        acc += a @ b
        a = A[block.x, k]
        b = B[k, 0]
    }
    C[block.x, 0] = bf16(acc)
}
"""


NO_PRODUCER_GEMM = """@warpgroups(consumers=1, producers=0)
kernel k(A: gl<bf16>[M, K], B: gl<bf16>[K, 64], C: gl<bf16>[M, 64])
    grid(cdiv(M, 64))
{
    shared a: st<bf16, 64, 64>
    shared b: st<bf16, 64, 64>
    reg acc: rt<f32, 64, 64> = 0
    @stages(2)
    for k in 0 .. cdiv(K, 64) {
        a = A[block.x, k]
        b = B[k, 0]
        acc += a @ b
    }
    C[block.x, 0] = bf16(acc)
}
"""


def _compile(tmp_path: Path, source: str, target: str, **kw: object) -> object:
    path = tmp_path / "k.tk"
    path.write_text(source, encoding="utf-8")
    return tkir.compile(str(path), target=target, **kw)


def _refusal(tmp_path: Path, source: str, target: str) -> CompileError:
    with pytest.raises(CompileError) as e:
        _compile(tmp_path, source, target)
    return e.value


@pytest.mark.parametrize("target", TARGETS)
def test_stages_on_a_loop_without_shared_copies_is_a_located_error(tmp_path: Path, target: str) -> None:
    e = _refusal(tmp_path, REGISTER_LOOP.replace("@stages(S)", "@stages(3)"), target)
    assert e.format().startswith(f"{tmp_path / 'k.tk'}:6:5: error: @stages(3): this loop cannot be pipelined: "
                                 "it copies no shared tile from global memory"), e.format()
    assert e.hint == "remove the annotation, or write @stages(1)"


@pytest.mark.parametrize("target", TARGETS)
def test_one_stage_and_no_annotation_compile(tmp_path: Path, target: str) -> None:
    for source in (REGISTER_LOOP.replace("@stages(S)", "@stages(1)"), REGISTER_LOOP.replace("    @stages(S)\n", "")):
        assert ".entry k" in _compile(tmp_path, source, target).asm["ptx"]


@pytest.mark.parametrize("target", TARGETS)
def test_stages_on_a_nested_loop_is_a_located_error(tmp_path: Path, target: str) -> None:
    e = _refusal(tmp_path, NESTED_LOOP, target)
    assert e.loc is not None and (e.loc.line, e.loc.col) == (9, 9), e.format()
    assert "@stages(2): this loop cannot be pipelined: it is nested in another loop" in e.message


def test_a_loop_outside_the_cp_async_conditions_is_refused_on_sm80(tmp_path: Path) -> None:
    e = _refusal(tmp_path, READ_BEFORE_LOAD_LOOP, "sm_80")
    assert e.loc is not None and (e.loc.line, e.loc.col) == (10, 5), e.format()
    assert "its copies do not meet the pipeline's conditions" in e.message


def test_the_one_buffer_ablation_warns(tmp_path: Path) -> None:
    """pipeline-cp-async{hopper=false} is told to leave a producer-less sm_90a kernel one-buffered: its
    @stages loop gets a located warning, not an error; the default pipeline ring-buffers the same loop."""
    passes = ",".join("pipeline-cp-async{hopper=false}" if p == "pipeline-cp-async" else p for p in DEFAULT_PIPELINE)
    with pytest.warns(StagesWarning, match=r"k\.tk:9:5: @stages\(2\): this loop is not pipelined: its copies stay off TMA"):
        k = _compile(tmp_path, NO_PRODUCER_GEMM, "sm_90a", passes=passes)
    assert "pipe.async_copy" not in print_module(k.module) and ".entry k" in k.asm["ptx"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "pipe.async_copy" in print_module(_compile(tmp_path, NO_PRODUCER_GEMM, "sm_90a").module)


def test_no_tma_on_sm90a_warns_that_the_loop_keeps_one_buffer(tmp_path: Path) -> None:
    """--no-tma: the copies stay off TMA, plan-occupancy plans one compute role, and pipeline-cp-async takes
    such a kernel only when asked (hopper=true, @warpgroups(producers=0)): a located warning names the loop."""
    gemm = NO_PRODUCER_GEMM.replace("@warpgroups(consumers=1, producers=0)\n", "")
    with pytest.warns(StagesWarning, match=r"k\.tk:8:5: @stages\(2\): this loop is not pipelined"):
        _compile(tmp_path, gemm, "sm_90a", no_tma=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kw in ({"no_tma": True, "target": "sm_80"}, {}):  # sm_80 rings it with cp.async; TMA with a producer
            _compile(tmp_path, gemm, **{"target": "sm_90a", **kw})
