"""Lowering rules for the stream-K ops (tkir/ops_streamk.py): workspaces and partial tiles.

Rules of backend.rules' table, for accumulators in the wgmma_acc layout.

A partial tile is kept in *fragment order*: consumer warpgroup `w`'s thread `t` (0..127) stores its
values 4 at a time, group `j` at float index `slot * E + w * E / W + (j * 128 + t) * 4` (E = the
tile's elements, W = warpgroups). Each warp's 16-byte stores are one contiguous 512-byte run, and
the owner reads with the same layout, so no thread needs another thread's values. With the ops'
`rows` operand, a group whose row lies past the output is neither stored nor read (predicated off:
at M = 1 one group in 64 moves).

Ordering (PTX memory model, the pattern of CUTLASS's generic barrier): writers store, fence at GPU
scope, sync their warpgroup (its "warpgroup" named barrier, as the staged epilogue), then one thread
`st.release.gpu`s the flag with the launch count. The owner's warpgroup leader spins on
`ld.acquire.gpu` until the flag holds the launch count, the warpgroup syncs, and every thread reads
the partial with `ld.global.cg` (L2, never a stale L1 line).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tkir.backend.idioms import NAMED_BARRIERS, fence_acq_rel, named_barrier_sync
from tkir.backend.rules import rule
from tkir.backend.values import THREADS_PER_WARPGROUP, Frag, Global, LoweringError
from tkir.ir import Operation

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext

VEC = 4  # floats per st/ld.global.v4


@rule("tk.workspace")
def _op_tk_workspace(cx: LoweringContext, op: Operation) -> None:
    cx.set(op.result, Global(cx.params[op.attrs["name"]], op.result.type))


@rule("tk.launch_count")
def _op_tk_launch_count(cx: LoweringContext, op: Operation) -> None:
    cx.set(op.result, cx.params[op.attrs["name"]])


def _partial_addrs(cx: LoweringContext, op: Operation) -> tuple[Frag, str, str, str, str]:
    """(accumulator, this thread's first partial address, flag address, warpgroup-leader i1,
    named barrier id) for a tk.partial_* op."""
    w = cx.w
    part, flags, acc = (cx.get(v) for v in op.operands[:3])
    slot = cx.scalar(op.operands[3])
    if not (isinstance(acc, Frag) and acc.kind == "wgmma_acc") or cx.role is None:
        raise LoweringError(op.loc, f"backend: {op.name} needs a wgmma_acc tile inside a consumer role")
    t = acc.type
    nwg = acc.layout.split  # wgmma_acc: over warpgroups
    elems = t.rows * t.cols
    ctx = cx.role
    t128 = w.op(f"and i32 {ctx.tid}, {THREADS_PER_WARPGROUP - 1}", "t128")
    base = w.op(f"mul i32 {slot}, {elems}", "pslot")
    base = w.op(f"add i32 {base}, {w.op(f'mul i32 {ctx.wg}, {elems // nwg}', 'pwg')}", "pbase")
    base = w.op(f"add i32 {base}, {w.op(f'shl i32 {t128}, 2', 'pt')}", "pbase")
    b64 = w.op(f"sext i32 {base} to i64", "pb64")
    ptr = w.op(f"getelementptr float, ptr addrspace(1) {part.ptr}, i64 {b64}", "pptr")
    fidx = w.op(f"add i32 {w.op(f'mul i32 {slot}, {nwg}', 'fs')}, {ctx.wg}", "fidx")
    f64 = w.op(f"sext i32 {fidx} to i64", "f64")
    fptr = w.op(f"getelementptr i32, ptr addrspace(1) {flags.ptr}, i64 {f64}", "fptr")
    lead = w.op(f"icmp eq i32 {t128}, 0", "wglead")
    bar_id = NAMED_BARRIERS.emit_id(w, "warpgroup", ctx.wg, "barid")
    return acc, ptr, fptr, lead, bar_id


def _group_rows(cx: LoweringContext, op: Operation, acc: Frag) -> list[str] | None:
    """Per group of VEC values, an i32 that is 1 where the group holds a row inside the output (the op's
    optional `rows` operand), or None when every row moves. A group is two columns of one row and two of
    the row 8 below (the wgmma_acc fragment), so its first value's row decides: the other row is only
    further out."""
    if len(op.operands) < 6:
        return None
    w = cx.w
    nrows = cx.scalar(op.operands[5])
    coords = cx.coords(acc.type)
    out = []
    for j in range(len(acc.values) // VEC):
        row = coords[VEC * j][0]
        out.append(w.op(f"zext i1 {w.op(f'icmp slt i32 {row}, {nrows}', 'prow')} to i32", "pin"))
    return out


def _group_ptr(cx: LoweringContext, ptr: str, j: int) -> str:
    return cx.w.op(f"getelementptr float, ptr addrspace(1) {ptr}, i64 {j * THREADS_PER_WARPGROUP * VEC}",
                     "pj")


@rule("tk.partial_store", targets=("sm_90a",))
def _op_tk_partial_store(cx: LoweringContext, op: Operation) -> None:
    w = cx.w
    acc, ptr, fptr, lead, bar_id = _partial_addrs(cx, op)
    epoch = cx.scalar(op.operands[4])
    vals = acc.values
    inside = _group_rows(cx, op, acc)
    for j in range(len(vals) // VEC):
        args = [("ptr addrspace(1)", _group_ptr(cx, ptr, j))] + [("float", v) for v in vals[VEC * j:VEC * j + VEC]]
        if inside is None:
            w.asm("void", ["st.global.v4.f32 [$0], {$1, $2, $3, $4};"], ["l", "f", "f", "f", "f"], args)
        else:
            w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $5, 0;", "@p st.global.v4.f32 [$0], {$1, $2, $3, $4};",
                           "}"], ["l", "f", "f", "f", "f", "r"], args + [("i32", inside[j])])
    fence_acq_rel(w, "gpu")
    named_barrier_sync(w, bar_id, THREADS_PER_WARPGROUP)
    cx.if_then(lead, lambda: w.asm("void", ["st.release.gpu.global.b32 [$0], $1;"], ["l", "r"],
                                 [("ptr addrspace(1)", fptr), ("i32", epoch)]))


@rule("tk.partial_add", targets=("sm_90a",))
def _op_tk_partial_add(cx: LoweringContext, op: Operation) -> None:
    w = cx.w
    acc, ptr, fptr, lead, bar_id = _partial_addrs(cx, op)
    epoch = cx.scalar(op.operands[4])

    def spin() -> None:
        loop, ready = w.label("sk_wait"), w.label("sk_ready")
        w.br(loop)
        w.start_block(loop)
        got = w.asm("i32", ["ld.acquire.gpu.global.b32 $0, [$1];"], ["=r", "l"],
                    [("ptr addrspace(1)", fptr)], "flag")
        w.cond_br(w.op(f"icmp ne i32 {got}, {epoch}", "notyet"), loop, ready)
        w.start_block(ready)

    cx.if_then(lead, spin)
    named_barrier_sync(w, bar_id, THREADS_PER_WARPGROUP)
    out = []
    ret = "{float, float, float, float}"
    inside = _group_rows(cx, op, acc)
    for j in range(len(acc.values) // VEC):
        gp = ("ptr addrspace(1)", _group_ptr(cx, ptr, j))
        if inside is None:
            r = w.asm(ret, ["ld.global.cg.v4.f32 {$0, $1, $2, $3}, [$4];"], ["=f"] * VEC + ["l"], [gp], "part")
        else:  # rows past the output add zeros: nothing is read for them
            r = w.asm(ret, ["{", ".reg .pred p;", "setp.ne.b32 p, $5, 0;", "mov.b32 $0, 0;", "mov.b32 $1, 0;",
                            "mov.b32 $2, 0;", "mov.b32 $3, 0;", "@p ld.global.cg.v4.f32 {$0, $1, $2, $3}, [$4];", "}"],
                      ["=f"] * VEC + ["l", "r"], [gp, ("i32", inside[j])], "part")
        for i in range(VEC):
            x = w.op(f"extractvalue {ret} {r}, {i}", "pv")
            out.append(w.op(f"fadd float {acc.values[VEC * j + i]}, {x}", "psum"))
    cx.set(op.result, Frag(acc.type, out))
