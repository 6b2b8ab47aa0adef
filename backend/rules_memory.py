"""Lowering rules for copies between registers, shared and global memory in every register layout,
and for the register operations that go through shared memory (layout conversions, transposes,
column reductions).

Rules of backend.rules' table. They are the general case: where a specialised rule applies (16-byte
chunks of `row` tiles, accumulator stores, cp.async and TMA copies) its condition claims the op
first and these never see it. Everything is element by element, written once for all layouts with
backend.fragments.slot_coords, and grouped into vector accesses wherever the numbers allow it:

* register <-> shared (`tk.store %smem, %r`, `%r = tk.load %smem {trans}`): each thread accesses its
  slots at the tile's physical offset (backend.shared_slots: swizzle or padding, vector accesses where
  the slots are consecutive for every thread). A store is preceded by a barrier of the threads that
  run the code (they may still read the old contents) and followed by the async-proxy fence (sm_90a:
  wgmma and TMA read shared memory through the async proxy) and a second barrier.
* register <-> global in layouts without 16-byte chunks (accumulator-shaped vectors such as a bias,
  f32 accumulator tiles): scalar accesses, masked by the tensor's extent (loads read 0 outside it).
* shared -> global without TMA (`tk.store %G, %smem`): element-wise, masked.
* `tk.convert_layout` (via smem / shuffle), `tk.transpose`, column reductions: through a scratch
  area of shared memory after the kernel's planned allocations (`LoweringContext.scratch`,
  backend.exchange); the launch's dynamic shared memory includes it.

Barriers: `LoweringContext.sync`, the block barrier outside warp-specialized roles and inside a role
the role's named barrier (backend.idioms.NAMED_BARRIERS).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tkir.backend.cache_policy import hinted_load, policy_of, readonly_of
from tkir.backend.exchange import scratch_tile
from tkir.backend.f32 import combine, from_f32, to_f32
from tkir.backend.fragments import BitLLVMBuilder, chunked, is_fp8_a_conversion
from tkir.backend.idioms import fence_acq_rel
from tkir.backend.llvm_text import f32_literal
from tkir.backend.rules import rule
from tkir.backend.shared_slots import (
    as_bits,
    element_offset,
    from_bits,
    load_from_shared,
    physical,
    store_to_shared,
)
from tkir.backend.values import LLVM_TYPE, Frag, Global, LoweringError, Smem, register_layout
from tkir.ir import Operation
from tkir.layout import column_scratch_pad
from tkir.opdef import RED_VEC_ATTR, RED_VEC_ELEMS, REDUCE_ATTR
from tkir.target import REG_BYTES as WORD
from tkir.target import WARP
from tkir.types import TileType, VectorType, dtype_bytes

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext


@rule("tk.fence")
def _op_tk_fence(cx: LoweringContext, op: Operation) -> None:
    """`fence.acq_rel.cta` (PTX ISA 6.0, sm_70+): ptxas issues every memory access before it first, so
    loads placed before it are not sunk below the code after it (passes/fence_loads.py)."""
    fence_acq_rel(cx.w, "cta")


def _check_dtype(op: Operation, t: TileType | VectorType) -> None:
    if dtype_bytes(t.dtype) not in (1, 2, WORD) or t.dtype not in LLVM_TYPE:
        raise LoweringError(op.loc, f"backend: {t.dtype} values cannot be copied through memory")

# --- register <-> shared --------------------------------------------------------------------------


def _regs_to_shared(cx: LoweringContext, op: Operation) -> bool:
    return isinstance(cx.peek(op.operands[0]), Smem) and isinstance(cx.peek(op.operands[1]), Frag)


@rule("tk.store", when=_regs_to_shared)
def store_registers_to_shared(cx: LoweringContext, op: Operation) -> None:
    smem, val = cx.get(op.operands[0]), cx.get(op.operands[1])
    _check_dtype(op, val.type)
    if id(op.operands[0]) in cx.deferred_bulk_reads:  # a reduce-add's staging tile: its last read done first
        cx.wait_for_bulk_reads()
    cx.sync()  # every thread is done reading the old contents (and the copy engine, above)
    store_to_shared(cx, smem, val)
    cx.fence_async()
    cx.sync()


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


def _store_global_element(cx: LoweringContext, ptr: str, ety: str, dtype: str, idx: str, ok: str, v: str,
                          reduce: object = None) -> None:
    """Store one element where `ok`; with `reduce = "add"` (an f32, tkir/opdef.py REDUCE_DTYPES) add it with
    `red.global.add.f32` (PTX ISA "red": sm_20 and later, so both targets), never a plain store."""
    w = cx.w
    p = w.op(f"getelementptr {ety}, ptr addrspace(1) {ptr}, i64 {idx}", "p")
    okz = w.op(f"zext i1 {ok} to i32", "okz")
    if reduce is not None:
        if str(reduce) != "add" or dtype != "f32":
            raise LoweringError(None, f"backend: reduce = \"{reduce}\" of {dtype} values (red.global.add.f32 only)")
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", "@p red.global.add.f32 [$0], $1;", "}"],
              ["l", "f", "r"], [("ptr addrspace(1)", p), ("float", v), ("i32", okz)])
        return
    if dtype_bytes(dtype) == 1:  # an fp8 byte, from a 16-bit register
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", "@p st.global.b8 [$0], $1;", "}"],
              ["l", "h", "r"], [("ptr addrspace(1)", p), ("i16", w.op(f"zext i8 {v} to i16", "bz")), ("i32", okz)])
    elif dtype_bytes(dtype) == 2:
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", "@p st.global.b16 [$0], $1;", "}"],
              ["l", "h", "r"], [("ptr addrspace(1)", p), ("i16", as_bits(w, v, dtype)), ("i32", okz)])
    else:
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", "@p st.global.b32 [$0], $1;", "}"],
              ["l", "r", "r"], [("ptr addrspace(1)", p), ("i32", as_bits(w, v, dtype)), ("i32", okz)])


def _regs_to_global(cx: LoweringContext, op: Operation) -> bool:
    val = cx.peek(op.operands[1])
    if not (isinstance(cx.peek(op.operands[0]), Global) and isinstance(val, Frag)):
        return False
    if chunked(val.type):  # rules_registers' 16-byte chunks, but for a reducing store (red per element)
        return REDUCE_ATTR in op.attrs
    # accumulator fragments in bf16 have their own rules (pairs of columns, rules_wgmma / rules_sm80)
    return not (val.kind in ("wgmma_acc", "mma_c") and val.type.dtype == "bf16")


@rule("tk.store", when=_regs_to_global)
def store_registers_elementwise(cx: LoweringContext, op: Operation) -> None:
    g, val = cx.get(op.operands[0]), cx.get(op.operands[1])
    _check_dtype(op, val.type)
    coords = [cx.scalar(v) for v in op.operands[2:]]
    reduce = op.attrs.get(REDUCE_ATTR)
    owners = cx.owner_masks(val.type) if reduce is not None else [None] * len(val.values)
    if op.attrs.get(RED_VEC_ATTR):
        _red_vectors(cx, g, coords, val, owners)
        return
    for slot, v, own in zip(cx.coords(val.type), val.values, owners, strict=True):
        _store_owned_element(cx, g, coords, val.type, slot, v, own, reduce)


def _store_owned_element(cx: LoweringContext, g: Global, coords: list[str], t: TileType | VectorType, slot: tuple,
                         v: str, own: object, reduce: object) -> None:
    """One element of a register value stored (or added, `reduce`) where in bounds; with `own` (a reducing store's
    owner mask), only by its owner: an element several threads hold is added once."""
    idx, ok = _element_index(cx, g, coords, t, slot)
    if own is not None:
        ok = cx.w.op(f"and i1 {ok}, {_owner_flag(cx, own)}", "own")
    _store_global_element(cx, g.ptr, LLVM_TYPE[t.dtype], t.dtype, idx, ok, v, reduce)


def _red_vectors(cx: LoweringContext, g: Global, coords: list[str], val: Frag, owners: list) -> None:
    """A reducing store with `red_vec = 4` (passes/vector_red.py): each four consecutive elements of a lane chunk
    added with one `red.global.add.v4.f32` (PTX ISA 8.1, sm_90), at the first element's index and in-bounds test
    (the launch requires rows of whole 16-byte pieces: a group is wholly inside or outside), by their owner where
    several threads hold them; a group whose four elements have different owners is added element by element."""
    w = cx.w
    slots = cx.coords(val.type)
    n = RED_VEC_ELEMS
    for first in range(0, len(slots), n):
        group = range(first, first + n)
        own = owners[first]
        same = all((owners[i] is None) == (own is None) and (own is None or np.array_equal(owners[i], own))
                   for i in group)
        if not same:
            for i in group:
                _store_owned_element(cx, g, coords, val.type, slots[i], val.values[i], owners[i], "add")
            continue
        idx, ok = _element_index(cx, g, coords, val.type, slots[first])
        if own is not None:
            ok = w.op(f"and i1 {ok}, {_owner_flag(cx, own)}", "own")
        p = w.op(f"getelementptr float, ptr addrspace(1) {g.ptr}, i64 {idx}", "p")
        okz = w.op(f"zext i1 {ok} to i32", "okz")
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $5, 0;",
                       "@p red.global.add.v4.f32 [$0], {$1, $2, $3, $4};", "}"],
              ["l", "f", "f", "f", "f", "r"],
              [("ptr addrspace(1)", p), *[("float", val.values[i]) for i in group], ("i32", okz)])


def _owner_flag(cx: LoweringContext, own: object) -> str:
    """i1: this thread's bit of `own` (a bool per thread of the role, LoweringContext.owner_masks), from one
    32-bit constant per warp."""
    w = cx.w
    tid = cx.thread_index()
    words = [sum(1 << lane for lane in range(WARP) if own[wp * WARP + lane]) for wp in range(len(own) // WARP)]
    words = [x - (1 << 32) if x >= 1 << 31 else x for x in words]  # i32 literals are signed
    word = str(words[0])
    if len(set(words)) > 1:
        warp = w.op(f"lshr i32 {tid}, {WARP.bit_length() - 1}", "warp")
        for wp in range(1, len(words)):
            word = w.op(f"select i1 {w.op(f'icmp eq i32 {warp}, {wp}', 'isw')}, i32 {words[wp]}, i32 {word}", "ow")
    bits = w.op(f"lshr i32 {word}, {w.op(f'and i32 {tid}, {WARP - 1}', 'lane')}", "ob")
    return w.op(f"trunc i32 {bits} to i1", "owner")


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
    lay = physical(t)
    n = t.rows * t.cols if isinstance(t, TileType) else t.n
    threads = cx.role_threads()
    tid = cx.thread_index()
    cx.sync()  # the tile's writers are done
    for k in range(-(-n // threads)):
        e = w.op(f"add i32 {tid}, {k * threads}", "e")
        slot = (w.op(f"udiv i32 {e}, {t.cols}", "r"), w.op(f"urem i32 {e}, {t.cols}", "c")) \
            if isinstance(t, TileType) else (e,)
        if isinstance(t, VectorType) and (k + 1) * threads > n:
            e_ok = w.op(f"icmp ult i32 {e}, {n}", "have")
            slot = (w.op(f"select i1 {e_ok}, i32 {e}, i32 0", "e"),)
        addr = w.op(f"add i32 {smem.addr}, {element_offset(lay, eb, slot, BitLLVMBuilder(w))}", "sa")
        if eb < WORD:  # 16-bit and 8-bit elements through a 16-bit register
            h = w.asm("i16", [f"ld.shared.b{8 * eb} $0, [$1];"], ["=h", "r"], [("i32", addr)], "lh")
            v = from_bits(w, w.op(f"trunc i16 {h} to i8", "lb") if eb == 1 else h, t.dtype)
        else:
            v = from_bits(w, w.asm("i32", ["ld.shared.b32 $0, [$1];"], ["=r", "r"], [("i32", addr)], "lw"), t.dtype)
        idx, ok = _element_index(cx, g, coords, t, slot)
        if (k + 1) * threads > n:
            ok = w.op(f"and i1 {ok}, {w.op(f'icmp ult i32 {e}, {n}', 'have')}", "ok")
        _store_global_element(cx, g.ptr, ety, t.dtype, idx, ok, v, op.attrs.get(REDUCE_ATTR))


# --- through a scratch area: layout conversions, transposes, column reductions ---------------------


def relayout(cx: LoweringContext, x: Frag, rt: TileType | VectorType, trans: bool = False) -> Frag:
    """x's values in the layout of `rt` (transposed when asked), through the scratch area."""
    if dtype_bytes(x.type.dtype) not in (1, 2, WORD):
        raise LoweringError(None, f"backend: {x.type.dtype} values cannot move through shared memory")
    buf = scratch_tile(cx, x.type)
    cx.sync()  # earlier users of the scratch area are done
    store_to_shared(cx, buf, x)
    cx.sync()
    return load_from_shared(cx, buf, rt, trans)


