"""Ops of the TMA level (written by the `create-tma` pass, read by `pipeline`, the backend, the interpreter).

    tma.desc @A_tma {tensor = "A", param = 0, dtype = "bf16", rank = 2, dims = ["K", "M"],
                     strides = ["K * 2"], box = [64, 128], elem_strides = [1, 1], swizzle = 128,
                     l2_promotion = 128, oob_fill = "zero"}
    tma.load %a, %A, %bx, %k {desc = @A_tma, boxes = 1, bytes = 16384}        global -> shared
    tma.store %C, %c_smem, %bx, %by {desc = @C_tma, boxes = 4, bytes = 65536} shared -> global

`tma.desc` is a module-level descriptor spec, exactly what `cuTensorMapEncodeTiled` takes (HOPPER.md
§4.1): `dims` innermost first, `strides` in bytes (rank-1 entries, innermost first), `box` innermost
first, sizes as ints where fixed and as `tkir.symexpr` strings of the kernel's sizes otherwise; `param`
is the position of the `gl` parameter it describes in the kernel's parameter list. `swizzle` is in
bytes (0/32/64/128), `l2_promotion` in bytes (0/64/128/256), `oob_fill` "zero" (or "nan":
NAN_REQUEST_ZERO_FMA).

`tma.load`/`tma.store` take the same operands as the `tk.load`/`tk.store` they replace (coordinates
in tile units). A tile wider than its swizzle span is `boxes` boxes, one per column panel of the
shared tile (panel p at byte offset p * rows * span, global column p * box[0]); `bytes` is the whole
tile (what `mbarrier.expect_tx` counts; out-of-bounds elements are filled and still counted).
For the interpreter they mean exactly the tk op they replaced (tkir/interp/tma.py). A `tma.store` with
`reduce = "add"` (a reducing `tk.store`, tkir/opdef.py) is a TMA reduce-add into an f32 tensor.

The staged stores live here too: `tk.store_staged` (create-tma: a wgmma accumulator through a staging
tile and TMA stores) and `tk.store_warp_staged` (stage-epilogue, the mma.sync path: each warp writes
`rows` rows of its `mma_c` accumulator block into its own rows of the staging tile, reads them back
16 bytes a lane and stores them to global 16 bytes a lane):

    tk.store_warp_staged %C, %v, %C_stage, %bx, %by {rows = 16}
"""

from __future__ import annotations

from tkir.ir import Operation
from tkir.opdef import REDUCE_ATTR, expect, is_int_scalar, n_results, reduce_problem, register_op
from tkir.target import (
    TMA_INNER_BYTES_ALIGN,
    TMA_MAX_BOX,
    TMA_MAX_ELEM_STRIDE,
    TMA_MAX_RANK,
    TMA_MAX_STRIDE,
    TMA_STRIDE_ALIGN,
)
from tkir.types import DTYPE_BYTES, GlobalType, Symbol, TileType, VectorType, is_shared

# cuTensorMapEncodeTiled's enumerations, in bytes (the limits are in tkir/target.py)
TMA_SWIZZLES = (0, 32, 64, 128)        # SWIZZLE_NONE/32B/64B/128B, in bytes
TMA_L2_PROMOTIONS = (0, 64, 128, 256)  # L2_PROMOTION_NONE/64B/128B/256B, in bytes
TMA_OOB_FILLS = ("zero", "nan")


def _int_list(v: object, n: int, what: str) -> list[int]:
    expect(isinstance(v, list) and len(v) == n and all(isinstance(x, int) for x in v),
           f"'tma.desc' {what} must be a list of {n} ints, got {v}")
    return v  # type: ignore[return-value]


def _size_list(v: object, n: int, what: str) -> list[int | str]:
    expect(isinstance(v, list) and len(v) == n and all(isinstance(x, (int, str)) for x in v),
           f"'tma.desc' {what} must be a list of {n} ints or size expressions, got {v}")
    return v  # type: ignore[return-value]


