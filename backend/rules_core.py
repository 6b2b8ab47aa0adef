"""Lowering rules for scalars and structured control flow: arith.*, tk.size, tk.block_id,
tk.grid_dim, scf.for (phis patched after the body), scf.if, scf.yield.

Rules of backend.rules' table. Scalars are LLVM i32/float values (strings); loop-carried register
tiles are carried as one phi per fragment slot; an accumulator whose wgmma group may still be in
flight when the loop exits is drained with `wgmma.wait_group 0`. What other families add to a loop
(sm_80's rotated loop, a deferred stage release) comes through the loop hooks they register with
backend.rules (`LOOP_HOOKS`), not through imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tkir.backend.int_ops import int_op
from tkir.backend.llvm_text import f32_literal
from tkir.backend.rules import LOOP_HOOKS, rule
from tkir.backend.values import LLVM_TYPE, Frag, LoweringError, Smem
from tkir.ir import Operation
from tkir.ops import SCALAR_BINARY
from tkir.scalar import BIT_NAMES
from tkir.types import ScalarType, TileType, VectorType

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext


@rule("arith.const")
def _op_arith_const(cx: LoweringContext, op: Operation) -> None:
    val = op.attrs["value"]
    integral = isinstance(val, int) or (isinstance(val, float) and val.is_integer())
    if op.result.type.dtype != "f32" and (isinstance(val, bool) or not integral):  # nan, inf: hand-written IR
        raise LoweringError(op.loc, f"backend: an {op.result.type} constant must be an integer, not {val}")
    cx.set(op.result, f32_literal(val) if op.result.type.dtype == "f32" else str(int(val)))


def _arith(cx: LoweringContext, op: Operation) -> None:
    a, b = (cx.scalar(v) for v in op.operands)
    w = cx.w
    if op.result.type.dtype == "f32":
        fop = {"arith.add": "fadd", "arith.sub": "fsub", "arith.mul": "fmul", "arith.div": "fdiv"}.get(op.name)
        if fop is None:
            raise LoweringError(op.loc, f"backend: '{op.name}' on f32 not supported")
        cx.set(op.result, w.op(f"{fop} float {a}, {b}", op.result.name or "f"))
        return
    n = op.result.name or "i"
    if op.name.removeprefix("arith.") in BIT_NAMES:  # and/or/xor on the bits; shifts clamped, a u32's shr logical
        cx.set(op.result, int_op(w, op.name.removeprefix("arith."), a, b, op.result.type.dtype))
        return
    if op.name == "arith.cdiv":
        t = w.op(f"add i32 {a}, {b}", n)
        t = w.op(f"sub i32 {t}, 1", n)
        cx.set(op.result, w.op(f"sdiv i32 {t}, {b}", n))
        return
    if op.name in ("arith.min", "arith.max"):
        c = w.op(f"icmp {'slt' if op.name == 'arith.min' else 'sgt'} i32 {a}, {b}", n)
        cx.set(op.result, w.op(f"select i1 {c}, i32 {a}, i32 {b}", n))
        return
    iop = {"arith.add": "add", "arith.sub": "sub", "arith.mul": "mul", "arith.div": "sdiv",
           "arith.rem": "srem"}[op.name]
    cx.set(op.result, w.op(f"{iop} i32 {a}, {b}", n))


rule(*(f"arith.{n}" for n in SCALAR_BINARY))(_arith)


@rule("arith.cast")
def scalar_cast(cx: LoweringContext, op: Operation) -> None:
    """i32 / u32 <-> f32 (toward zero, as the interpreter's int(); u32 unsigned, saturating at 0 and 2**32 - 1);
    same-width integer casts keep the bits."""
    src, dst = op.operands[0].type.dtype, op.result.type.dtype
    x = cx.scalar(op.operands[0])
    floats = ("f32",)
    if (src in floats) == (dst in floats):
        cx.set(op.result, x)
    elif dst in floats:
        conv = "uitofp" if src == "u32" else "sitofp"
        cx.set(op.result, cx.w.op(f"{conv} i32 {x} to float", op.result.name or "f"))
    elif dst == "u32":
        cx.set(op.result, cx.w.call("i32", "llvm.fptoui.sat.i32.f32", [("float", x)], hint=op.result.name or "i"))
    else:
        cx.set(op.result, cx.w.op(f"fptosi float {x} to i32", op.result.name or "i"))


@rule("arith.cmp")
def _op_arith_cmp(cx: LoweringContext, op: Operation) -> None:
    a, b = (cx.scalar(v) for v in op.operands)
    pred = str(op.attrs["pred"])
    if op.operands[0].type.dtype == "f32":
        fpred = "une" if pred == "ne" else f"o{pred}"  # IEEE 754 (and tkir/scalar.py): NaN != x is true
        cx.set(op.result, cx.w.op(f"fcmp {fpred} float {a}, {b}", op.result.name or "c"))
    else:
        ipred = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}[pred]
        cx.set(op.result, cx.w.op(f"icmp {ipred} i32 {a}, {b}", op.result.name or "c"))


@rule("scf.if", when=lambda cx, op: len(op.regions) == 1 and not op.results)
def _op_scf_if(cx: LoweringContext, op: Operation) -> None:
    w = cx.w
    then, done = w.label("if_then"), w.label("if_end")
    w.cond_br(cx.scalar(op.operands[0]), then, done)
    w.start_block(then)
    cx.cut_groups()
    cx.lower_ops(op.body.ops)
    w.br(done)
    w.start_block(done)
    cx.cut_groups()


@rule("tk.size")
def _op_tk_size(cx: LoweringContext, op: Operation) -> None:
    name = op.attrs["name"]
    if name not in cx.sizes:  # hand-written IR: a size that no tensor parameter has
        raise LoweringError(op.loc, f"backend: size '{name}' is not a dim of the kernel's tensors "
                                    f"(sizes: {', '.join(cx.sizes) or 'none'})")
    cx.set(op.result, cx.sizes[name])


@rule("tk.block_id")
def _op_tk_block_id(cx: LoweringContext, op: Operation) -> None:
    """%ctaid; in a cluster kernel (cluster-rows: clusters of C x 1 x 1 CTAs, one per block) %clusterid."""
    sreg = "clusterid." if cx.cluster > 1 else "ctaid."
    cx.set(op.result, cx.w.sreg(sreg + "xyz"[op.attrs["dim"]]))


@rule("tk.grid_dim")
def _op_tk_grid_dim(cx: LoweringContext, op: Operation) -> None:
    sreg = "nclusterid." if cx.cluster > 1 else "nctaid."
    cx.set(op.result, cx.w.sreg(sreg + "xyz"[op.attrs["dim"]]))


@rule("scf.if", when=lambda cx, op: len(op.regions) == 2)
def if_else(cx: LoweringContext, op: Operation) -> None:
    """Two regions; results (register tiles, vectors, scalars) merge with one phi per slot."""
    w = cx.w
    then, other, done = w.label("if_then"), w.label("if_else"), w.label("if_end")
    w.cond_br(cx.scalar(op.operands[0]), then, other)
    ends = []
    for label, region in ((then, op.regions[0]), (other, op.regions[1])):
        w.start_block(label)
        cx.cut_groups()
        blk = region.block
        cx.lower_ops(blk.ops)
        term = blk.terminator
        ys = [cx.get(v) for v in term.operands] if term is not None else []
        # a result fragment may come from an async mma: wait before merging
        ys = [Frag(y.type, cx.wait_group(y.values, 0)) if isinstance(y, Frag) and y.pending else y for y in ys]
        ends.append((w.block, ys))
        w.br(done)
    w.start_block(done)
    cx.cut_groups()
    (b0, y0s), (b1, y1s) = ends
    for res, a, b in zip(op.results, y0s, y1s, strict=True):
        ty = _carried_llvm_type(a, res.type)
        merged = [w.op(f"phi {ty} [ {x}, %{b0} ], [ {y}, %{b1} ]", res.name or "ifv")
                  for x, y in zip(_flatten(a), _flatten(b), strict=True)]
        cx.set(res, _rebuild(a, merged) if isinstance(a, (Frag, Smem)) else merged[0])


@rule("scf.for")
def _op_scf_for(cx: LoweringContext, op: Operation) -> None:
    """A counted loop: one phi per carried scalar or fragment slot. 16-bit fragments are carried as
    32-bit words of two slots (the pairs the wgmma/mma A fragments pack), so a bf16 tile costs one
    register per two elements across the back edge instead of one each. Each registered loop hook may
    emit code before the loop and carry i32 values of its own around it (backend.rules.LoopCarry)."""
    w = cx.w
    lo, hi, step = (cx.scalar(v) for v in op.operands[:3])
    inits = [cx.get(v) for v in op.operands[3:]]
    init_flat = [_pack_words(w, x) if _carried_packed(x) else _flatten(x) for x in inits]
    carries = [c for c in (hook(cx, op) for hook in LOOP_HOOKS) if c is not None]  # code before the loop
    pre = w.block
    hdr, body, exit_ = w.label("for_hdr"), w.label("for_body"), w.label("for_exit")
    w.br(hdr)
    w.start_block(hdr)
    iv = w.fresh(op.body.args[0].name or "i")
    iv_line = w.emit("")
    carried: list[tuple[list[int], list[str]]] = []
    for arg, flat in zip(op.body.args[1:], init_flat, strict=True):
        idxs, names = [], []
        for k, _ in enumerate(flat):
            names.append(w.fresh((arg.name or "c") + f"_{k}"))
            idxs.append(w.emit(""))
        carried.append((idxs, names))
    hook_phis: list[tuple[list[int], list[str], list[str]]] = []  # per carry: lines, names, entry values
    for c in carries:
        entry = c.initial()
        phis = [w.fresh(c.hint) for _ in entry]
        hook_phis.append(([w.emit("") for _ in entry], phis, entry))
        c.enter(cx, phis)
    cx.set(op.body.args[0], iv)
    # the carried values as the body sees them (16-bit words unpacked after every phi)
    term0 = op.body.terminator
    entry_vals: list[object] = []
    for n_arg, (arg, init, (_idxs, names)) in enumerate(zip(op.body.args[1:], inits, carried, strict=True)):
        x = Frag(init.type, _unpack_words(w, names, init.type.dtype)) if _carried_packed(init) \
            else _rebuild(init, names)
        entry_vals.append(x)
        y = term0.operands[n_arg].owner if term0 is not None else None
        if isinstance(x, Frag) and isinstance(y, Operation) and y.name == "tk.mma" \
                and y.attrs.get("async_groups"):
            x = Frag(x.type, x.values, pending=True)  # the previous iteration's mma may still be writing it
        cx.set(arg, x)
    cond = w.op(f"icmp slt i32 {iv}, {hi}", "cond")
    w.cond_br(cond, body, exit_)
    w.start_block(body)
    cx.cut_groups()  # the back edge: groups of earlier iterations are not counted
    term = op.body.terminator
    with cx.scope():
        for inner in op.body.ops:
            if inner is term:
                break
            cx.lower_op(inner)
    yields = [cx.get(v) for v in term.operands] if term is not None else []
    yield_flat = [_pack_words(w, y) if _carried_packed(init) else _flatten(y)
                  for y, init in zip(yields, inits, strict=True)]
    nxt = w.op(f"add i32 {iv}, {step}", "next")
    latch = w.block
    w.br(hdr)
    w.lines[iv_line] = f"  {iv} = phi i32 [ {lo}, %{pre} ], [ {nxt}, %{latch} ]"
    for (idxs, names), init, arg, a_flat, b_flat in zip(carried, inits, op.body.args[1:], init_flat, yield_flat,
                                                         strict=True):
        ty = "i32" if _carried_packed(init) else _carried_llvm_type(init, arg.type)
        for i, n_, a, b in zip(idxs, names, a_flat, b_flat, strict=True):
            w.lines[i] = f"  {n_} = phi {ty} [ {a}, %{pre} ], [ {b}, %{latch} ]"
    for c, (lines, phis, entry) in zip(carries, hook_phis, strict=True):
        for i, n_, a, b in zip(lines, phis, entry, c.latch(cx), strict=True):
            w.lines[i] = f"  {n_} = phi i32 [ {a}, %{pre} ], [ {b}, %{latch} ]"
    w.start_block(exit_)
    cx.cut_groups()
    for res, x in zip(op.results, entry_vals, strict=True):
        # the header's values: what the loop yields when it exits (an f32 accumulator's registers tied through
        # the drain; a 16-bit value the loop carries, an mma's register A operand at most, is read, not written,
        # by an mma in flight, and wgmma.wait_group ties only f32 registers)
        if isinstance(x, Frag) and x.type.dtype == "f32" and any(isinstance(cx.get(y), Frag) and cx.get(y).pending
                                                                  for y in (term.operands if term else [])):
            x = Frag(x.type, cx.wait_group(x.values, 0))  # drain in-flight wgmma
        cx.set(res, x)
    for c in reversed(carries):
        c.leave(cx)


CARRIED_PER_WORD = {"bf16": 2, "f16": 2, "e4m3": 4, "e5m2": 4}  # values a carried b32 register holds


def _carried_packed(x: object) -> bool:
    per = CARRIED_PER_WORD.get(x.type.dtype) if isinstance(x, Frag) else None
    return per is not None and len(x.values) % per == 0 and bool(x.values)


def _pack_words(w, x: object) -> list[str]:
    assert isinstance(x, Frag)
    if CARRIED_PER_WORD[x.type.dtype] == 4:  # fp8: four consecutive slots a word (an 8-bit A register)
        return [w.pack_bytes(x.values[i:i + 4]) for i in range(0, len(x.values), 4)]
    return [w.pack_pair(x.values[i], x.values[i + 1], x.type.dtype) for i in range(0, len(x.values), 2)]


def _unpack_words(w, words: list[str], dtype: str) -> list[str]:
    out: list[str] = []
    for wd in words:
        out += w.unpack_bytes(wd) if CARRIED_PER_WORD[dtype] == 4 else w.unpack_pair(wd, dtype)
    return out


@rule("tk.mma_wait")
def _op_tk_mma_wait(cx: LoweringContext, op: Operation) -> None:
    """The operand was waited for before this rule ran (LoweringContext.lower_op waits for a pending
    fragment with wgmma.wait_group N, N = the groups committed after it); the result is that value."""
    x = cx.get(op.operands[0])
    cx.set(op.result, Frag(x.type, list(x.values)) if isinstance(x, Frag) else x)


@rule("scf.yield")
def _op_scf_yield(cx: LoweringContext, op: Operation) -> None:  # handled by scf.for
    pass


def _flatten(x: object) -> list[str]:
    if isinstance(x, Frag):
        return list(x.values)
    if isinstance(x, Smem):  # a shared tile or stage view: its i32 shared-window address (overlap-mma carries the
        return [x.addr]      # previous iteration's stage view to the mma it defers)
    if isinstance(x, str):
        return [x]
    raise LoweringError(None, f"backend: cannot carry {type(x).__name__} through a loop")


def _rebuild(like: object, names: list[str]) -> object:
    if isinstance(like, Frag):
        return Frag(like.type, names)
    if isinstance(like, Smem):
        return Smem(names[0], like.type)
    return names[0]


def _carried_llvm_type(x: object, t: object) -> str:
    """The LLVM type of one carried (phi) value of `x`, a value of IR type `t`."""
    return "i32" if isinstance(x, Smem) else _llvm_elem(t)


def _llvm_elem(t: object) -> str:
    if isinstance(t, (TileType, VectorType, ScalarType)):
        return LLVM_TYPE[t.dtype]
    raise LoweringError(None, f"backend: no LLVM type for {t}")
