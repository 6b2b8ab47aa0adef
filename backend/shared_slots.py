"""A register value's slots in a shared tile: where each slot lives, and the ld/st.shared that move them.

Written once for every register layout with backend.fragments.slot_coords and every shared layout with
backend.fragments.shared_offset: each thread accesses its slots at the tile's physical offset (swizzle
or padding); runs of slots that are consecutive in shared memory for every thread (checked at compile
time with numpy) become one `ld/st.shared.v2/v4.b32`. No barriers: the caller decides. The rules of
backend.rules_memory and the exchanges of backend.exchange use it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tkir.backend.fragments import BitBuilder, BitLLVMBuilder, NumpyBuilder, numeric_slots, shared_offset, tile_shape
from tkir.backend.values import LLVM_TYPE, Frag, Smem, slot_layout
from tkir.layout import SharedLayout
from tkir.target import REG_BYTES as WORD
from tkir.types import TileType, VectorType, dtype_bytes

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext
    from tkir.backend.llvm_text import LLVMWriter

MAX_VECTOR_BYTES = 16     # ld/st.shared.v4.b32


# --- where each slot lives in shared memory -------------------------------------------------------


def physical(t: TileType | VectorType) -> SharedLayout | None:
    if isinstance(t, VectorType):
        return None
    return SharedLayout(t.dtype, t.rows, t.cols, int(t.get("swizzle") or 0), int(t.get("pad") or 0))


def element_offset(lay: SharedLayout | None, eb: int, coord: tuple, b: BitBuilder) -> object:
    if lay is None:  # a shared vector: plain elements
        return b.mul(coord[0], eb)
    return shared_offset(lay, coord[0], b.mul(coord[1], eb), b)


def _slot_plan(reg: TileType | VectorType, smem: TileType | VectorType, trans: bool) -> tuple[list, list]:
    """(numeric byte offsets per slot [array over threads], groups [(first slot, slots)]) for
    accessing the register value's slots in the shared tile (element (r, c) at smem (c, r) when
    `trans`). A group is a run of slots consecutive in shared memory for every thread, aligned to
    its size, of at most 16 bytes."""
    eb = dtype_bytes(reg.dtype)
    lay = physical(smem)
    slots = numeric_slots(slot_layout(reg), tile_shape(reg))
    nb = NumpyBuilder()
    offs = []
    for s in slots:
        coord = (s[1], s[0]) if trans else s
        offs.append(np.asarray(element_offset(lay, eb, coord, nb)))
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
    lay = physical(smem_t)
    coords = cx.coords(reg_t)

    def full(i: int) -> str:
        c = coords[i]
        coord = (c[1], c[0]) if trans else c
        return str(element_offset(lay, eb, coord, BitLLVMBuilder(w)))

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


def as_bits(w: LLVMWriter, v: str, dtype: str) -> str:
    """A value as an integer of its width (i16 for 16-bit floats, i8 for fp8 bytes, i32 otherwise)."""
    if LLVM_TYPE[dtype].startswith("i"):  # integers and fp8 bytes are integers already
        return v
    width = dtype_bytes(dtype) * 8
    return w.op(f"bitcast {LLVM_TYPE[dtype]} {v} to i{width}", "bt")


def from_bits(w: LLVMWriter, v: str, dtype: str) -> str:
    if LLVM_TYPE[dtype].startswith("i"):
        return v
    width = dtype_bytes(dtype) * 8
    return w.op(f"bitcast i{width} {v} to {LLVM_TYPE[dtype]}", "ub")


def _bits16(w: LLVMWriter, v: str, dtype: str) -> str:
    """A 16-bit or 8-bit element as an i16 (an fp8 byte zero-extended), for `st.shared.b16/b8`."""
    bits = as_bits(w, v, dtype)
    return w.op(f"zext i8 {bits} to i16", "bz") if dtype_bytes(dtype) == 1 else bits


def _from_bits16(w: LLVMWriter, h: str, dtype: str) -> str:
    if dtype_bytes(dtype) == 1:
        return from_bits(w, w.op(f"trunc i16 {h} to i8", "bt"), dtype)
    return from_bits(w, h, dtype)


def _words(w, vals: list[str], dtype: str) -> list[str]:
    eb = dtype_bytes(dtype)
    if eb == WORD:
        return [as_bits(w, v, dtype) for v in vals]
    ety, per = LLVM_TYPE[dtype], WORD // eb  # 2 16-bit or 4 8-bit elements a word
    out = []
    for i in range(0, len(vals), per):
        v = "poison"
        for j in range(per):
            v = w.op(f"insertelement <{per} x {ety}> {v}, {ety} {vals[i + j]}, i32 {j}", "pk")
        out.append(w.op(f"bitcast <{per} x {ety}> {v} to i32", "bits"))
    return out


def _unwords(w, words: list[str], dtype: str) -> list[str]:
    eb = dtype_bytes(dtype)
    if eb == WORD:
        return [from_bits(w, x, dtype) for x in words]
    ety, per = LLVM_TYPE[dtype], WORD // eb
    out = []
    for x in words:
        v = w.op(f"bitcast i32 {x} to <{per} x {ety}>", "up")
        out += [w.op(f"extractelement <{per} x {ety}> {v}, i32 {j}", "e") for j in range(per)]
    return out

# --- register <-> shared ---------------------------------------------------------------------------


def store_to_shared(cx: LoweringContext, smem: Smem, val: Frag, trans: bool = False) -> None:
    """Each thread writes its slots (no barriers: the caller decides)."""
    w = cx.w
    t = val.type
    offs, groups = _slot_plan(t, smem.type, trans)
    addrs = _group_addresses(cx, smem.addr, t, smem.type, trans, offs, groups)
    for (i, k), addr in zip(groups, addrs, strict=True):
        vals = val.values[i:i + k]
        if k * dtype_bytes(t.dtype) < WORD:  # one 16-bit or 8-bit element
            w.asm("void", [f"st.shared.b{8 * dtype_bytes(t.dtype)} [$0], $1;"], ["r", "h"],
                  [("i32", addr), ("i16", _bits16(w, vals[0], t.dtype))])
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
        if k * dtype_bytes(t.dtype) < WORD:  # one 16-bit or 8-bit element
            h = w.asm("i16", [f"ld.shared.b{8 * dtype_bytes(t.dtype)} $0, [$1];"], ["=h", "r"], [("i32", addr)], "lh")
            vals.append(_from_bits16(w, h, t.dtype))
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



def load_element(cx: LoweringContext, smem: Smem, coord: tuple) -> str:
    """One element of a shared tile at logical (row, col) (ints or i32 values), in its dtype."""
    w = cx.w
    t = smem.type
    eb = dtype_bytes(t.dtype)
    addr = w.op(f"add i32 {smem.addr}, {element_offset(physical(t), eb, coord, BitLLVMBuilder(w))}", "sa")
    if eb < WORD:  # 16-bit and 8-bit elements through a 16-bit register
        raw = w.asm("i16", [f"ld.shared.b{8 * eb} $0, [$1];"], ["=h", "r"], [("i32", addr)], "le")
        return _from_bits16(w, raw, t.dtype)
    raw = w.asm("i32", ["ld.shared.b32 $0, [$1];"], ["=r", "r"], [("i32", addr)], "le")
    return from_bits(w, raw, t.dtype)

