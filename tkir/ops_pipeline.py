"""Ops of the pipelined level (written by the `pipeline` and `pipeline-cp-async` passes, read by the backend).

    %full = pipe.barriers {count = 1} : sv<i64, 4>        S mbarriers, each expecting `count` arrivals
    %as = pipe.stage %a, %s : st<bf16, 128, 64, ...>      stage s of a ring buffer st<..., stages=S>
    pipe.wait %full, %s, %parity                          block until phase `parity` of bars[s] completed
    pipe.expect %full, %s {bytes = 49152}                 arrive on bars[s], expecting that many TMA bytes
    pipe.copy %as, %full, %s, %A, %bx, %k {desc = @A_tma, boxes = 1, bytes = 16384}
                                                          TMA global->shared into a stage, completing on bars[s]
    pipe.copy %as, %full, %s, %A, %bx, %k {cp_async = true}
                                                          sm_80 (no TMA): every thread of the role copies its
                                                          16-byte chunks with cp.async and arrives on bars[s]
                                                          once they land (count: threads x copies per stage)
    pipe.arrive %empty, %s                                one arrival on bars[s] (per consumer warp)
    pipe.arrive %empty, %s {deferred = true}              ... for the previous iteration's stage instead,
                                                          once this iteration's async mma is issued
    tk.role {kind = producer, warpgroups = 1, regs = 40} { ... }   code run by those warpgroups only
    tk.role {kind = producer, warps = 1, regs = 200} { ... }       sm_80: sized in warps, no setmaxnreg

The cp.async pipeline of the mma.sync path (written by `pipeline-cp-async`, sm_80; PTX ISA
§9.7.9.25, CUTLASS `MmaMultistage`); every thread issues, commits and waits for its own copies:

    pipe.async_copy %more, %a, %s, %A, %bx, %k            if %more (i1): cp.async of tile (%bx, %k) of %A
                                                          into stage s of ring buffer %a (in flight: the
                                                          stage holds nothing defined until a wait covers
                                                          it); if not, nothing
    pipe.async_commit %s                                  close the copies issued since the last commit
                                                          into one group (cp.async.commit_group): the
                                                          group that fills stage s
    pipe.async_wait {pending = 2}                         wait until at most 2 groups are in flight
                                                          (cp.async.wait_group), then a block barrier:
                                                          every thread's finished copies are visible and
                                                          every thread is done reading earlier stages

Semantics for the interpreter (tkir/interp/pipeline.py): roles run as threads that meet at
`pipe.wait`; a barrier's phase completes when it has received `count` arrivals and all expected bytes.
"""

from __future__ import annotations

from tkir.ir import Operation
from tkir.opdef import expect, is_int_scalar, n_operands, n_results, register_op
from tkir.target import SETMAXNREG_RANGE, SETMAXNREG_STEP
from tkir.types import GlobalType, ScalarType, TileType, VectorType


def _is_bars(t: object) -> bool:
    return isinstance(t, VectorType) and t.space == "sv" and t.dtype == "i64"


def _is_shared(t: object) -> bool:
    """A shared tile or a shared vector (a ring buffer's type, or one stage's)."""
    return (isinstance(t, TileType) and t.space == "st") or (isinstance(t, VectorType) and t.space == "sv")


def _barriers(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 1)
    expect(_is_bars(op.result.type), "'pipe.barriers' yields sv<i64, S>")
    expect(isinstance(op.attrs.get("count"), int) and op.attrs["count"] >= 1, "'pipe.barriers' needs count >= 1")


def _stage(op: Operation) -> None:
    n_operands(op, 2)
    n_results(op, 1)
    buf, s = (v.type for v in op.operands)
    r = op.result.type
    expect(_is_shared(buf) and isinstance(buf.get("stages"), int),
           f"'pipe.stage' takes a ring buffer st<..., stages=S> or sv<..., stages=S>, got {buf}")
    expect(is_int_scalar(s), "'pipe.stage' index is i32")
    expect(type(r) is type(buf) and r.bare() == buf.bare() and r.get("stages") is None,
           f"'pipe.stage' of {buf} yields one stage, got {r}")
    layout = {k: v for k, v in buf.attrs if k != "stages"}
    expect(dict(r.attrs) == layout,  # a view in another layout than its buffer reads it wrong (issue 14)
           f"'pipe.stage' of {buf} yields a stage in the buffer's layout "
           f"({', '.join(f'{k}={v}' for k, v in layout.items()) or 'no attributes'}), got {r}")


def _bar_op(n: int):
    def check(op: Operation) -> None:
        n_operands(op, n)
        n_results(op, 0)
        expect(_is_bars(op.operands[0].type), f"'{op.name}' takes barriers sv<i64, S>")
        expect(all(is_int_scalar(v.type) for v in op.operands[1:]), f"'{op.name}' indices are i32")
        if op.name == "pipe.expect":
            expect(isinstance(op.attrs.get("bytes"), int), "'pipe.expect' needs bytes = N")
    return check


