"""The run-time conditions a kernel refuses to run without: the launch description's `requires`.

    module_requires(module) -> [{"expr": "M % 128", "equals": 0, "why": "..."}, ...]
    requirement_failure("gemm", req, {"M": 200, ...}) -> the message, or None if it holds

An analysis of the tile IR after the passes. The backend writes the list into the launch description
(tkir.backend.launch), the runtime checks it before a launch, and the interpreter checks it before
a run, with the same message (`requirement_failure`), so a kernel the GPU would refuse is refused
in both.

A size used as a tiled dim must be a multiple of the tile when the grid or a loop bound floors it
(`M / 128`: the last partial tile would not be computed), or when a copy of that dim does not go
through TMA (only TMA fills out-of-bounds elements and clips stores, so partial edge tiles work
there); byte strides of TMA tensors must be multiples of 16 B (HOPPER.md §4.1). Sizes are
`tkir.symexpr` expressions of the kernel's size names.
"""

from __future__ import annotations

import ast
import math

from tkir import symexpr
from tkir.facts import FactError
from tkir.ir import Module, Operation, Value
from tkir.layout import LAYOUT_ATTR, RegisterLayout, layout_of, vector_access_bytes
from tkir.opdef import RED_VEC_ATTR
from tkir.target import CP_ASYNC_BYTES, TMA_STRIDE_ALIGN
from tkir.types import DTYPE_BYTES, GlobalType, TileType, VectorType, is_size_name


def module_requires(module: Module) -> list[dict]:
    """The `requires` list of the module's kernel (what the launch description writes)."""
    return kernel_requires(module.kernel, [op for op in module.ops if op.name == "tma.desc"])


def requirement_failure(kernel: str, req: dict, sizes: dict[str, int]) -> str | None:
    """The message for a `requires` entry that the sizes break (None if it holds); the runtime's
    LaunchError and the interpreter's InterpError say the same thing."""
    got = symexpr.evaluate(req["expr"], sizes)
    if got == req["equals"]:
        return None
    shown = ", ".join(f"{n} = {sizes[n]}" for n in sorted(symexpr.names(req["expr"])) if n in sizes)
    return (f"{kernel}: {req.get('why', 'requirement failed')} "
            f"({req['expr']} is {got}, must be {req['equals']}; {shown})")


