"""Lowering rules for register tiles and vectors in any layout: fill, cast, elementwise math,
broadcasts, row reductions, layout relabels, and global loads/stores of `row`-layout tiles.

Rules are free functions registered in backend.rules' table. A register tile is a `Frag`: this thread's values, one
per slot of its layout. Which element a slot holds comes from backend.fragments.slot_coords (checked
against tkir.layout's tables in tests), so every rule is written once for all layouts:

* elementwise ops work slot by slot; a broadcast finds, for each tile slot, the vector slot of the
  same thread holding that row (or column) - a compile-time match, since layouts pair them;
* a row reduction combines the slots of one row in the thread, then across the lanes that share the
  row with butterfly shuffles (`shfl.sync.bfly`): the quad for wgmma accumulators, up to 32 lanes
  for `row` tiles;
* `row` tiles move between registers and global memory one lane chunk per access, 4, 8 or 16 bytes
  (`ld/st.global` .b32, .v2.b32, .v4.b32; tkir.layout.VECTOR_ACCESS_BYTES); chunks past the tensor's
  edge are clamped on load and skipped on store.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tkir.backend.cache_policy import hinted_load, policy_of, readonly_of
from tkir.backend.exchange import (
    broadcast_through_shared,
    combine_row_args,
    combine_row_parts,
    combine_row_stats,
    gather_rows,
    scratch_tile,
    shfl_bfly_f32,
    shfl_bfly_i32,
    shfl_idx,
)
from tkir.backend.f32 import combine, f32_pair_to_fp8, fp8_pair_to_f32, from_f32, to_f32
from tkir.backend.fragments import LazyValues, chunked, gather_plan, numeric_slots, row_groups, tile_shape
from tkir.backend.int_ops import int_op
from tkir.backend.llvm_text import f32_literal
from tkir.backend.rules import rule
from tkir.backend.shared_slots import load_element, store_to_shared
from tkir.backend.values import LLVM_TYPE, Frag, Global, LoweringError, register_layout
from tkir.bounds import copy_edge_proofs, why_in_bounds
from tkir.ir import Operation
from tkir.layout import layout_of, vector_access_bytes
from tkir.opdef import REDUCE_ATTR
from tkir.ops import ARG_KINDS, STATS_ATTR, TILE_BINARY, TILE_UNARY
from tkir.scalar import FP8_DTYPES
from tkir.types import ScalarType, TileType, VectorType, dtype_bytes

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext

LOG2E = 1.4426950408889634   # exp(x) = 2^(x log2 e): PTX has ex2.approx only
LN2 = 0.6931471805599453      # log(x) = lg2(x) ln 2


def _unary(cx: LoweringContext, name: str, x: str) -> str:
    w = cx.w
    if name == "exp2":
        return w.asm("float", ["ex2.approx.ftz.f32 $0, $1;"], ["=f", "f"], [("float", x)], "ex2")
    if name == "exp":
        y = w.op(f"fmul float {x}, {f32_literal(LOG2E)}", "xl")
        return w.asm("float", ["ex2.approx.ftz.f32 $0, $1;"], ["=f", "f"], [("float", y)], "ex")
    if name in ("log", "log2"):
        y = w.asm("float", ["lg2.approx.ftz.f32 $0, $1;"], ["=f", "f"], [("float", x)], "lg")
        return y if name == "log2" else w.op(f"fmul float {y}, {f32_literal(LN2)}", "ln")
    if name == "sqrt":
        return w.call("float", "llvm.sqrt.f32", [("float", x)], hint="sq")
    if name == "rsqrt":
        return w.asm("float", ["rsqrt.approx.ftz.f32 $0, $1;"], ["=f", "f"], [("float", x)], "rs")
    if name == "abs":
        return w.call("float", "llvm.fabs.f32", [("float", x)], hint="ab")
    if name == "neg":
        return w.op(f"fneg float {x}", "ng")
    if name == "tanh":  # PTX tanh.approx.f32 (sm_75+): max relative error 2^-11
        return w.asm("float", ["tanh.approx.f32 $0, $1;"], ["=f", "f"], [("float", x)], "th")
    if name == "sigmoid":  # 1 / (1 + e^-x) = 0.5 tanh(x / 2) + 0.5
        h = w.op(f"fmul float {x}, {f32_literal(0.5)}", "hx")
        t = w.asm("float", ["tanh.approx.f32 $0, $1;"], ["=f", "f"], [("float", h)], "th")
        return w.call("float", "llvm.fma.f32", [("float", t), ("float", f32_literal(0.5)), ("float", f32_literal(0.5))],
                      hint="sg")
    if name == "erf":
        return _erf(cx, x)
    raise LoweringError(None, f"backend: no rule for tk.{name}")


# Abramowitz & Stegun 7.1.26: erf(x) = 1 - (a1 t + ... + a5 t^5) e^(-x^2), t = 1 / (1 + p|x|),
# |error| <= 1.5e-7 for x >= 0; odd symmetry for x < 0 (PTX has no erf instruction).
ERF_P = 0.3275911
ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)


def _erf(cx: LoweringContext, x: str) -> str:
    w = cx.w
    ax = w.call("float", "llvm.fabs.f32", [("float", x)], hint="ab")
    den = w.call("float", "llvm.fma.f32", [("float", ax), ("float", f32_literal(ERF_P)), ("float", f32_literal(1.0))],
                 hint="den")
    t = w.op(f"fdiv float {f32_literal(1.0)}, {den}", "t")
    poly = f32_literal(ERF_A[4])
    for a in reversed(ERF_A[:4]):
        poly = w.call("float", "llvm.fma.f32", [("float", poly), ("float", t), ("float", f32_literal(a))], hint="pl")
    poly = w.op(f"fmul float {poly}, {t}", "pl")
    x2 = w.op(f"fmul float {ax}, {ax}", "x2")
    e = w.op(f"fmul float {x2}, {f32_literal(-LOG2E)}", "xe")
    e = w.asm("float", ["ex2.approx.ftz.f32 $0, $1;"], ["=f", "f"], [("float", e)], "ex")
    y = w.op(f"fsub float {f32_literal(1.0)}, {w.op(f'fmul float {poly}, {e}', 'pe')}", "erf")
    return w.call("float", "llvm.copysign.f32", [("float", y), ("float", x)], hint="erf")


INT_DTYPES = ("i32", "u32")


# --- fill, cast, relabel ---------------------------------------------------------------------


@rule("tk.fill")
def _op_tk_fill(cx: LoweringContext, op: Operation) -> None:
    t = op.result.type
    if t.dtype in INT_DTYPES:  # an integer literal (its 32 bits: a u32 past 2**31 - 1 is written negative)
        value = int(op.attrs["value"]) % 2**32
        cx.set(op.result, Frag(t, [str(value - 2**32 if value >= 2**31 else value)] * cx.nslots(t)))
        return
    lit = f32_literal(op.attrs["value"])
    if t.dtype != "f32":
        lit = from_f32(cx, lit, t.dtype)
    cx.set(op.result, Frag(t, [lit] * cx.nslots(t)))


@rule("tk.cast")
def _op_tk_cast(cx: LoweringContext, op: Operation) -> None:
    x = cx.get(op.operands[0])
    assert isinstance(x, Frag)
    src, dst = x.type.dtype, op.result.type.dtype
    if src not in LLVM_TYPE or dst not in LLVM_TYPE or "i1" in (src, dst):
        raise LoweringError(op.loc, f"backend: cast {src} -> {dst} not implemented")
    w = cx.w
    if src in INT_DTYPES and dst in INT_DTYPES:  # i32 <-> u32: the same 32 bits
        vals = list(x.values)
    elif src in INT_DTYPES:  # to f32 rounding to nearest even (cvt.rn.f32.s32 / .u32), then to dst
        conv = "uitofp" if src == "u32" else "sitofp"
        vals = [from_f32(cx, w.op(f"{conv} i32 {v} to float", "fi"), dst) for v in x.values]
    elif dst in INT_DTYPES:  # toward zero, saturating, NaN to 0: LLVM's .sat conversions define all three
        fn = "llvm.fptoui.sat.i32.f32" if dst == "u32" else "llvm.fptosi.sat.i32.f32"
        vals = [w.call("i32", fn, [("float", to_f32(cx, v, src))], hint="fi") for v in x.values]
    elif src in FP8_DTYPES or dst in FP8_DTYPES:  # fp8 cvts take two elements at a time (backend/f32.py)
        vals = _cast_pairs(cx, x.values, src, dst)
    else:
        vals = [from_f32(cx, to_f32(cx, v, src), dst) for v in x.values]
    cx.set(op.result, Frag(op.result.type, vals))


def _cast_pairs(cx: LoweringContext, values: list[str], src: str, dst: str) -> list[str]:
    """A cast from or to fp8, two slots per conversion instruction (an odd last slot alone)."""
    out: list[str] = []
    for i in range(0, len(values), 2):
        pair = values[i:i + 2]
        hi = pair[1] if len(pair) == 2 else None
        if src in FP8_DTYPES:
            f = fp8_pair_to_f32(cx, pair[0], hi, src)
        else:
            f = [to_f32(cx, v, src) for v in pair]
        if dst in FP8_DTYPES:
            out += f32_pair_to_fp8(cx, f[0], f[1] if len(f) == 2 else None, dst)
        else:
            out += [from_f32(cx, v, dst) for v in f]
    return out


@rule("tk.convert_layout", when=lambda cx, op: str(op.attrs.get("via", "none")) == "none")
def _op_tk_convert_layout(cx: LoweringContext, op: Operation) -> None:
    x = cx.get(op.operands[0])
    assert isinstance(x, Frag)
    src, dst = numeric_slots(x.layout, tile_shape(x.type)), numeric_slots(register_layout(op.result.type),
                                                                       tile_shape(op.result.type))
    index = {tuple(np.concatenate([c.ravel() for c in s]).tolist()): i for i, s in enumerate(src)}
    vals = []
    for s in dst:
        k = tuple(np.concatenate([c.ravel() for c in s]).tolist())
        if k not in index:
            raise LoweringError(op.loc, "backend: a 'none' layout conversion moves elements between threads")
        vals.append(x.values[index[k]])
    cx.set(op.result, Frag(op.result.type, vals))

# --- elementwise -----------------------------------------------------------------------------


def _binary(cx: LoweringContext, op: Operation) -> None:
    a, b = (cx.get(v) for v in op.operands)
    name = op.name.split(".")[1]
    rt = op.result.type
    if isinstance(rt, ScalarType):
        raise LoweringError(op.loc, f"backend: scalar {op.name} should be arith.{name}")
    bcast = op.attrs.get("bcast")
    ta, tb = op.operands[0].type, op.operands[1].type
    if rt.dtype in INT_DTYPES:
        va, vb = (_operand_values(cx, x, t, rt, bcast, op, raw=True) for x, t in ((a, ta), (b, tb)))
        cx.set(op.result, Frag(rt, [int_op(cx.w, name, x, y, rt.dtype) for x, y in zip(va, vb, strict=True)]))
        return
    va = _operand_values(cx, a, ta, rt, bcast, op)
    if name == "div" and not isinstance(tb, type(rt)):
        # dividing by a broadcast vector or a scalar: one reciprocal per distinct value, then
        # multiplies (div.rn.f32 is a long instruction sequence; x * (1/y) is within 1 ulp)
        recips: dict[str, str] = {}
        vb = []
        for y in _operand_values(cx, b, tb, rt, bcast, op):
            if y not in recips:
                recips[y] = combine(cx, "div", f32_literal(1.0), y)
            vb.append(recips[y])
        name = "mul"
    else:
        vb = _operand_values(cx, b, tb, rt, bcast, op)
    contract = bool(op.attrs.get("contract"))
    out = [from_f32(cx, combine(cx, name, x, y, contract), rt.dtype) for x, y in zip(va, vb, strict=True)]
    cx.set(op.result, Frag(rt, out))


rule(*(f"tk.{n}" for n in TILE_BINARY))(_binary)


def _operand_values(cx: LoweringContext, x: object, t, rt, bcast, op: Operation, raw: bool = False) -> list[str]:
    """f32 values of an operand (its own values with `raw`), one per slot of the result's layout."""
    n = cx.nslots(rt)
    if isinstance(t, ScalarType):
        assert isinstance(x, str)
        return [x if raw else to_f32(cx, x, t.dtype)] * n
    assert isinstance(x, Frag)
    vals = list(x.values) if raw else [to_f32(cx, v, t.dtype) for v in x.values]
    if type(t) is type(rt):
        return vals
    # a vector broadcast over the rows (bcast = row) or columns (col) of a tile
    axis = 0 if str(bcast) == "row" else 1
    tile_slots = numeric_slots(register_layout(rt), tile_shape(rt))
    vec_slots = numeric_slots(x.layout, tile_shape(t))
    out = []
    for ts in tile_slots:
        want = ts[axis]
        j = next((j for j, vs in enumerate(vec_slots) if np.array_equal(vs[0], want)), None)
        if j is None:  # the vector's layout does not pair with the tile's: exchange through shared memory
            return broadcast_through_shared(cx, x, vals, rt, axis, ints=raw and t.dtype in INT_DTYPES)
        out.append(vals[j])
    return out