@rule("tk.convert_layout", when=lambda cx, op: str(op.attrs.get("via", "none")) != "none"
      and not (cx.target == "sm_90a" and is_fp8_a_conversion(op.operands[0].type, op.result.type)))
def convert_layout_through_shared(cx: LoweringContext, op: Operation) -> None:
    cx.set(op.result, relayout(cx, cx.get(op.operands[0]), op.result.type))


@rule("tk.transpose")
def transpose_through_shared(cx: LoweringContext, op: Operation) -> None:
    """Element (r, c) of the result is x[c, r]: write x as it is, read its transpose."""
    cx.set(op.result, relayout(cx, cx.get(op.operands[0]), op.result.type, trans=True))


@rule("tk.reduce", when=lambda cx, op: str(op.attrs["axis"]) == "col")
def column_reduction(cx: LoweringContext, op: Operation) -> None:
    """The tile goes to the scratch area in f32 (rows padded by tkir.layout.column_scratch_pad, which the
    bank-conflicts report lists with the same model); thread t folds columns t, t + threads, ... over
    all rows and writes each result to a scratch vector; every thread then reads the columns its
    result slots hold."""
    w = cx.w
    x = cx.get(op.operands[0])
    t, rt = x.type, op.result.type
    fop = {"max": "max", "min": "min", "sum": "add"}[str(op.attrs["kind"])]
    x32 = Frag(TileType("rt", "f32", t.rows, t.cols, t.attrs), [to_f32(cx, v, t.dtype) for v in x.values])
    pad = column_scratch_pad(register_layout(t), t.rows, t.cols)  # the bank model's conflict-free store
    pitch = t.cols * WORD + pad
    tile_bytes = t.rows * pitch
    base = cx.scratch(tile_bytes + t.cols * WORD)
    buf = Smem(base, TileType("st", "f32", t.rows, t.cols, (("pad", pad),)))
    vec = w.op(f"add i32 {base}, {tile_bytes}", "vec")
    cx.sync()
    store_to_shared(cx, buf, x32)
    cx.sync()
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
    cx.sync()
    # read back as any sv -> rv load (16- and 8-byte groups where a thread's slots are consecutive), the
    # accesses tkir.layout.vector_read_accesses predicts
    sums = load_from_shared(cx, Smem(vec, VectorType("sv", "f32", rt.n)), VectorType("rv", "f32", rt.n, rt.attrs))
    cx.set(op.result, Frag(rt, [from_f32(cx, v, rt.dtype) for v in sums.values]))


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
    zero = "0" if t.dtype in ("i32", "u32") else from_f32(cx, f32_literal(0.0), t.dtype)
    threads, tid = cx.role_threads(), cx.thread_index()
    cx.sync()  # readers of the old contents are done
    for k in range(-(-t.n // threads)):
        e = w.op(f"add i32 {tid}, {k * threads}", "e")
        have = w.op(f"icmp ult i32 {e}, {t.n}", "have")
        e = w.op(f"select i1 {have}, i32 {e}, i32 0", "e")
        idx, ok = _element_index(cx, g, coords, t, (e,))
        v = _load_global_element(cx, g.ptr, ety, idx, ok, zero)
        addr = w.op(f"add i32 {smem.addr}, {w.op(f'mul i32 {e}, {eb}', 'o')}", "sa")
        bits = as_bits(w, v, t.dtype)
        if eb == 1:  # an fp8 byte, from a 16-bit register
            bits = w.op(f"zext i8 {bits} to i16", "bz")
        flag = w.op(f"zext i1 {have} to i32", "h")
        width = f"b{8 * eb}"
        w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $2, 0;", f"@p st.shared.{width} [$0], $1;", "}"],
              ["r", "h" if eb < WORD else "r", "r"], [("i32", addr), (f"i{max(8 * eb, 16)}", bits), ("i32", flag)])
    cx.fence_async()
    cx.sync()