def kernel_requires(kernel: Operation, descs: list[Operation]) -> list[dict]:
    """The `requires` list of a kernel whose TMA descriptors are `descs` (the module's `tma.desc` ops)."""
    req: dict[str, list[str]] = {}

    def need(expr: str, why: str) -> None:
        whys = req.setdefault(expr, [])
        if why not in whys:
            whys.append(why)

    divided: dict[tuple[str, str, str], list[str]] = {}  # (dim, numerator, divisor) -> "argument 'K' dim 1"
    for a in kernel.body.args:
        if isinstance(a.type, GlobalType):
            for axis, d in a.type.dim_exprs:
                for num, div in _exact_divs(d):
                    divided.setdefault((d, num, div), []).append(f"'{a.name}' dim {axis}")
    for (d, num, div), where in divided.items():
        need(f"{_operand(num)} % {div}", f"argument {', '.join(where)} {'is' if len(where) == 1 else 'are'} {d}: "
                                         f"{num} must be a multiple of {div}")
    for d, g in enumerate(kernel.attrs["grid"]):
        for size, tile in _floor_divs(str(g)):  # anywhere in it: persistent grids count tiles in products
            need(f"{size} % {tile}", f"grid dim {d} counts {size} / {tile} tiles: a partial last tile would not "
                                     "be computed")
    for op in kernel.walk():
        if op.name == "scf.for":
            for size, tile in _floor_div_values(op.operands[1]):
                need(f"{size} % {tile}", f"loop bound {size} / {tile} floors: a partial last tile is skipped")
        try:
            copy = _plain_copy(op)
            if copy is not None:
                _register_layout(copy[1])  # read once here, where a malformed one can be located
        except FactError as e:  # a malformed layout in hand-written IR: located at the op
            raise FactError(e.loc or op.loc, e.message) from None
        if copy is not None:
            g, tile = copy
            extents = (tile.rows, tile.cols) if isinstance(tile, TileType) else (tile.n,)
            for i, (dim, ext) in enumerate(zip(g.type.dims[-len(extents):], extents, strict=True)):
                if isinstance(dim, str) and ext > 1 and not _masked(tile, i):
                    need(f"{_operand(dim)} % {ext}", f"%{g.name} is copied without TMA, and the backend masks only "
                                           "the rows of register tiles (and both dims of accumulators)")
            last = g.type.dims[-1]
            cb = _chunk_bytes(tile, op)
            if cb and isinstance(last, str):
                need(f"({_operand(last)} * {DTYPE_BYTES[g.type.dtype]}) % {cb}",
                     f"%{g.name} is copied to or from registers in {cb}-byte vector accesses: its "
                     f"rows must start {cb}-byte aligned")
            if _shared_tile(tile, op) and isinstance(last, str):
                need(f"({_operand(last)} * {DTYPE_BYTES[g.type.dtype]}) % {CP_ASYNC_BYTES}",
                     f"%{g.name} is copied to shared memory in {CP_ASYNC_BYTES}-byte cp.async chunks: its rows "
                     f"must start {CP_ASYNC_BYTES}-byte aligned")
    for desc in descs:
        for s in desc.attrs["strides"]:
            if isinstance(s, str):
                need(f"({s}) % {TMA_STRIDE_ALIGN}",
                     f"TMA ({desc.symbol}): byte strides of {desc.attrs['tensor']} must be multiples of 16")
    return [{"expr": e, "equals": 0, "why": "; ".join(w)} for e, w in req.items()]


def module_alignments(module: Module) -> list[dict]:
    """The `aligned` list of the module's kernel (what the launch description writes)."""
    return kernel_alignments(module.kernel)


def kernel_alignments(kernel: Operation) -> list[dict]:
    """[{"tensor": name, "bytes": 16, "why": ...}] for each tensor the kernel reads or writes in vector
    pieces without TMA: shared tiles filled with cp.async (16-byte source chunks) and register tiles in
    4-, 8- or 16-byte vector accesses (ld/st.global .b32/.v2/.v4). Both need the tensor's base address
    aligned to the widest piece, as its row pitch is (`kernel_requires`): a contiguous view that starts
    one element into a buffer passes every other check and would fault. TMA tensors have their own
    check (the `tma` list)."""
    out: dict[str, list[str]] = {}
    widest: dict[str, int] = {}
    for op in kernel.walk():
        try:
            copy = _plain_copy(op)
        except FactError:
            continue  # located by kernel_requires, which runs first
        if copy is None:
            continue
        g, tile = copy
        if _shared_tile(tile, op):
            nbytes, why = CP_ASYNC_BYTES, f"copied to shared memory in {CP_ASYNC_BYTES}-byte cp.async chunks"
        elif cb := _chunk_bytes(tile, op):
            nbytes, why = cb, f"copied to or from registers in {cb}-byte vector accesses"
        else:
            continue
        whys = out.setdefault(g.name, [])
        if why not in whys:
            whys.append(why)
        widest[g.name] = max(widest.get(g.name, 0), nbytes)
    return [{"tensor": name, "bytes": widest[name], "why": " and ".join(w)} for name, w in out.items()]