def _unary_op(cx: LoweringContext, op: Operation) -> None:
    x = cx.get(op.operands[0])
    rt = op.result.type
    name = op.name.split(".")[1]
    if isinstance(rt, ScalarType):
        assert isinstance(x, str)
        cx.set(op.result, _unary(cx, name, x))
        return
    assert isinstance(x, Frag)
    if rt.dtype in INT_DTYPES and name == "neg":
        cx.set(op.result, Frag(rt, [cx.w.op(f"sub i32 0, {v}", "ng") for v in x.values]))
        return
    vals = [from_f32(cx, _unary(cx, name, to_f32(cx, v, rt.dtype)), rt.dtype) for v in x.values]
    cx.set(op.result, Frag(rt, vals))


# --- index tiles, comparisons, select ---------------------------------------------------------------


@rule("tk.index")
def index_tile(cx: LoweringContext, op: Operation) -> None:
    """Element (r, c) holds r (axis = row) or c: the slot coordinates of the layout themselves."""
    rt = op.result.type
    axis = 0 if str(op.attrs["axis"]) == "row" else 1
    cx.set(op.result, Frag(rt, [str(s[axis]) for s in cx.coords(rt)]))


# IEEE 754, as numpy and torch: a comparison with a NaN is false, except ne (fcmp une), which is true
FCMP = {"eq": "oeq", "ne": "une", "lt": "olt", "le": "ole", "gt": "ogt", "ge": "oge"}
ICMP = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}
UCMP = {"eq": "eq", "ne": "ne", "lt": "ult", "le": "ule", "gt": "ugt", "ge": "uge"}  # u32 compares unsigned


