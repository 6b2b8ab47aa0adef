"""Lowering rules for copies between registers, shared and global memory in every register layout,
and for the register operations that go through shared memory (layout conversions, transposes,
column reductions).

Rules of backend.rules' table. They are the general case: where a specialised rule applies (16-byte
chunks of `row` tiles, accumulator stores, cp.async and TMA copies) its condition claims the op
first and these never see it. Everything is element by element, written once for all layouts with
backend.fragments.slot_coords, and grouped into vector accesses wherever the numbers allow it:

* register <-> shared (`tk.store %smem, %r`, `%r = tk.load %smem {trans}`): each thread accesses its
  slots at the tile's physical offset (swizzle or padding, backend.fragments.shared_offset); runs of
  slots that are consecutive in shared memory for every thread (checked at compile time with
  numpy) become one `ld/st.shared.v2/v4.b32`. A store is preceded by a barrier of the threads that
  run the code (they may still read the old contents) and followed by `fence.proxy.async` (sm_90a:
  wgmma and TMA read shared memory through the async proxy) and a second barrier.
* register <-> global in layouts without 16-byte chunks (accumulator-shaped vectors such as a bias,
  f32 accumulator tiles): scalar accesses, masked by the tensor's extent (loads read 0 outside it).
* shared -> global without TMA (`tk.store %G, %smem`): element-wise, masked.
* `tk.convert_layout` (via smem / shuffle), `tk.transpose`, column reductions: through a scratch
  area of shared memory after the kernel's planned allocations (`LoweringContext.scratch`); the
  launch's dynamic shared memory includes it.

Barriers: outside warp-specialized roles `bar.sync 0`; inside a role, named barrier ROLE_BARRIER
over the role's threads (ids 1 + warpgroup are the staged epilogue's, HOPPER.md §7).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tkir.backend.cache_policy import hinted_load, policy_of, readonly_of
from tkir.backend.fragments import BitLLVMBuilder, NumpyBuilder, numeric_slots, shared_offset, tile_shape
from tkir.backend.llvm_text import f32_literal
from tkir.backend.rules import rule
from tkir.backend.rules_registers import chunked, combine, from_f32, to_f32
from tkir.backend.values import LLVM_TYPE, Frag, Global, LoweringError, Smem, register_layout
from tkir.ir import Operation
from tkir.layout import SharedLayout
from tkir.target import REG_BYTES as WORD
from tkir.target import WARP as WARP_THREADS
from tkir.types import TileType, VectorType, dtype_bytes

if TYPE_CHECKING:
    from collections.abc import Callable

    from tkir.backend.context import LoweringContext

ROLE_BARRIER = 8          # named barrier for a role's threads (1..4: per-warpgroup epilogue barriers)
MAX_VECTOR_BYTES = 16     # ld/st.shared.v4.b32
SCRATCH_ALIGN = 128


# --- barriers -------------------------------------------------------------------------------------


def sync(cx: LoweringContext) -> None:
    """All threads that run this code meet: the block (`bar.sync 0`) or the role's warpgroups."""
    if cx.role is None:
        cx.w.call("void", "llvm.nvvm.barrier0", [])
        return
    cx.w.asm("void", [f"bar.sync {ROLE_BARRIER}, {cx.role.threads};"], [], [])


@rule("tk.fence")
def _op_tk_fence(cx: LoweringContext, op: Operation) -> None:
    """`fence.acq_rel.cta` (PTX ISA 6.0, sm_70+): ptxas issues every memory access before it first, so
    loads placed before it are not sunk below the code after it (passes/fence_loads.py)."""
    cx.w.asm("void", ["fence.acq_rel.cta;"], [], [])


def fence_async(cx: LoweringContext) -> None:
    """Generic-proxy shared writes become visible to wgmma and TMA (HOPPER.md §8.1)."""
    if cx.target == "sm_90a":
        cx.w.asm("void", ["fence.proxy.async.shared::cta;"], [], [])


# --- where each slot lives in shared memory -------------------------------------------------------


def _physical(t: TileType | VectorType) -> SharedLayout | None:
    if isinstance(t, VectorType):
        return None
    return SharedLayout(t.dtype, t.rows, t.cols, int(t.get("swizzle") or 0), int(t.get("pad") or 0))


def _offset(lay: SharedLayout | None, eb: int, coord: tuple, b) -> object:
    if lay is None:  # a shared vector: plain elements
        return b.mul(coord[0], eb)
    return shared_offset(lay, coord[0], b.mul(coord[1], eb), b)