def row_piece_tensors(kernel: Operation, descs: list[Operation] = ()) -> dict[str, int]:
    """{tensor: bytes} for each tensor the kernel copies to or from registers in 4-, 8- or 16-byte vector
    pieces (`row` / `col_vec` layouts) and in no piece of another kind (cp.async chunks, a TMA descriptor
    among `descs`): the tensors whose rows the same kernel with narrower pieces (infer-layouts{max_vec_bytes=B})
    copies at any alignment of B bytes. The launch description lists them (`unaligned`); the launch and
    tkir.interpret take that variant for rows these pieces do not fit (`unaligned_piece`)."""
    widest: dict[str, int] = {}
    other = {str(d.attrs.get("tensor")) for d in descs}
    for op in kernel.walk():
        try:
            copy = _plain_copy(op)
        except FactError:
            continue  # located by kernel_requires
        if copy is None:
            continue
        g, tile = copy
        if _shared_tile(tile, op):
            other.add(g.name)
        elif cb := _chunk_bytes(tile, op):
            widest[g.name] = max(widest.get(g.name, 0), cb)
    return {name: b for name, b in widest.items() if name not in other}


def unaligned_piece(pieces: dict[str, int], tensors: dict[str, tuple[int, tuple[int, ...], tuple[int, ...], int]]
                    ) -> int | None:
    """The piece (bytes) a variant must copy rows in for one call, or None when this kernel's pieces fit.

    `pieces` is row_piece_tensors' answer (tensor -> the bytes this kernel copies it in); `tensors` gives
    each argument's (base address, shape, byte strides, element bytes). A tensor fits the widest power of
    two that its base address, its row's bytes and its strides (the last dim's aside) are multiples of, at
    most its piece, as the launch's `requires` ask of the row (`(D * 2) % 16`) whatever the number of rows;
    the call needs the least of those. None also when a tensor is not aligned to its own elements: no
    variant copies that (the launch's element check refuses it)."""
    need: int | None = None
    for name, piece in pieces.items():
        if name not in tensors:
            continue
        ptr, shape, strides, elem = tensors[name]
        g = math.gcd(ptr, shape[-1] * elem if shape else 0)
        for stride in strides[:-1]:
            g = math.gcd(g, stride)
        fits = min(piece, g & -g) if g else piece
        if fits < elem:
            return None
        if fits < piece:
            need = fits if need is None else min(need, fits)
    return need


def _masked(tile: TileType | VectorType, dim: int) -> bool:
    """Whether the backend masks partial tiles along `dim` of a plain (non-TMA) copy:
    * shared tiles and vectors: cp.async zero-fills rows and columns past the edge, element-wise
      copies (shared vectors, shared -> global stores) test every element (backend/rules_memory.py);
    * register tiles and vectors in a layout of whole 4-, 8- or 16-byte chunks (`row`, `col_vec` with
      `vec`): each chunk is tested (loads read zeros, stores are predicated), given rows of whole
      chunks (`_chunk_bytes`, a requirement of its own);
    * every other register layout (accumulators, accumulator-shaped vectors) is copied element by
      element with both dims tested."""
    if tile.space in ("st", "sv"):
        return True
    if _register_layout(tile) is None:  # before infer-layouts: rows (a vector's one dim) are masked in
        return dim == 0                  # every layout; a tile's columns only in some
    return True


def _register_layout(tile: TileType | VectorType) -> RegisterLayout | None:
    """The tile's register layout; None before infer-layouts, and for the bare names hand-written IR
    may give (`layout = row`): those are not chunked, as before."""
    return layout_of(tile) if isinstance(tile.get(LAYOUT_ATTR), dict) else None


def _chunk_bytes(tile: TileType | VectorType, op: Operation | None = None) -> int | None:
    """The bytes of one global access of a register tile or vector copied in vector pieces (backend
    rules_registers: `row` / `col_vec` layouts with a `vec` of 4, 8 or 16 bytes; a reducing store with
    `red_vec`, passes/vector_red.py: red_vec elements), else None."""
    if tile.space not in ("rt", "rv"):
        return None
    if op is not None and op.attrs.get(RED_VEC_ATTR):
        return int(op.attrs[RED_VEC_ATTR]) * DTYPE_BYTES[tile.dtype]
    return vector_access_bytes(_register_layout(tile), tile.dtype)