def _desc(op: Operation) -> None:
    expect(op.symbol is not None, "'tma.desc' needs a name: tma.desc @name")
    expect(not op.operands and not op.results and not op.regions, "'tma.desc' has no operands or results")
    a = op.attrs
    expect(isinstance(a.get("tensor"), str), "'tma.desc' needs tensor = \"name\"")
    expect(isinstance(a.get("param"), int) and a["param"] >= 0, "'tma.desc' needs param = <index>")
    dtype = a.get("dtype")
    expect(dtype in DTYPE_BYTES, f"'tma.desc' has an unknown dtype {dtype!r}")
    rank = a.get("rank")
    expect(isinstance(rank, int) and 1 <= rank <= TMA_MAX_RANK, f"'tma.desc' rank must be 1..5, got {rank}")
    _size_list(a.get("dims"), rank, "dims")
    strides = _size_list(a.get("strides"), rank - 1, "strides")
    box = _int_list(a.get("box"), rank, "box")
    elem = _int_list(a.get("elem_strides"), rank, "elem_strides")
    swizzle = a.get("swizzle")
    expect(swizzle in TMA_SWIZZLES, f"'tma.desc' swizzle must be 0, 32, 64 or 128 bytes, got {swizzle}")
    expect(a.get("l2_promotion") in TMA_L2_PROMOTIONS, "'tma.desc' l2_promotion must be 0, 64, 128 or 256")
    expect(a.get("oob_fill") in TMA_OOB_FILLS, "'tma.desc' oob_fill must be \"zero\" or \"nan\"")
    for i, b in enumerate(box):
        expect(1 <= b <= TMA_MAX_BOX, f"'tma.desc' box dim {i} is {b}, TMA allows 1..{TMA_MAX_BOX}")
    for e in elem:
        expect(1 <= e <= TMA_MAX_ELEM_STRIDE, f"'tma.desc' element strides must be 1..8, got {e}")
    inner = box[0] * DTYPE_BYTES[dtype]
    expect(inner % TMA_INNER_BYTES_ALIGN == 0,
           f"'tma.desc' inner box is {inner} B, not a multiple of {TMA_INNER_BYTES_ALIGN} B")
    expect(swizzle == 0 or inner <= swizzle,
           f"'tma.desc' inner box is {inner} B, wider than the {swizzle} B swizzle span")
    for i, s in enumerate(strides):
        if isinstance(s, int):
            expect(s % TMA_STRIDE_ALIGN == 0 and 0 < s < TMA_MAX_STRIDE,
                   f"'tma.desc' stride {i + 1} is {s} B, TMA needs a positive multiple of 16 B below 2^40")


def _copy(op: Operation) -> None:
    n_results(op, 0)
    load = op.name == "tma.load"
    expect(len(op.operands) >= 3, f"'{op.name}' needs {'dst, src' if load else 'dst, value'} and coordinates")
    g_val, s_val = (op.operands[1], op.operands[0]) if load else (op.operands[0], op.operands[1])
    g, s = g_val.type, s_val.type
    expect(isinstance(g, GlobalType), f"'{op.name}' global operand must be a gl, got {g}")
    expect(is_shared(s), f"'{op.name}' shared operand must be an st or sv, got {s}")
    coords = op.operands[2:]
    expect(len(coords) == g.rank, f"'{op.name}' needs {g.rank} coordinates for {g}, got {len(coords)}")
    expect(all(is_int_scalar(c.type) for c in coords), f"'{op.name}' coordinates must be i32")
    expect(g.dtype == s.dtype, f"'{op.name}': dtype mismatch, {g} and {s}")
    expect(not load or REDUCE_ATTR not in op.attrs, "'tma.load' has no reduce (a reducing copy writes global memory)")
    problem = reduce_problem(op, g, s)
    expect(problem is None, lambda: str(problem))
    expect(g.rank >= (2 if isinstance(s, TileType) else 1), f"'{op.name}': {s} needs a deeper {g}")
    expect(isinstance(op.attrs.get("desc"), Symbol), f"'{op.name}' needs desc = @name")
    boxes = op.attrs.get("boxes")
    expect(isinstance(boxes, int) and boxes >= 1, f"'{op.name}' needs boxes = N >= 1")
    nbytes = s.nbytes if isinstance(s, (TileType, VectorType)) else 0
    expect(op.attrs.get("bytes") == nbytes, f"'{op.name}' bytes must be the tile's {nbytes} B")