@rule("tk.cmp")
def compare(cx: LoweringContext, op: Operation) -> None:
    ta, tb = op.operands[0].type, op.operands[1].type
    rt = op.result.type
    like = ta if isinstance(ta, (TileType, VectorType)) else tb
    bcast = op.attrs.get("bcast")
    pred = str(op.attrs["pred"])
    dtype = like.dtype
    a, b = (cx.get(v) for v in op.operands)
    if dtype in INT_DTYPES:
        va, vb = (_operand_values(cx, x, t, rt, bcast, op, raw=True) for x, t in ((a, ta), (b, tb)))
        ipred = (UCMP if dtype == "u32" else ICMP)[pred]
        out = [cx.w.op(f"icmp {ipred} i32 {x}, {y}", "cmp") for x, y in zip(va, vb, strict=True)]
    else:
        va, vb = (_operand_values(cx, x, t, rt, bcast, op) for x, t in ((a, ta), (b, tb)))
        out = [cx.w.op(f"fcmp {FCMP[pred]} float {x}, {y}", "cmp") for x, y in zip(va, vb, strict=True)]
    cx.set(op.result, Frag(rt, out))


@rule("tk.select")
def select(cx: LoweringContext, op: Operation) -> None:
    c = cx.get(op.operands[0])
    rt = op.result.type
    ety = LLVM_TYPE[rt.dtype]
    n = cx.nslots(rt)
    picks = []
    for v in op.operands[1:]:
        x = cx.get(v)
        if isinstance(x, Frag):
            picks.append(list(x.values))
        elif rt.dtype in INT_DTYPES:
            picks.append([x] * n)
        else:
            picks.append([from_f32(cx, to_f32(cx, x, v.type.dtype), rt.dtype)] * n)
    out = [cx.w.op(f"select i1 {p}, {ety} {x}, {ety} {y}", "sel") for p, x, y in zip(c.values, *picks, strict=True)]
    cx.set(op.result, Frag(rt, out))


rule(*(f"tk.{n}" for n in TILE_UNARY))(_unary_op)

# --- masks -------------------------------------------------------------------------------------


@rule("tk.mask_causal")
def _op_tk_mask_causal(cx: LoweringContext, op: Operation) -> None:
    """Elements with col0 + c > row0 + r take `fill` (a key after the query is masked)."""
    x = cx.get(op.operands[0])
    assert isinstance(x, Frag)
    w = cx.w
    row0, col0 = (cx.scalar(v) for v in op.operands[1:])
    fill = f32_literal(op.attrs["fill"])
    if x.type.dtype != "f32":
        fill = from_f32(cx, fill, x.type.dtype)
    ety = LLVM_TYPE[x.type.dtype]
    delta = w.op(f"sub i32 {col0}, {row0}", "dlt")  # masked where c - r > row0 - col0
    out = []
    steps = cx.coord_steps(x.type)
    if steps is not None:
        # c - r = (c0 - r0) + k with a per-slot constant k: masked where t = c0 - r0 + delta > -k,
        # one compare with an immediate per slot (no per-slot coordinate kept live)
        r0, c0 = cx.coords(x.type)[0]
        d0 = c0 - r0 if isinstance(c0, int) and isinstance(r0, int) else w.op(f"sub i32 {c0}, {r0}", "cr")
        t = w.op(f"add i32 {d0}, {delta}", "cut")
        for (dr, dc), v in zip(steps, x.values, strict=True):
            masked = w.op(f"icmp sgt i32 {t}, {dr - dc}", "msk")
            out.append(w.op(f"select i1 {masked}, {ety} {fill}, {ety} {v}", "mk"))
        cx.set(op.result, Frag(op.result.type, out))
        return
    for (r, c), v in zip(cx.coords(x.type), x.values, strict=True):
        cr = w.op(f"sub i32 {c}, {r}", "cr") if not (isinstance(c, int) and isinstance(r, int)) else c - r
        masked = w.op(f"icmp sgt i32 {cr}, {w.op(f'sub i32 0, {delta}', 'nd')}", "msk")
        out.append(w.op(f"select i1 {masked}, {ety} {fill}, {ety} {v}", "mk"))
    cx.set(op.result, Frag(op.result.type, out))