def _shared_tile(tile: TileType | VectorType, op: Operation) -> bool:
    """A shared tile that a plain tk.load fills in cp.async chunks (only loads reach shared tiles here), or a
    shared vector's ring-buffer stage that cp.async fills (pipeline-cp-async, the sm_80 producer; a vector's
    plain tk.load copies element by element)."""
    if isinstance(tile, VectorType):
        return tile.space == "sv" and (op.name == "pipe.async_copy" or bool(op.attrs.get("cp_async")))
    return isinstance(tile, TileType) and tile.space == "st"


def _operand(dim: str) -> str:
    """A dim (a size name or an expression of sizes) as the left operand of `%`."""
    return dim if is_size_name(dim) else f"({dim})"


def _exact_divs(expr: str) -> list[tuple[str, str]]:
    """(numerator, divisor) of every `/` in a tensor dim's expression, as text: each must divide exactly
    (`H / 4` of a K/V tensor: H a multiple of 4; `H / 2 / 2`: H and H / 2 multiples of 2)."""
    found = []
    for node in ast.walk(ast.parse(expr, mode="eval")):
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv)):
            found.append((ast.unparse(node.left), ast.unparse(node.right)))
    return found


def _floor_divs(expr: str) -> list[tuple[str, int]]:
    """Every floor division of a size by a constant in `expr`: [('M', 128)] for 'M / 128',
    'M // 128' or 'cdiv((M / 128) * (cdiv(N, 256)), NUM_SMS)' (persistent's grid); none for cdiv."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv))
                and isinstance(node.left, ast.Name) and isinstance(node.right, ast.Constant)
                and isinstance(node.right.value, int) and node.right.value > 1):
            found.append((node.left.id, node.right.value))
    return found


ARITH_OF_COUNTS = ("arith.add", "arith.sub", "arith.mul", "arith.min", "arith.max", "arith.cdiv", "arith.div")


def _floor_div_values(v: Value, depth: int = 0) -> list[tuple[str, int]]:
    """Every `arith.div %size, %const` in the arithmetic that computes `v` (a loop bound): the tile
    count of a persistent loop is a product of per-dim counts, each possibly floored."""
    op = v.owner
    if not isinstance(op, Operation) or op.name not in ARITH_OF_COUNTS or depth > 16:
        return []
    found = []
    if op.name == "arith.div":
        a, b = (x.owner for x in op.operands)
        if (isinstance(a, Operation) and a.name == "tk.size" and isinstance(b, Operation)
                and b.name == "arith.const" and isinstance(b.attrs["value"], int) and b.attrs["value"] > 1):
            found.append((a.attrs["name"], b.attrs["value"]))
    for x in op.operands:
        found += _floor_div_values(x, depth + 1)
    return found


def _plain_copy(op: Operation) -> tuple[Value, TileType | VectorType] | None:
    """(global value, tile) of a tk.load / tk.store that touches global memory (not TMA)."""
    if op.name == "tk.load":
        if op.results and isinstance(op.operands[0].type, GlobalType):
            return op.operands[0], op.result.type
        if not op.results and isinstance(op.operands[1].type, GlobalType):
            return op.operands[1], op.operands[0].type
    if op.name == "tk.store" and isinstance(op.operands[0].type, GlobalType):
        return op.operands[0], op.operands[1].type
    if op.name == "tk.gather":  # rows picked by an index vector: every row tested (masked), columns chunked
        return op.operands[0], op.result.type
    if op.name == "pipe.async_copy" and len(op.operands) > 3 and isinstance(op.operands[3].type, GlobalType):
        return op.operands[3], op.operands[1].type  # cp.async into a ring buffer's stage (pipeline-cp-async)
    if op.name == "pipe.copy" and op.attrs.get("cp_async") and isinstance(op.operands[3].type, GlobalType):
        return op.operands[3], op.operands[0].type  # an sm_80 producer's cp.async into a stage (pipeline)
    return None