def _slot_plan(reg: TileType | VectorType, smem: TileType | VectorType, trans: bool) -> tuple[list, list]:
    """(numeric byte offsets per slot [array over threads], groups [(first slot, slots)]) for
    accessing the register value's slots in the shared tile (element (r, c) at smem (c, r) when
    `trans`). A group is a run of slots consecutive in shared memory for every thread, aligned to
    its size, of at most 16 bytes."""
    eb = dtype_bytes(reg.dtype)
    lay = _physical(smem)
    slots = numeric_slots(register_layout(reg), tile_shape(reg))
    nb = NumpyBuilder()
    offs = []
    for s in slots:
        coord = (s[1], s[0]) if trans else s
        offs.append(np.asarray(_offset(lay, eb, coord, nb)))
    groups, i = [], 0
    while i < len(offs):
        k = MAX_VECTOR_BYTES // eb
        while k > 1:
            if i + k <= len(offs) and k * eb >= WORD and (offs[i] % (k * eb) == 0).all() \
                    and all((offs[i + j] == offs[i] + j * eb).all() for j in range(k)):
                break
            k //= 2
        groups.append((i, k))
        i += k
    return offs, groups


def _group_addresses(cx: LoweringContext, base: str, reg_t, smem_t, trans: bool, offs: list,
                     groups: list) -> list[str]:
    """The shared address of each group's first slot: one full offset computation, then a constant
    add or xor where that holds for every thread (as LoweringContext.shared_addresses does)."""
    w = cx.w
    eb = dtype_bytes(reg_t.dtype)
    lay = _physical(smem_t)
    coords = cx.coords(reg_t)

    def full(i: int) -> str:
        c = coords[i]
        coord = (c[1], c[0]) if trans else c
        return str(_offset(lay, eb, coord, BitLLVMBuilder(w)))

    ref_i = groups[0][0]
    ref = offs[ref_i]
    off0 = full(ref_i)
    base0 = w.op(f"add i32 {base}, {off0}", "sa")
    out = []
    for i, _ in groups:
        diff, flip = offs[i] - ref, offs[i] ^ ref
        if (diff == diff.flat[0]).all():
            d = int(diff.flat[0])
            out.append(base0 if d == 0 else w.op(f"add i32 {base0}, {d}", "sa"))
        elif (flip == flip.flat[0]).all():
            out.append(w.op(f"add i32 {base}, {w.op(f'xor i32 {off0}, {int(flip.flat[0])}', 'so')}", "sa"))
        else:
            out.append(w.op(f"add i32 {base}, {full(i)}", "sa"))
    return out


# --- packing register values into 32-bit words ----------------------------------------------------


def _bits(w, v: str, dtype: str) -> str:
    """A value as an integer of its width (i16 for 16-bit floats, i32 otherwise)."""
    if dtype in ("i32", "u32"):
        return v
    width = dtype_bytes(dtype) * 8
    return w.op(f"bitcast {LLVM_TYPE[dtype]} {v} to i{width}", "bt")


def _unbits(w, v: str, dtype: str) -> str:
    if dtype in ("i32", "u32"):
        return v
    width = dtype_bytes(dtype) * 8
    return w.op(f"bitcast i{width} {v} to {LLVM_TYPE[dtype]}", "ub")


def _words(w, vals: list[str], dtype: str) -> list[str]:
    eb = dtype_bytes(dtype)
    if eb == WORD:
        return [_bits(w, v, dtype) for v in vals]
    ety = LLVM_TYPE[dtype]
    out = []
    for i in range(0, len(vals), 2):
        v = w.op(f"insertelement <2 x {ety}> poison, {ety} {vals[i]}, i32 0", "pk")
        v = w.op(f"insertelement <2 x {ety}> {v}, {ety} {vals[i + 1]}, i32 1", "pk")
        out.append(w.op(f"bitcast <2 x {ety}> {v} to i32", "bits"))
    return out


def _unwords(w, words: list[str], dtype: str) -> list[str]:
    eb = dtype_bytes(dtype)
    if eb == WORD:
        return [_unbits(w, x, dtype) for x in words]
    ety = LLVM_TYPE[dtype]
    out = []
    for x in words:
        v = w.op(f"bitcast i32 {x} to <2 x {ety}>", "up")
        out += [w.op(f"extractelement <2 x {ety}> {v}, i32 {j}", "e") for j in range(2)]
    return out


def _check_dtype(op: Operation, t: TileType | VectorType) -> None:
    if dtype_bytes(t.dtype) not in (2, WORD) or t.dtype not in LLVM_TYPE:
        raise LoweringError(op.loc, f"backend: {t.dtype} values cannot be copied through memory")


# --- register <-> shared --------------------------------------------------------------------------