# --- outer products --------------------------------------------------------------------------


@rule("tk.outer")
def outer_product(cx: LoweringContext, op: Operation) -> None:
    """r[i, p Cb + q] = a[i, p] b[i, q] (axis = row) or r[p Rb + q, j] = a[p, j] b[q, j] (axis = col),
    slot by slot of r's layout. Each factor comes from the thread's own slot, from a lane of its warp
    (shfl.sync.idx; 16-bit factors as packed pairs, one shuffle per pair; each distinct shuffle
    once), or, where backend.fragments.gather_plan finds neither, from a copy of the operand in the
    scratch area. The product is exact in f32 (16-bit factors) and rounded once to r's dtype, as the
    interpreter computes it."""
    a, b = (cx.get(v) for v in op.operands)
    assert isinstance(a, Frag) and isinstance(b, Frag)
    rt = op.result.type
    row = str(op.attrs["axis"]) == "row"
    threads = max(cx.role_threads(), register_layout(rt).threads)
    slots = numeric_slots(register_layout(rt), tile_shape(rt))
    tid = np.arange(threads)
    res = [tuple(np.asarray(x)[tid % x.shape[0]] for x in s) for s in slots]
    tb = b.type
    if row:
        need_a = [(r, c // tb.cols) for r, c in res]
        need_b = [(r, c % tb.cols) for r, c in res]
    else:
        need_a = [(r // tb.rows, c) for r, c in res]
        need_b = [(r % tb.rows, c) for r, c in res]
    va = _gather(cx, a, need_a, threads, op, row, a_side=True)
    vb = _gather(cx, b, need_b, threads, op, row, a_side=False)

    def product(i: int) -> str:
        x, y = va[i], vb[i]
        return from_f32(cx, combine(cx, "mul", to_f32(cx, x, rt.dtype), to_f32(cx, y, rt.dtype)), rt.dtype)

    if _feeds_next_mma(op):  # multiplied where the mma reads them (rules_wgmma: slice by slice)
        cx.set(op.result, Frag(rt, LazyValues(len(res), product)))
        return
    cx.set(op.result, Frag(rt, [product(i) for i in range(len(res))]))


def _feeds_next_mma(op: Operation) -> bool:
    """op's result is read once, as the register A operand of the next tk.mma of its block, with
    only constants (tk.fill, arith.const: the mma's zero accumulator) between: its values may be
    emitted inside that mma's lowering (same basic block, nothing reads them before)."""
    blk = op.parent
    if blk is None:
        return False
    i = blk.ops.index(op) + 1
    while i < len(blk.ops) and blk.ops[i].name in CONSTANT_OPS:
        i += 1
    nxt = blk.ops[i] if i < len(blk.ops) else None
    if nxt is None or nxt.name != "tk.mma" or nxt.operands[0] is not op.result:
        return False
    return sum(v is op.result for u in blk.ops for x in u.walk() for v in x.operands) == 1


CONSTANT_OPS = ("tk.fill", "arith.const")


def _gather(cx: LoweringContext, x: Frag, needed: list, threads: int, op: Operation, row: bool,
            a_side: bool) -> Sequence[str]:
    """The values of `x` at the `needed` (row, col) arrays of each result slot, for this thread: a
    lazy sequence, so a shuffle is emitted where its first reader is (in a sliced wgmma, with the
    slice that needs it); each distinct shuffle once."""
    plan = gather_plan(x.layout, tile_shape(x.type), needed, threads)
    if any(p is None for p in plan):
        return _gather_through_shared(cx, x, op, row, a_side)
    w = cx.w
    tid = cx.thread_index()
    lane = w.op(f"and i32 {tid}, 31", "lane")
    warp = w.op(f"lshr i32 {tid}, 5", "warp")
    shuffled: dict[tuple, str] = {}
    packed = dtype_bytes(x.type.dtype) == 2

    def by_warp(choices: tuple, make, linear: bool = False) -> str:
        """The warp's entry of `choices` (one per warp): make(c) when all agree, c0 + d * warp for
        `linear` integers in arithmetic progression, else a select chain."""
        d = choices[1] - choices[0] if linear and len(choices) > 1 else 0
        if d and all(c == choices[0] + d * i for i, c in enumerate(choices)):  # a lane base linear in the warp
            return w.op(f"add i32 {w.op(f'mul i32 {warp}, {d}', 'sw')}, {choices[0]}", "sb")
        made = {c: make(c) for c in dict.fromkeys(choices)}
        vals = [made[c] for c in choices]
        out = vals[-1]
        for wi in range(len(vals) - 2, -1, -1):
            if vals[wi] != out:
                out = w.op(f"select i1 {w.op(f'icmp eq i32 {warp}, {wi}', 'isw')}, i32 {vals[wi]}, i32 {out}", "bw")
        return out

    def pairs(ks: tuple) -> bool:
        """Move the 32-bit register holding the slot pair k & ~1, k | 1 (16-bit values whose half is
        the same in every warp), rather than the value alone."""
        return packed and len({k & 1 for k in ks}) == 1 and (max(ks) | 1) < len(x.values)

    def word(k: int, pair: bool) -> str:
        if pair:
            return _pack16(cx, x.values[k & ~1], x.values[k | 1], x.type.dtype)
        if x.type.dtype in INT_DTYPES:
            return x.values[k]
        return w.op(f"bitcast float {to_f32(cx, x.values[k], x.type.dtype)} to i32", "bw")

    def unword(got: str, half: int, pair: bool) -> str:
        if pair:
            return _unpack16(cx, got, x.type.dtype)[half]
        if x.type.dtype in INT_DTYPES:
            return got
        return from_f32(cx, w.op(f"bitcast i32 {got} to float", "fb"), x.type.dtype)

    def get(i: int) -> str:
        p = plan[i]
        if p[0] == "local":
            ks = p[1]
            if len(set(ks)) == 1:
                return x.values[ks[0]]
            pair = pairs(ks)
            return unword(by_warp(ks, lambda k: word(k, pair)), ks[0] & 1, pair)
        _, mask, ks, cs = p
        pair = pairs(ks)
        key = (tuple(k & ~1 for k in ks) if pair else ks, pair, mask, cs)
        if key not in shuffled:
            src = w.op(f"and i32 {lane}, {mask}", "sl") if mask else "0"
            src = w.op(f"or i32 {src}, {by_warp(cs, str, linear=True)}", "sl")
            shuffled[key] = shfl_idx(cx, by_warp(ks, lambda k: word(k, pair)), src)
        return unword(shuffled[key], ks[0] & 1, pair)

    return LazyValues(len(plan), get)


def _pack16(cx: LoweringContext, lo: str, hi: str, dtype: str) -> str:
    ety = LLVM_TYPE[dtype]
    v = cx.w.op(f"insertelement <2 x {ety}> poison, {ety} {lo}, i32 0", "pk")
    v = cx.w.op(f"insertelement <2 x {ety}> {v}, {ety} {hi}, i32 1", "pk")
    return cx.w.op(f"bitcast <2 x {ety}> {v} to i32", "pw")


def _unpack16(cx: LoweringContext, word: str, dtype: str) -> tuple[str, str]:
    ety = LLVM_TYPE[dtype]
    v = cx.w.op(f"bitcast i32 {word} to <2 x {ety}>", "up")
    return (cx.w.op(f"extractelement <2 x {ety}> {v}, i32 0", "e"),
            cx.w.op(f"extractelement <2 x {ety}> {v}, i32 1", "e"))


def _gather_through_shared(cx: LoweringContext, x: Frag, op: Operation, row: bool, a_side: bool) -> list[str]:
    """The operand goes to the scratch area as it is; every thread then reads the factor of each of
    its result slots (a layout gather_plan cannot pair with the result's: correct, not fast)."""
    buf = scratch_tile(cx, x.type)
    cx.sync()  # earlier users of the scratch area are done
    store_to_shared(cx, buf, x)
    cx.sync()
    tb = op.operands[1].type
    vals = []
    for r, c in cx.coords(op.result.type):
        if row:
            coord = (r, _idiv(cx, c, tb.cols) if a_side else _irem(cx, c, tb.cols))
        else:
            coord = (_idiv(cx, r, tb.rows) if a_side else _irem(cx, r, tb.rows), c)
        vals.append(load_element(cx, buf, coord))
    cx.sync()  # the scratch area may be reused right after
    return vals


def _idiv(cx: LoweringContext, v: object, n: int) -> object:
    return v // n if isinstance(v, int) else cx.w.op(f"udiv i32 {v}, {n}", "qd")


def _irem(cx: LoweringContext, v: object, n: int) -> object:
    return v % n if isinstance(v, int) else cx.w.op(f"urem i32 {v}, {n}", "qr")


# --- reductions ------------------------------------------------------------------------------


@rule("tk.reduce", when=lambda cx, op: str(op.attrs["axis"]) == "row")
def _op_tk_reduce(cx: LoweringContext, op: Operation) -> None:
    if cx.peek(op.result) is not None:  # a fused row mean / var, lowered with its partner (below)
        return
    x = cx.get(op.operands[0])
    assert isinstance(x, Frag)
    kind = str(op.attrs["kind"])
    group = op.attrs.get(STATS_ATTR)
    if kind in ARG_KINDS:
        _row_arg(cx, op, x, kind)
        return
    if kind == "var" or group is not None:
        _row_stats(cx, op, x, group)
        return
    fop = {"max": "max", "min": "min", "sum": "add", "mean": "add"}[kind]
    groups = _row_slot_groups(x)
    lanes, _ = row_groups(x.layout, tile_shape(x.type))
    partial = []
    for rows, members in groups:
        acc = to_f32(cx, x.values[members[0]], x.type.dtype)
        for m in members[1:]:
            acc = combine(cx, fop, acc, to_f32(cx, x.values[m], x.type.dtype))
        step = 1
        while step < lanes:
            acc = combine(cx, fop, acc, shfl_bfly_f32(cx, acc, step))
            step *= 2
        partial.append((rows, acc))
    if x.layout.kind == "row" and x.layout.nparts > 1:  # each warp holds part of its rows: combine them
        combined = combine_row_parts(cx, fop, _first_rows(cx, x, groups), [v for _, v in partial], x.type.rows,
                                     x.layout.nparts)
        partial = [(rows, v) for (rows, _), v in zip(partial, combined, strict=True)]
    if kind == "mean":
        inv = f32_literal(1.0 / x.type.cols)
        partial = [(rows, cx.w.op(f"fmul float {v}, {inv}", "mean")) for rows, v in partial]
    _set_row_result(cx, op, x, groups, partial)


def _row_arg(cx: LoweringContext, op: Operation, x: Frag, kind: str) -> None:
    """row_argmax / row_argmin: the column of each row's largest (smallest) element, the first on ties, a NaN
    counting as the extreme (the first NaN wins), as torch.argmax. Each thread merges the (f32 value, i32
    column) pairs of its slots of a row, the lanes that share the row merge theirs in a butterfly (shuffling
    both), the warps that split it through shared memory (combine_row_args). The merge is exact and
    commutative (ties go to the lower column), so the order of the merges does not change the result."""
    w = cx.w
    gt = "ogt" if kind == "argmax" else "olt"

    def better(a: str, ia: str, b: str, ib: str) -> tuple[str, str]:
        nan_b, nan_a = w.op(f"fcmp uno float {b}, {b}", "nb"), w.op(f"fcmp uno float {a}, {a}", "na")
        first = w.op(f"icmp slt i32 {ib}, {ia}", "lo")
        tie = w.op(f"and i1 {w.op(f'fcmp oeq float {b}, {a}', 'eq')}, {first}", "tie")
        num = w.op(f"or i1 {w.op(f'fcmp {gt} float {b}, {a}', 'gt')}, {tie}", "nw")  # false if either is NaN
        nan = w.op(f"or i1 {w.op(f'xor i1 {nan_a}, true', 'nn')}, {first}", "qw")  # b NaN: unless a is an earlier NaN
        wins = w.op(f"select i1 {nan_b}, i1 {nan}, i1 {num}", "win")
        return (w.op(f"select i1 {wins}, float {b}, float {a}", "av"),
                w.op(f"select i1 {wins}, i32 {ib}, i32 {ia}", "ai"))

    groups = _row_slot_groups(x)
    lanes, _ = row_groups(x.layout, tile_shape(x.type))
    coords = cx.coords(x.type)
    vals, idxs = [], []
    for _, members in groups:
        v, i = to_f32(cx, x.values[members[0]], x.type.dtype), str(coords[members[0]][1])
        for m in members[1:]:
            v, i = better(v, i, to_f32(cx, x.values[m], x.type.dtype), str(coords[m][1]))
        for k in range(lanes.bit_length() - 1):  # butterfly steps 1, 2, 4, ... below `lanes` (a power of 2)
            v, i = better(v, i, shfl_bfly_f32(cx, v, 1 << k), shfl_bfly_i32(cx, i, 1 << k))
        vals.append(v)
        idxs.append(i)
    if x.layout.kind == "row" and x.layout.nparts > 1:  # each warp holds part of its rows: merge them
        idxs = combine_row_args(cx, _first_rows(cx, x, groups), vals, idxs, x.type.rows, x.layout.nparts, better)
    rt = op.result.type
    out = []
    for vs in numeric_slots(register_layout(rt), tile_shape(rt)):
        hit = next((i for (rows, _), i in zip(groups, idxs, strict=True) if np.array_equal(rows, vs[0])), None)
        if hit is None:  # the result layout spreads the rows differently: exchange the columns' bits
            bits = [w.op(f"bitcast i32 {i} to float", "ib") for i in idxs]
            moved = gather_rows(cx, _first_rows(cx, x, groups), bits, x.type.rows, rt.with_dtype("f32"))
            cx.set(op.result, Frag(rt, [w.op(f"bitcast float {v} to i32", "ia") for v in moved.values]))
            return
        out.append(hit)
    cx.set(op.result, Frag(rt, out))


def _row_slot_groups(x: Frag) -> list[tuple[np.ndarray, list[int]]]:
    """The thread's slots of x grouped by the rows they hold: (rows, slot indices) per group."""
    groups: list[tuple[np.ndarray, list[int]]] = []
    for i, s in enumerate(numeric_slots(x.layout, tile_shape(x.type))):
        for rows, members in groups:
            if np.array_equal(rows, s[0]):
                members.append(i)
                break
        else:
            groups.append((s[0], [i]))
    return groups


def _first_rows(cx: LoweringContext, x: Frag, groups: list) -> list:
    coords = cx.coords(x.type)
    return [coords[members[0]][0] for _, members in groups]


def _set_row_result(cx: LoweringContext, op: Operation, x: Frag, groups: list, partial: list) -> None:
    """op's rv from (rows, f32 value) per slot group: read in place where the result layout holds the
    same rows in the same thread, else exchanged through shared memory (gather_rows)."""
    rt = op.result.type
    out = []
    for vs in numeric_slots(register_layout(rt), tile_shape(rt)):
        hit = next((v for rows, v in partial if np.array_equal(rows, vs[0])), None)
        if hit is None:  # the result layout spreads the rows differently: exchange through shared memory
            cx.set(op.result, gather_rows(cx, _first_rows(cx, x, groups), [v for _, v in partial], x.type.rows, rt))
            return
        out.append(from_f32(cx, hit, rt.dtype))
    cx.set(op.result, Frag(rt, out))


def _row_stats(cx: LoweringContext, op: Operation, x: Frag, group: object) -> None:
    """A row variance (kind var), or a row mean and variance of one operand grouped by fuse-row-stats
    (`stats = N`): both from one pass of Chan et al.'s pairwise update. Each thread takes the mean and
    the sum of squared deviations M2 of its own elements of a row (two passes over registers), the lanes
    that share the row merge theirs in a butterfly (equal counts n: d = m_b - m_a, m = m_a + d / 2,
    M2 = M2_a + M2_b + d^2 n / 2), and the warps that split the row merge theirs through shared memory
    in one exchange (backend.exchange.combine_row_stats). var = M2 / row length: the population variance,
    as layernorm wants. Stable where E[x^2] - E[x]^2 is not (a large mean): each thread's sums are
    shifted by its first element, the merges carry means and deviations."""
    w = cx.w
    groups = _row_slot_groups(x)
    lanes, _ = row_groups(x.layout, tile_shape(x.type))
    means, m2s = [], []
    count = len(groups[0][1])
    if any(len(m) != count for _, m in groups):  # every layout tkir makes holds whole rows evenly
        raise LoweringError(op.loc, "backend: a row mean/var over a layout whose threads hold unequal parts of "
                                    "their rows is not implemented")
    for _, members in groups:
        # one pass, shifted by the thread's first element k (the shifted-data algorithm: x - k is of the
        # order of the row's spread, so s2 - s1^2 / n keeps M2 where E[x^2] - E[x]^2 would not)
        vals = [to_f32(cx, x.values[m], x.type.dtype) for m in members]
        k = vals[0]
        s1 = s2 = None
        for v in vals[1:]:
            d = combine(cx, "sub", v, k)
            s1 = d if s1 is None else combine(cx, "add", s1, d)
            s2 = combine(cx, "mul", d, d) if s2 is None else cx.w.call(
                "float", "llvm.fma.f32", [("float", d), ("float", d), ("float", s2)], hint="s2")
        inv_n = f32_literal(1.0 / len(vals))
        if s1 is None:  # one element: its own mean, no spread
            mean, m2 = k, f32_literal(0.0)
        else:
            mean = combine(cx, "add", k, w.op(f"fmul float {s1}, {inv_n}", "s1n"))
            m2 = combine(cx, "sub", s2, w.op(f"fmul float {combine(cx, 'mul', s1, s1)}, {inv_n}", "s1q"))
        n, step = len(vals), 1
        while lanes > step:  # the lanes that share the row, as the sum's butterfly
            mo, m2o = shfl_bfly_f32(cx, mean, step), shfl_bfly_f32(cx, m2, step)
            d = combine(cx, "sub", mo, mean)
            mean = w.op(f"fadd float {mean}, {w.op(f'fmul float {d}, {f32_literal(0.5)}', 'hd')}", "wm")
            m2 = combine(cx, "add", combine(cx, "add", m2, m2o),
                         w.op(f"fmul float {combine(cx, 'mul', d, d)}, {f32_literal(n / 2)}", "dd"))
            n, step = 2 * n, 2 * step
        means.append(mean)
        m2s.append(m2)
    per_part = count * lanes
    if x.layout.kind == "row" and x.layout.nparts > 1:
        means, m2s = combine_row_stats(cx, _first_rows(cx, x, groups), means, m2s, x.type.rows, x.layout.nparts,
                                       per_part)
    inv = f32_literal(1.0 / x.type.cols)
    var = [(rows, w.op(f"fmul float {m2}, {inv}", "var")) for (rows, _), m2 in zip(groups, m2s, strict=True)]
    mean = [(rows, m) for (rows, _), m in zip(groups, means, strict=True)]
    members = [op] if group is None else [o for o in op.parent.ops
                                          if o.name == "tk.reduce" and o.attrs.get(STATS_ATTR) == group]
    for o in members:
        _set_row_result(cx, o, x, groups, var if str(o.attrs["kind"]) == "var" else mean)


# --- global memory ---------------------------------------------------------------------------


def _global_chunks(cx: LoweringContext, op: Operation, gl: Global, coords: list[str],
                   t) -> list[tuple[str, str, list[int]]]:
    """(element offset (i64), in-bounds i1, slots) per lane chunk (one vector access) of a row-layout
    tile/vector."""
    gty = gl.type
    lay = register_layout(t)
    kind = lay.kind
    if kind not in ("row", "col_vec"):
        raise LoweringError(op.loc, f"backend: global access of a '{kind}' register tile is not "
                                    "implemented yet")
    vec = lay.chunk
    if vector_access_bytes(lay, t.dtype) is None:
        raise LoweringError(op.loc, f"backend: chunks of {vec} x {t.dtype} are not 4, 8 or 16 bytes")
    w = cx.w
    dims = [cx.dim(d) for d in gty.dims]
    strides: list[str] = []
    acc = "1"
    for d in reversed(dims):  # row-major strides, in elements (i64)
        strides.insert(0, acc)
        acc = w.op(f"mul i64 {acc}, {cx.i64(d)}", "st") if acc != "1" else cx.i64(d)
    is_tile = isinstance(t, TileType)
    nlead = gty.rank - (2 if is_tile else 1)
    base = "0"
    for k in range(nlead):
        base = w.op(f"add i64 {base}, {w.op(f'mul i64 {cx.i64(coords[k])}, {strides[k]}', 'lo')}", "lb")
    slots = cx.coords(t)
    out = []
    # edge tests that can never fail are left out (tkir/bounds.py); the rest test every chunk
    proven = [p is not None for p in copy_edge_proofs(op, cx.kernel)]
    rows_in, cols_in = proven if is_tile else (False, proven[0])
    if is_tile:
        r0 = w.op(f"mul i32 {coords[nlead]}, {t.rows}", "r0")
        c0 = w.op(f"mul i32 {coords[nlead + 1]}, {t.cols}", "c0")
    else:
        c0 = w.op(f"mul i32 {coords[nlead]}, {t.n}", "c0")
    for first in range(0, len(slots), vec):
        s = slots[first]
        # a chunk starts at a multiple of vec and the launch requires rows of whole chunks
        # (tkir.requires), so a chunk is either wholly inside the tensor or wholly outside
        if is_tile:
            row = w.op(f"add i32 {r0}, {s[0]}", "row")
            col = w.op(f"add i32 {c0}, {s[1]}", "col")
            rok = "true" if rows_in else w.op(f"icmp slt i32 {row}, {dims[nlead]}", "ok")
            cok = "true" if cols_in else w.op(f"icmp slt i32 {col}, {dims[nlead + 1]}", "cok")
            ok = rok if cols_in else cok if rows_in else w.op(f"and i1 {rok}, {cok}", "ok")
            if rows_in:
                safe = row
            else:
                last = w.op(f"sub i32 {dims[nlead]}, 1", "last")
                safe = w.op(f"select i1 {rok}, i32 {row}, i32 {last}", "rowc")
            safe_col = col if cols_in else w.op(f"select i1 {cok}, i32 {col}, i32 0", "colc")
            off = w.op(f"mul i64 {cx.i64(safe)}, {strides[nlead]}", "ro")
            off = w.op(f"add i64 {off}, {cx.i64(safe_col)}", "off")
        else:
            col = w.op(f"add i32 {c0}, {s[0]}", "col")
            ok = "true" if cols_in else w.op(f"icmp slt i32 {col}, {dims[nlead]}", "ok")
            off = cx.i64(col if cols_in else w.op(f"select i1 {ok}, i32 {col}, i32 0", "colc"))
        off = w.op(f"add i64 {off}, {base}", "off")
        out.append((off, ok, list(range(first, first + vec))))
    return out


def _global_to_chunked_regs(cx: LoweringContext, op: Operation) -> bool:
    return bool(op.results) and isinstance(cx.peek(op.operands[0]), Global) and chunked(op.result.type)


def _chunked_regs_to_global(cx: LoweringContext, op: Operation) -> bool:
    # a reducing store (`reduce = "add"`) is rules_memory's: per-element red.global.add
    return isinstance(cx.peek(op.operands[0]), Global) and chunked(op.operands[1].type) \
        and REDUCE_ATTR not in op.attrs


@rule("tk.load", when=_global_to_chunked_regs)
def _op_tk_load(cx: LoweringContext, op: Operation) -> None:
    src = cx.get(op.operands[0])
    t = op.result.type
    w = cx.w
    coords = [cx.scalar(v) for v in op.operands[1:]]
    ety = LLVM_TYPE[t.dtype]
    align = vector_access_bytes(layout_of(t), t.dtype)
    vals: list[str] = [""] * cx.nslots(t)
    policy, nc = policy_of(cx, op), readonly_of(op)
    for off, ok, members in _global_chunks(cx, op, src, coords, t):
        p = w.op(f"getelementptr {ety}, ptr addrspace(1) {src.ptr}, i64 {off}", "p")
        vt = f"<{len(members)} x {ety}>"
        if policy is None and not nc:
            v = w.op(f"load {vt}, ptr addrspace(1) {p}, align {align}", "ld")
        else:  # an L2 cache hint (passes/cache_policy.py), the read-only path (passes/readonly_loads.py)
            v = hinted_load(cx, p, ety, len(members), dtype_bytes(t.dtype), policy, nc=nc)
        if ok != "true":  # zero outside, as TMA fills
            v = w.op(f"select i1 {ok}, {vt} {v}, {vt} zeroinitializer", "ldz")
        for k, m in enumerate(members):
            vals[m] = w.op(f"extractelement {vt} {v}, i32 {k}", "e")
    cx.set(op.result, Frag(t, vals))


@rule("tk.store", when=_chunked_regs_to_global)
def _op_tk_store(cx: LoweringContext, op: Operation) -> None:
    dst = cx.get(op.operands[0])
    val = cx.get(op.operands[1])
    w = cx.w
    t = val.type
    coords = [cx.scalar(v) for v in op.operands[2:]]
    ety = LLVM_TYPE[t.dtype]
    for off, ok, members in _global_chunks(cx, op, dst, coords, t):
        p = w.op(f"getelementptr {ety}, ptr addrspace(1) {dst.ptr}, i64 {off}", "p")
        vt = f"<{len(members)} x {ety}>"
        v = "poison"
        for k, m in enumerate(members):
            v = w.op(f"insertelement {vt} {v}, {ety} {val.values[m]}, i32 {k}", "iv")
        nwords = len(members) * dtype_bytes(t.dtype) // 4
        words = w.op(f"bitcast {vt} {v} to <{nwords} x i32>", "wd")
        regs = [w.op(f"extractelement <{nwords} x i32> {words}, i32 {k}", "r") for k in range(nwords)]
        # predicated on the chunk's edge test, unless it cannot fail (tkir/bounds.py)
        pred = [] if ok == "true" else [("i32", w.op(f"zext i1 {ok} to i32", "okz"))]
        first = 1 + len(pred)  # $0 is the address, then the predicate's operand, then the words
        lst = ", ".join(f"${k + first}" for k in range(nwords))
        st = f"st.global.v{nwords}.b32 [$0], {{{lst}}};" if nwords > 1 else f"st.global.b32 [$0], ${first};"
        lines = ["{", ".reg .pred p;", "setp.ne.b32 p, $1, 0;", f"@p {st}", "}"] if pred else [st]
        w.asm("void", lines, ["l"] + ["r"] * (len(pred) + nwords),
              [("ptr addrspace(1)", p), *pred] + [("i32", r) for r in regs])


# --- gathers -------------------------------------------------------------------------------------


@rule("tk.gather")
def gather_rows_from_global(cx: LoweringContext, op: Operation) -> None:
    """x = G[idx, c]: row r of x is row idx[r] of G's plane (the leading coordinates), columns
    c * C .. c * C + C - 1. Each thread reads its slots' row indices from the index vector (in the same
    thread where infer-layouts gave it the row vector layout of x, else through shared memory) and loads
    its lane chunks as a load of a `row` tile does (ld.global .b32/.v2/.v4; one element at a time in other
    layouts). A row index outside 0 .. rows - 1 (compared unsigned, so a negative one is outside too)
    reads zeros, as columns past the edge do; nothing is read there."""
    g = cx.get(op.operands[0])
    t = op.result.type
    w = cx.w
    gty = g.type
    coords = op.operands[1:]
    lead = [cx.scalar(v) for v in coords[:-2]]
    ids = _operand_values(cx, cx.get(coords[-2]), coords[-2].type, t, "row", op, raw=True)
    col_tile = cx.scalar(coords[-1])
    dims = [cx.dim(d) for d in gty.dims]
    stride, base = cx.i64(dims[-1]), "0"  # row-major: the plane's row pitch, then the leading dims'
    plane = w.op(f"mul i64 {stride}, {cx.i64(dims[-2])}", "pl")
    for k in reversed(range(len(lead))):
        base = w.op(f"add i64 {base}, {w.op(f'mul i64 {cx.i64(lead[k])}, {plane}', 'lo')}", "lb")
        if k:
            plane = w.op(f"mul i64 {plane}, {cx.i64(dims[k])}", "pl")
    cols_in = why_in_bounds(coords[-1], t.cols, gty.dims[-1], cx.kernel) is not None
    c0 = w.op(f"mul i32 {col_tile}, {t.cols}", "c0")
    ety = LLVM_TYPE[t.dtype]
    vec = register_layout(t).chunk if chunked(t) else 1
    align = vector_access_bytes(layout_of(t), t.dtype) if vec > 1 else dtype_bytes(t.dtype)
    nc = readonly_of(op)
    slots = cx.coords(t)
    vals: list[str] = [""] * len(slots)
    for first in range(0, len(slots), vec):
        row, s = ids[first], slots[first]
        rok = w.op(f"icmp ult i32 {row}, {dims[-2]}", "rok")
        col = w.op(f"add i32 {c0}, {s[1]}", "col")
        if cols_in:
            ok, safe_col = rok, col
        else:
            cok = w.op(f"icmp slt i32 {col}, {dims[-1]}", "cok")
            ok, safe_col = w.op(f"and i1 {rok}, {cok}", "ok"), w.op(f"select i1 {cok}, i32 {col}, i32 0", "colc")
        safe = w.op(f"select i1 {rok}, i32 {row}, i32 0", "rowc")
        off = w.op(f"add i64 {w.op(f'mul i64 {cx.i64(safe)}, {stride}', 'ro')}, {cx.i64(safe_col)}", "off")
        off = w.op(f"add i64 {off}, {base}", "off")
        p = w.op(f"getelementptr {ety}, ptr addrspace(1) {g.ptr}, i64 {off}", "p")
        vt = f"<{vec} x {ety}>"
        v = w.op(f"load {vt}, ptr addrspace(1) {p}, align {align}", "ld") if not nc else \
            hinted_load(cx, p, ety, vec, dtype_bytes(t.dtype), None, nc=nc)
        v = w.op(f"select i1 {ok}, {vt} {v}, {vt} zeroinitializer", "ldz")
        for k in range(vec):
            vals[first + k] = w.op(f"extractelement {vt} {v}, i32 {k}", "e")
    cx.set(op.result, Frag(t, vals))