def _store_staged(op: Operation) -> None:
    n_results(op, 0)
    expect(len(op.operands) >= 5, "'tk.store_staged' needs dst, value, staging tile and coordinates")
    expect(REDUCE_ATTR not in op.attrs, "'tk.store_staged' overwrites (bf16 tiles); a reducing store stays "
           "tk.store or becomes tma.store")
    g, v, st = (x.type for x in op.operands[:3])
    coords = op.operands[3:]
    expect(isinstance(g, GlobalType), f"'tk.store_staged' writes a gl, not {g}")
    expect(isinstance(v, TileType) and v.space == "rt", f"'tk.store_staged' stores an rt, not {v}")
    expect(isinstance(st, TileType) and st.space == "st" and st.dtype == v.dtype == g.dtype,
           f"'tk.store_staged' stages {v} through {st} into {g}: dtypes must agree")
    expect(st.rows == v.rows and v.cols % st.cols == 0,
           f"'tk.store_staged': {st} must have the rows of {v} and divide its columns")
    expect(len(coords) == g.rank and all(is_int_scalar(c.type) for c in coords),
           f"'tk.store_staged' needs {g.rank} i32 coordinates")
    expect(isinstance(op.attrs.get("desc"), Symbol), "'tk.store_staged' needs desc = @name")
    chunk, buffers = op.attrs.get("chunk_cols"), op.attrs.get("buffers", 1)
    expect(chunk is None or (isinstance(chunk, int) and isinstance(buffers, int) and chunk * buffers == st.cols),
           f"'tk.store_staged': chunk_cols x buffers must be the staging tile's {st.cols} columns")


def _store_warp_staged(op: Operation) -> None:
    n_results(op, 0)
    expect(len(op.operands) >= 5, "'tk.store_warp_staged' needs dst, value, staging tile and coordinates")
    expect(REDUCE_ATTR not in op.attrs, "'tk.store_warp_staged' overwrites (bf16 tiles); a reducing store stays "
           "tk.store or becomes tma.store")
    g, v, st = (x.type for x in op.operands[:3])
    coords = op.operands[3:]
    expect(isinstance(g, GlobalType) and g.rank >= 2, f"'tk.store_warp_staged' writes a gl of rank >= 2, not {g}")
    expect(isinstance(v, TileType) and v.space == "rt", f"'tk.store_warp_staged' stores an rt, not {v}")
    expect(isinstance(st, TileType) and st.space == "st" and st.dtype == v.dtype == g.dtype,
           f"'tk.store_warp_staged' stages {v} through {st} into {g}: dtypes must agree")
    rows = op.attrs.get("rows")
    expect(isinstance(rows, int) and rows > 0 and st.rows % rows == 0,
           f"'tk.store_warp_staged' needs rows = N dividing the staging tile's {st.rows} rows")
    expect(len(coords) == g.rank and all(is_int_scalar(c.type) for c in coords),
           f"'tk.store_warp_staged' needs {g.rank} i32 coordinates")


register_op("tma.desc", _desc, pure=False, summary="a TMA descriptor spec (cuTensorMapEncodeTiled arguments)")
register_op("tma.load", _copy, pure=False, summary="TMA copy global -> shared (one box per column panel)")
register_op("tma.store", _copy, pure=False, summary="TMA copy shared -> global (one box per column panel)")
register_op("tk.store_staged", _store_staged, pure=False,
            summary="register tile -> global through a shared staging tile and TMA stores, in column chunks")
register_op("tk.store_warp_staged", _store_warp_staged, pure=False,
            summary="mma_c register tile -> global through per-warp rows of a shared tile, 16-byte stores")