def store_to_shared(cx: LoweringContext, smem: Smem, val: Frag, trans: bool = False) -> None:
    """Each thread writes its slots (no barriers: the caller decides)."""
    w = cx.w
    t = val.type
    offs, groups = _slot_plan(t, smem.type, trans)
    addrs = _group_addresses(cx, smem.addr, t, smem.type, trans, offs, groups)
    for (i, k), addr in zip(groups, addrs, strict=True):
        vals = val.values[i:i + k]
        if k * dtype_bytes(t.dtype) < WORD:
            w.asm("void", ["st.shared.b16 [$0], $1;"], ["r", "h"], [("i32", addr), ("i16", _bits(w, vals[0], t.dtype))])
            continue
        words = _words(w, vals, t.dtype)
        n = len(words)
        vec = f".v{n}" if n > 1 else ""
        regs = ", ".join(f"${j + 1}" for j in range(n))
        w.asm("void", [f"st.shared{vec}.b32 [$0], {{{regs}}};" if n > 1 else "st.shared.b32 [$0], $1;"],
              ["r"] + ["r"] * n, [("i32", addr)] + [("i32", x) for x in words])


def load_from_shared(cx: LoweringContext, smem: Smem, t: TileType | VectorType, trans: bool = False) -> Frag:
    w = cx.w
    offs, groups = _slot_plan(t, smem.type, trans)
    addrs = _group_addresses(cx, smem.addr, t, smem.type, trans, offs, groups)
    vals: list[str] = []
    for (_i, k), addr in zip(groups, addrs, strict=True):
        if k * dtype_bytes(t.dtype) < WORD:
            h = w.asm("i16", ["ld.shared.b16 $0, [$1];"], ["=h", "r"], [("i32", addr)], "lh")
            vals.append(_unbits(w, h, t.dtype))
            continue
        n = k * dtype_bytes(t.dtype) // WORD
        if n == 1:
            words = [w.asm("i32", ["ld.shared.b32 $0, [$1];"], ["=r", "r"], [("i32", addr)], "lw")]
        else:
            ret = "{" + ", ".join(["i32"] * n) + "}"
            regs = ", ".join(f"${j}" for j in range(n))
            r = w.asm(ret, [f"ld.shared.v{n}.b32 {{{regs}}}, [${n}];"], ["=r"] * n + ["r"], [("i32", addr)], "lv")
            words = [w.op(f"extractvalue {ret} {r}, {j}", "lw") for j in range(n)]
        vals += _unwords(w, words, t.dtype)
    return Frag(t, vals)


def _regs_to_shared(cx: LoweringContext, op: Operation) -> bool:
    return isinstance(cx.peek(op.operands[0]), Smem) and isinstance(cx.peek(op.operands[1]), Frag)


@rule("tk.store", when=_regs_to_shared)
def store_registers_to_shared(cx: LoweringContext, op: Operation) -> None:
    smem, val = cx.get(op.operands[0]), cx.get(op.operands[1])
    _check_dtype(op, val.type)
    sync(cx)  # every thread is done reading the old contents
    store_to_shared(cx, smem, val)
    fence_async(cx)
    sync(cx)


def _shared_to_regs(cx: LoweringContext, op: Operation) -> bool:
    return bool(op.results) and isinstance(cx.peek(op.operands[0]), Smem)


@rule("tk.load", when=_shared_to_regs)
def load_registers_from_shared(cx: LoweringContext, op: Operation) -> None:
    t = op.result.type
    _check_dtype(op, t)
    cx.set(op.result, load_from_shared(cx, cx.get(op.operands[0]), t, bool(op.attrs.get("trans"))))


# --- register <-> global, element by element ------------------------------------------------------


def _element_index(cx: LoweringContext, g: Global, coords: list[str], t: TileType | VectorType,
                   slot: tuple) -> tuple[str, str]:
    """(i64 element index into the tensor, i1 in bounds) of one slot of a tile at tile coords."""
    w = cx.w
    dims = [cx.dim(d) for d in g.type.dims]
    is_tile = isinstance(t, TileType)
    nlead = g.type.rank - (2 if is_tile else 1)
    if is_tile:
        row = w.op(f"add i32 {w.op(f'mul i32 {coords[nlead]}, {t.rows}', 'r0')}, {slot[0]}", "row")
        col = w.op(f"add i32 {w.op(f'mul i32 {coords[nlead + 1]}, {t.cols}', 'c0')}, {slot[1]}", "col")
        ok = w.op(f"and i1 {w.op(f'icmp slt i32 {row}, {dims[nlead]}', 'rok')}, "
                  f"{w.op(f'icmp slt i32 {col}, {dims[nlead + 1]}', 'cok')}", "ok")
        idx = w.op(f"mul i64 {cx.i64(row)}, {cx.i64(dims[nlead + 1])}", "ix")
        idx = w.op(f"add i64 {idx}, {cx.i64(col)}", "ix")
        inner = [nlead, nlead + 1]
    else:
        col = w.op(f"add i32 {w.op(f'mul i32 {coords[nlead]}, {t.n}', 'c0')}, {slot[0]}", "col")
        ok = w.op(f"icmp slt i32 {col}, {dims[nlead]}", "ok")
        idx = cx.i64(col)
        inner = [nlead]
    stride = None
    for k in reversed(range(nlead)):  # leading plain indices
        stride = stride or _product(cx, [dims[i] for i in inner])
        idx = w.op(f"add i64 {idx}, {w.op(f'mul i64 {cx.i64(coords[k])}, {stride}', 'lo')}", "ix")
        stride = w.op(f"mul i64 {stride}, {cx.i64(dims[k])}", "st")
    return idx, ok