def _copy(op: Operation) -> None:
    n_results(op, 0)
    expect(len(op.operands) >= 5, "'pipe.copy' needs dst, barriers, stage, src, coordinates")
    dst, bars, s, src = (v.type for v in op.operands[:4])
    expect(_is_shared(dst), f"'pipe.copy' writes a shared tile or vector, not {dst}")
    expect(_is_bars(bars) and is_int_scalar(s), "'pipe.copy' completes on barriers[stage]")
    expect(isinstance(src, GlobalType) and len(op.operands) - 4 == src.rank,
           f"'pipe.copy' needs {getattr(src, 'rank', '?')} coordinates")
    expect(("desc" in op.attrs) != bool(op.attrs.get("cp_async")),
           "'pipe.copy' needs desc = @tma_desc (TMA) or cp_async = true (every thread of the role copies)")
    if "bytes" in op.attrs:  # what the TMA copy completes on the barrier (mbarrier complete_tx)
        expect(op.attrs["bytes"] == dst.nbytes,
               f"'pipe.copy' has bytes = {op.attrs['bytes']}, but it fills %{op.operands[0].name} ({dst}), "
               f"{dst.nbytes} B: a TMA copy completes the whole tile's bytes on the barrier")


def _async_copy(op: Operation) -> None:
    n_results(op, 0)
    expect(len(op.operands) >= 5,
           "'pipe.async_copy' needs a condition, a ring buffer, a stage, a source and coordinates")
    cond, buf, s, src = (v.type for v in op.operands[:4])
    expect(cond == ScalarType("i1"), f"'pipe.async_copy' condition is i1, not {cond}")
    expect(_is_shared(buf) and isinstance(buf.get("stages"), int),
           f"'pipe.async_copy' writes a stage of a ring buffer st<..., stages=S> or sv<..., stages=S>, not {buf}")
    expect(is_int_scalar(s), "'pipe.async_copy' stage index is i32")
    expect(isinstance(src, GlobalType) and len(op.operands) - 4 == src.rank,
           f"'pipe.async_copy' needs {getattr(src, 'rank', '?')} coordinates of a gl source, got {src}")
    expect(src.dtype == buf.dtype, f"'pipe.async_copy' copies {src} into {buf}: cp.async converts no dtypes")
    expect(all(is_int_scalar(v.type) for v in op.operands[4:]), "'pipe.async_copy' coordinates are i32")


def _async_commit(op: Operation) -> None:
    n_operands(op, 1)
    n_results(op, 0)
    expect(is_int_scalar(op.operands[0].type), "'pipe.async_commit' names the stage its group fills (i32)")


def _async_wait(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 0)
    pending = op.attrs.get("pending")
    expect(isinstance(pending, int) and not isinstance(pending, bool) and pending >= 0,
           "'pipe.async_wait' needs pending = N >= 0 (the cp.async groups that may stay in flight)")


def _role(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 0)
    expect(len(op.regions) == 1, "'tk.role' has one region")
    expect(str(op.attrs.get("kind")) in ("producer", "consumer", "compute"), "'tk.role' kind")
    sizes = [k for k in ("warpgroups", "warps") if isinstance(op.attrs.get(k), int) and op.attrs[k] >= 1]
    expect(len(sizes) == 1, "'tk.role' needs warpgroups = N or (sm_80) warps = N, one of them")
    regs, (lo, hi) = op.attrs.get("regs"), SETMAXNREG_RANGE  # the role's setmaxnreg (absent or 0: none)
    expect(regs in (None, 0) or (isinstance(regs, int) and not isinstance(regs, bool) and lo <= regs <= hi
                                 and regs % SETMAXNREG_STEP == 0),
           f"'tk.role' regs = {regs}: setmaxnreg takes {lo}..{hi} registers per thread, a multiple of "
           f"{SETMAXNREG_STEP}")


# `tk.mma_wait {fence = true}`: a fence.acq_rel.cta right before the wait (overlap-mma{fence_wait}), which ptxas
# does not move the wgmma wait above, so the work before it stays before it in the SASS
WAIT_FENCE_ATTR = "fence"


def _mma_wait(op: Operation) -> None:
    n_operands(op, 1)
    n_results(op, 1)
    t = op.operands[0].type
    expect(isinstance(t, TileType) and t.space == "rt" and op.result.type == t,
           "'tk.mma_wait' takes and returns one register tile of the same type")
    expect(isinstance(op.attrs.get(WAIT_FENCE_ATTR, False), bool),
           f"'tk.mma_wait' {WAIT_FENCE_ATTR} = {op.attrs.get(WAIT_FENCE_ATTR)}: true or false")


register_op("pipe.barriers", _barriers, pure=False, summary="S mbarriers with an arrival count")
register_op("pipe.stage", _stage, summary="one stage of a shared ring buffer")
register_op("pipe.wait", _bar_op(3), pure=False, summary="wait for a barrier phase (parity)")
register_op("pipe.expect", _bar_op(2), pure=False, summary="arrive with expected TMA bytes")
register_op("pipe.arrive", _bar_op(2), pure=False, summary="arrive on a barrier")
register_op("pipe.copy", _copy, pure=False, summary="TMA copy into a stage, completing on a barrier")
register_op("tk.mma_wait", _mma_wait, pure=False,
            summary="the tile once the async mma (defer_wait) that produced it has completed")
def _turn(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 0)


register_op("pipe.turn_init", _turn, pure=False, summary="consumer warpgroup 0 takes the first turn (pingpong)")
register_op("pipe.turn_wait", _turn, pure=False, summary="wait for this warpgroup's turn to issue mmas (pingpong)")
register_op("pipe.turn_pass", _turn, pure=False, summary="pass the turn to the next consumer warpgroup (pingpong)")
register_op("tk.role", _role, pure=False, summary="code run by one warpgroup role")
register_op("pipe.async_copy", _async_copy, pure=False, summary="cp.async of a tile into a stage of a ring buffer")
register_op("pipe.async_commit", _async_commit, pure=False, summary="close the issued cp.async copies into a group")
register_op("pipe.async_wait", _async_wait, pure=False,
            summary="wait until at most `pending` cp.async groups are in flight, then a block barrier")