def _product(cx: LoweringContext, dims: list[str]) -> str:
    acc = cx.i64(dims[0])
    for d in dims[1:]:
        acc = cx.w.op(f"mul i64 {acc}, {cx.i64(d)}", "st")
    return acc


def _global_to_regs(cx: LoweringContext, op: Operation) -> bool:
    return bool(op.results) and isinstance(cx.peek(op.operands[0]), Global) and not chunked(op.result.type)


@rule("tk.load", when=_global_to_regs)
def load_registers_elementwise(cx: LoweringContext, op: Operation) -> None:
    g = cx.get(op.operands[0])
    t = op.result.type
    coords = [cx.scalar(v) for v in op.operands[1:]]
    ety = LLVM_TYPE[t.dtype]
    zero = "0" if t.dtype in ("i32", "u32") else from_f32(cx, f32_literal(0.0), t.dtype)
    vals = []
    policy = policy_of(cx, op)  # an L2 cache hint (passes/cache_policy.py), or None
    for slot in cx.coords(t):
        idx, ok = _element_index(cx, g, coords, t, slot)
        vals.append(_load_global_element(cx, g.ptr, ety, idx, ok, zero, policy, dtype_bytes(t.dtype),
                                         readonly_of(op)))
    cx.set(op.result, Frag(t, vals))


def _load_global_element(cx: LoweringContext, ptr: str, ety: str, idx: str, ok: str, zero: str,
                         policy: str | None = None, nbytes: int = 0, nc: str | None = None) -> str:
    """One element, or `zero` outside the tensor (the index is clamped: nothing is read out there);
    with `policy`, an L2 cache hint (backend/cache_policy.py) on a load of `nbytes`; with `nc`, through
    the read-only path (passes/readonly_loads.py)."""
    w = cx.w
    idx = w.op(f"select i1 {ok}, i64 {idx}, i64 0", "ix")
    p = w.op(f"getelementptr {ety}, ptr addrspace(1) {ptr}, i64 {idx}", "p")
    if policy is None and not nc:
        v = w.op(f"load {ety}, ptr addrspace(1) {p}", "ld")
    else:
        v = hinted_load(cx, p, ety, 1, nbytes, policy, vector=False, nc=nc)
    return w.op(f"select i1 {ok}, {ety} {v}, {ety} {zero}", "v")


def _store_global_element(cx: LoweringContext, ptr: str, ety: str, dtype: str, idx: str, ok: str, v: str) -> None:
    w = cx.w
    p = w.op(f"getelementptr {ety}, ptr addrspace(1) {ptr}, i64 {idx}", "p")
    okz = w.op(f"zext i1 {ok} to i32", "okz")
    if dtype_bytes(dtype) == 2:
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", "@p st.global.b16 [$0], $1;", "}"],
              ["l", "h", "r"], [("ptr addrspace(1)", p), ("i16", _bits(w, v, dtype)), ("i32", okz)])
    else:
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", "@p st.global.b32 [$0], $1;", "}"],
              ["l", "r", "r"], [("ptr addrspace(1)", p), ("i32", _bits(w, v, dtype)), ("i32", okz)])


def _regs_to_global(cx: LoweringContext, op: Operation) -> bool:
    val = cx.peek(op.operands[1])
    if not (isinstance(cx.peek(op.operands[0]), Global) and isinstance(val, Frag)) or chunked(val.type):
        return False
    # accumulator fragments in bf16 have their own rules (pairs of columns, rules_wgmma / rules_sm80)
    return not (val.kind in ("wgmma_acc", "mma_c") and val.type.dtype == "bf16")


@rule("tk.store", when=_regs_to_global)
def store_registers_elementwise(cx: LoweringContext, op: Operation) -> None:
    g, val = cx.get(op.operands[0]), cx.get(op.operands[1])
    _check_dtype(op, val.type)
    coords = [cx.scalar(v) for v in op.operands[2:]]
    ety = LLVM_TYPE[val.type.dtype]
    for slot, v in zip(cx.coords(val.type), val.values, strict=True):
        idx, ok = _element_index(cx, g, coords, val.type, slot)
        _store_global_element(cx, g.ptr, ety, val.type.dtype, idx, ok, v)


# --- shared -> global without TMA -------------------------------------------------------------------


def _shared_to_global(cx: LoweringContext, op: Operation) -> bool:
    """tk.store of a shared tile or vector; tma.store of a shared vector (TMA takes the tiles)."""
    src = op.operands[1].type
    return isinstance(cx.peek(op.operands[0]), Global) and isinstance(cx.peek(op.operands[1]), Smem) \
        and (op.name == "tk.store" or isinstance(src, VectorType))


@rule("tk.store", "tma.store", when=_shared_to_global)
def store_shared_to_global(cx: LoweringContext, op: Operation) -> None:
    """Every thread of the block (or role) copies elements e = tid + k * threads, row-major."""
    w = cx.w
    g, smem = cx.get(op.operands[0]), cx.get(op.operands[1])
    t = smem.type
    _check_dtype(op, t)
    coords = [cx.scalar(v) for v in op.operands[2:]]
    ety = LLVM_TYPE[t.dtype]
    eb = dtype_bytes(t.dtype)
    lay = _physical(t)
    n = t.rows * t.cols if isinstance(t, TileType) else t.n
    threads = cx.role_threads()
    tid = cx.thread_index()
    sync(cx)  # the tile's writers are done
    for k in range(-(-n // threads)):
        e = w.op(f"add i32 {tid}, {k * threads}", "e")
        slot = (w.op(f"udiv i32 {e}, {t.cols}", "r"), w.op(f"urem i32 {e}, {t.cols}", "c")) \
            if isinstance(t, TileType) else (e,)
        if isinstance(t, VectorType) and (k + 1) * threads > n:
            e_ok = w.op(f"icmp ult i32 {e}, {n}", "have")
            slot = (w.op(f"select i1 {e_ok}, i32 {e}, i32 0", "e"),)
        addr = w.op(f"add i32 {smem.addr}, {_offset(lay, eb, slot, BitLLVMBuilder(w))}", "sa")
        if eb == 2:
            v = _unbits(w, w.asm("i16", ["ld.shared.b16 $0, [$1];"], ["=h", "r"], [("i32", addr)], "lh"), t.dtype)
        else:
            v = _unbits(w, w.asm("i32", ["ld.shared.b32 $0, [$1];"], ["=r", "r"], [("i32", addr)], "lw"), t.dtype)
        idx, ok = _element_index(cx, g, coords, t, slot)
        if (k + 1) * threads > n:
            ok = w.op(f"and i1 {ok}, {w.op(f'icmp ult i32 {e}, {n}', 'have')}", "ok")
        _store_global_element(cx, g.ptr, ety, t.dtype, idx, ok, v)


# --- through a scratch area: layout conversions, transposes, column reductions ---------------------


def _scratch_tile(cx: LoweringContext, t: TileType | VectorType) -> Smem:
    """An unswizzled, 16-byte-padded shared tile of t's shape in the scratch area."""
    if isinstance(t, TileType):
        pad = 16 if (t.cols * dtype_bytes(t.dtype)) % 128 == 0 else 0  # spread rows over the banks
        st = TileType("st", t.dtype, t.rows, t.cols, (("pad", pad),))
        nbytes = t.rows * (t.cols * dtype_bytes(t.dtype) + pad)
    else:
        st = VectorType("sv", t.dtype, t.n)
        nbytes = t.n * dtype_bytes(t.dtype)
    return Smem(cx.scratch(nbytes), st)


def load_element(cx: LoweringContext, smem: Smem, coord: tuple) -> str:
    """One element of a shared tile at logical (row, col) (ints or i32 values), in its dtype."""
    w = cx.w
    t = smem.type
    eb = dtype_bytes(t.dtype)
    addr = w.op(f"add i32 {smem.addr}, {_offset(_physical(t), eb, coord, BitLLVMBuilder(w))}", "sa")
    width = "b16" if eb == 2 else "b32"
    out = "=h" if eb == 2 else "=r"
    bits = w.asm(f"i{8 * eb}", [f"ld.shared.{width} $0, [$1];"], [out, "r"], [("i32", addr)], "le")
    return _unbits(w, bits, t.dtype)


def relayout(cx: LoweringContext, x: Frag, rt: TileType | VectorType, trans: bool = False) -> Frag:
    """x's values in the layout of `rt` (transposed when asked), through the scratch area."""
    if dtype_bytes(x.type.dtype) not in (2, WORD):
        raise LoweringError(None, f"backend: {x.type.dtype} values cannot move through shared memory")
    buf = _scratch_tile(cx, x.type)
    sync(cx)  # earlier users of the scratch area are done
    store_to_shared(cx, buf, x)
    sync(cx)
    return load_from_shared(cx, buf, rt, trans)


@rule("tk.convert_layout", when=lambda cx, op: str(op.attrs.get("via", "none")) != "none")
def convert_layout_through_shared(cx: LoweringContext, op: Operation) -> None:
    cx.set(op.result, relayout(cx, cx.get(op.operands[0]), op.result.type))


@rule("tk.transpose")
def transpose_through_shared(cx: LoweringContext, op: Operation) -> None:
    """Element (r, c) of the result is x[c, r]: write x as it is, read its transpose."""
    cx.set(op.result, relayout(cx, cx.get(op.operands[0]), op.result.type, trans=True))


@rule("tk.reduce", when=lambda cx, op: str(op.attrs["axis"]) == "col")
def column_reduction(cx: LoweringContext, op: Operation) -> None:
    """The tile goes to the scratch area in f32; thread t folds columns t, t + threads, ... over
    all rows and writes each result to a scratch vector; every thread then reads the columns its
    result slots hold."""
    w = cx.w
    x = cx.get(op.operands[0])
    t, rt = x.type, op.result.type
    fop = {"max": "max", "min": "min", "sum": "add"}[str(op.attrs["kind"])]
    x32 = Frag(TileType("rt", "f32", t.rows, t.cols, t.attrs), [to_f32(cx, v, t.dtype) for v in x.values])
    pitch = t.cols * WORD + 16
    tile_bytes = t.rows * pitch
    base = cx.scratch(tile_bytes + t.cols * WORD)
    buf = Smem(base, TileType("st", "f32", t.rows, t.cols, (("pad", 16),)))
    vec = w.op(f"add i32 {base}, {tile_bytes}", "vec")
    sync(cx)
    store_to_shared(cx, buf, x32)
    sync(cx)
    threads, tid = cx.role_threads(), cx.thread_index()
    for k in range(-(-t.cols // threads)):
        c = w.op(f"add i32 {tid}, {k * threads}", "c")
        have = w.op(f"icmp ult i32 {c}, {t.cols}", "have")
        cc = w.op(f"select i1 {have}, i32 {c}, i32 0", "cc")
        col_addr = w.op(f"add i32 {base}, {w.op(f'shl i32 {cc}, 2', 'co')}", "ca")
        acc = None
        for r in range(t.rows):
            x_r = w.asm("float", ["ld.shared.f32 $0, [$1];"], ["=f", "r"],
                        [("i32", w.op(f"add i32 {col_addr}, {r * pitch}", "sa"))], "cv")
            acc = x_r if acc is None else combine(cx, fop, acc, x_r)
        dst = w.op(f"add i32 {vec}, {w.op(f'shl i32 {cc}, 2', 'vo')}", "va")
        flag = w.op(f"zext i1 {have} to i32", "h")
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", "@p st.shared.f32 [$0], $1;", "}"],
              ["r", "f", "r"], [("i32", dst), ("float", acc), ("i32", flag)])
    sync(cx)
    res = []
    for (j,) in cx.coords(rt):
        res.append(from_f32(cx, _ld_f32(w, _word_addr(w, vec, j), "rv"), rt.dtype))
    cx.set(op.result, Frag(rt, res))


def _word_addr(w, base: str, j: object) -> str:
    """The shared address of 32-bit word j (an int or an i32 value) of a scratch array at `base`."""
    off = str(WORD * j) if isinstance(j, int) else w.op(f"shl i32 {j}, 2", "o")
    return w.op(f"add i32 {base}, {off}", "sa")


def _st_f32(w, addr: str, v: str) -> None:
    w.asm("void", ["st.shared.f32 [$0], $1;"], ["r", "f"], [("i32", addr), ("float", v)])


def _ld_f32(w, addr: str, hint: str) -> str:
    return w.asm("float", ["ld.shared.f32 $0, [$1];"], ["=f", "r"], [("i32", addr)], hint)


def gather_rows(cx: LoweringContext, rows: list, values: list[str], n: int, rt: VectorType) -> Frag:
    """A vector in rt's layout from per-thread (row index, f32 value) pairs: every thread writes its
    pairs to a scratch vector of n floats (threads holding the same row write the same value),
    then reads the rows its result slots hold."""
    w = cx.w
    vec = cx.scratch(n * WORD)
    sync(cx)
    for r, v in zip(rows, values, strict=True):
        _st_f32(w, _word_addr(w, vec, r), v)
    sync(cx)
    res = [from_f32(cx, _ld_f32(w, _word_addr(w, vec, j), "rv"), rt.dtype) for (j,) in cx.coords(rt)]
    return Frag(rt, res)


def _spans_ctas(cx: LoweringContext, parts: int) -> bool:
    """Whether a row's `parts` warp parts lie in different CTAs of a cluster kernel (cluster-rows): the
    warps of a row group are `parts` consecutive warps, so they share a CTA when its warps are a
    multiple of `parts`."""
    return cx.cluster > 1 and (cx.cta_threads // WARP_THREADS) % parts != 0


def cluster_sync(cx: LoweringContext) -> None:
    """Every thread of the cluster's CTAs meets; shared-memory writes before it, remote ones included,
    are visible after it (PTX ISA 7.8, barrier.cluster: arrive has release, wait acquire semantics)."""
    cx.w.asm("void", ["barrier.cluster.arrive.release;", "barrier.cluster.wait.acquire;"], [], [])


def _exchange_sync(cx: LoweringContext, across: bool) -> None:
    cluster_sync(cx) if across else sync(cx)


def _st_f32_everywhere(cx: LoweringContext, addr: str, v: str, across: bool) -> None:
    """Store v at scratch address `addr` of this CTA, or (across) of every CTA of the cluster: mapa gives
    the address of the same offset in CTA r's shared memory (PTX ISA 7.8, sm_90)."""
    w = cx.w
    if not across:
        _st_f32(w, addr, v)
        return
    for r in range(cx.cluster):
        remote = w.asm("i32", ["mapa.shared::cluster.u32 $0, $1, $2;"], ["=r", "r", "r"],
                       [("i32", addr), ("i32", str(r))], "dsmem")
        w.asm("void", ["st.shared::cluster.f32 [$0], $1;"], ["r", "f"], [("i32", remote), ("float", v)])


def _exchange_row_values(cx: LoweringContext, rows: list, values: list[list[str]], nrows: int,
                         parts: int) -> Callable[[object, int, int], str]:
    """The exchange both row combines share: each thread writes the k f32 values (k = 1 or 2) of each of its
    rows (values[i] for rows[i]) to scratch[row][part][0..k) (the lanes that share
    a row write the same values), between barriers (the cluster's, with each value written to every
    CTA's scratch, where the parts span the CTAs of a cluster). Returns load(row, p, j): this thread's
    read of part p's value j of `row`, emitted where the caller asks, so each caller keeps its order."""
    w = cx.w
    k = len(values[0]) if values else 1
    if k not in (1, 2):
        raise LoweringError(None, f"backend: a row exchange of {k} values per row (1 or 2)")
    across = _spans_ctas(cx, parts)
    base = cx.scratch(nrows * parts * k * WORD, cluster_wide=True)
    warp = w.op(f"lshr i32 {cx.thread_index()}, 5", "warp")
    part = w.op(f"urem i32 {warp}, {parts}", "part")

    def slot(row: object, p: object, j: int) -> str:
        r = str(row * parts * k) if isinstance(row, int) else w.op(f"mul i32 {row}, {parts * k}", "rp")
        if k == 1:
            pk = p
        elif isinstance(p, int):
            pk = str(p * 2 + j)
        else:
            pk = w.op(f"add i32 {w.op(f'shl i32 {p}, 1', 'p2')}, {j}", "pk")
        return _word_addr(w, base, w.op(f"add i32 {r}, {pk}", "ri"))

    _exchange_sync(cx, across)  # earlier users of the scratch area are done
    for row, vs in zip(rows, values, strict=True):
        for j, v in enumerate(vs):
            _st_f32_everywhere(cx, slot(row, part, j), v, across)
    _exchange_sync(cx, across)
    names = ("rp",) if k == 1 else ("rm", "rq")
    return lambda row, p, j: _ld_f32(w, slot(row, p, j), names[j])


def combine_row_parts(cx: LoweringContext, fop: str, rows: list, partials: list[str], nrows: int,
                      parts: int) -> list[str]:
    """The whole-row results of a reduction over a `row` tile whose rows are split over `parts` warps
    (layout `parts`): every thread writes its f32 partial of each of its rows to scratch[row][part],
    and after a barrier reads the `parts` partials of its rows back and combines them in part order, so
    every warp of a row group holds the same result bit for bit (_exchange_row_values)."""
    load = _exchange_row_values(cx, rows, [[v] for v in partials], nrows, parts)
    out = []
    for row in rows:
        acc = None
        for p in range(parts):
            v = load(row, p, 0)
            acc = v if acc is None else combine(cx, fop, acc, v)
        out.append(acc)
    return out


def combine_row_stats(cx: LoweringContext, rows: list, means: list[str], m2s: list[str], nrows: int, parts: int,
                      n: int) -> tuple[list[str], list[str]]:
    """combine_row_parts for a row mean and M2 (rules_registers._row_stats): each warp part writes its
    (mean, M2) of `n` elements per row to scratch[row][part], and after one barrier every thread merges
    the `parts` pairs in part order (equal counts: mean = the parts' mean, M2 = sum M2_p + n sum
    (m_p - mean)^2), so every warp of a row group holds the same bits."""
    w = cx.w
    load = _exchange_row_values(cx, rows, [[m, m2] for m, m2 in zip(means, m2s, strict=True)], nrows, parts)
    out_m, out_m2 = [], []
    for row in rows:
        ms = [load(row, p, 0) for p in range(parts)]
        qs = [load(row, p, 1) for p in range(parts)]
        total = ms[0]
        for v in ms[1:]:
            total = combine(cx, "add", total, v)
        mean = w.op(f"fmul float {total}, {f32_literal(1.0 / parts)}", "pm")
        m2 = qs[0]
        for v in qs[1:]:
            m2 = combine(cx, "add", m2, v)
        dev = None
        for v in ms:
            d = combine(cx, "sub", v, mean)
            dev = combine(cx, "mul", d, d) if dev is None else combine(cx, "add", dev, combine(cx, "mul", d, d))
        out_m.append(mean)
        out_m2.append(combine(cx, "add", m2, w.op(f"fmul float {dev}, {f32_literal(float(n))}", "pq")))
    return out_m, out_m2


# --- global -> shared vectors ---------------------------------------------------------------------


def _global_to_shared_vector(cx: LoweringContext, op: Operation) -> bool:
    return not op.results and isinstance(op.operands[0].type, VectorType) \
        and isinstance(cx.peek(op.operands[0]), Smem) and isinstance(cx.peek(op.operands[1]), Global)


@rule("tk.load", "tma.load", when=_global_to_shared_vector)
def load_shared_vector(cx: LoweringContext, op: Operation) -> None:
    """Thread t copies elements t, t + threads, ... (zero past the tensor's end), between barriers."""
    w = cx.w
    smem, g = cx.get(op.operands[0]), cx.get(op.operands[1])
    t = smem.type
    _check_dtype(op, t)
    coords = [cx.scalar(v) for v in op.operands[2:]]
    ety = LLVM_TYPE[t.dtype]
    eb = dtype_bytes(t.dtype)
    zero = from_f32(cx, f32_literal(0.0), t.dtype)
    threads, tid = cx.role_threads(), cx.thread_index()
    sync(cx)  # readers of the old contents are done
    for k in range(-(-t.n // threads)):
        e = w.op(f"add i32 {tid}, {k * threads}", "e")
        have = w.op(f"icmp ult i32 {e}, {t.n}", "have")
        e = w.op(f"select i1 {have}, i32 {e}, i32 0", "e")
        idx, ok = _element_index(cx, g, coords, t, (e,))
        v = _load_global_element(cx, g.ptr, ety, idx, ok, zero)
        addr = w.op(f"add i32 {smem.addr}, {w.op(f'mul i32 {e}, {eb}', 'o')}", "sa")
        bits = _bits(w, v, t.dtype)
        flag = w.op(f"zext i1 {have} to i32", "h")
        width = "b16" if eb == 2 else "b32"
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", f"@p st.shared.{width} [$0], $1;", "}"],
              ["r", "h" if eb == 2 else "r", "r"], [("i32", addr), (f"i{8 * eb}", bits), ("i32", flag)])
    fence_async(cx)
    sync(cx)


def broadcast_through_shared(cx: LoweringContext, x: Frag, vals: list[str], rt: TileType, axis: int,
                             ints: bool = False) -> list[str]:
    """The vector value for every slot of tile type rt (its row for axis 0, its column for axis 1),
    when the vector's layout does not hold it in the same thread: the vector's values (32-bit,
    as given in `vals`) go to a scratch vector, each thread reads the entries its slots need (one
    load per distinct index)."""
    w = cx.w
    n = x.type.n
    vec = cx.scratch(n * WORD)
    sync(cx)
    for (j,), v in zip(cx.coords(x.type), vals, strict=True):
        addr = _word_addr(w, vec, j)
        word = v if ints else _bits(w, v, "f32")
        w.asm("void", ["st.shared.b32 [$0], $1;"], ["r", "r"], [("i32", addr), ("i32", word)])
    sync(cx)
    num = numeric_slots(register_layout(rt), tile_shape(rt))
    seen: list[tuple[np.ndarray, str]] = []
    out = []
    for slot, ts in zip(cx.coords(rt), num, strict=True):
        hit = next((v for key, v in seen if np.array_equal(key, ts[axis])), None)
        if hit is None:
            j = slot[axis]
            addr = _word_addr(w, vec, j)
            hit = w.asm("i32", ["ld.shared.b32 $0, [$1];"], ["=r", "r"], [("i32", addr)], "bv") if ints \
                else _ld_f32(w, addr, "bv")
            seen.append((ts[axis], hit))
        out.append(hit)
    sync(cx)  # the scratch vector may be reused right after
    return out
