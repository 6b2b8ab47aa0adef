"""The launch description (`tkc compile --emit launch`): what another toolchain needs to launch the PTX.

    build_launch(module, "sm_90a") -> {"kernel", "target", "tensors", "scalars", "params", "grid",
                                       "block", "dynamic_smem", "requires", "tma"}

The format is the one the runtime reads (docs/runtime.md, "Launch description"). Sizes (grid, TMA
dims and strides, requirements) are `tkir.symexpr` expressions of the kernel's size names.

PTX parameter order (the backend declares its kernel parameters in exactly this order):
1. one `tensor_map` per `tma.desc`, in module order (name = the descriptor's symbol, `tma` = its index
   in the "tma" list; a 128-byte, 64-byte aligned `.param`, HOPPER.md §4.3);
2. one `pointer` per `gl` kernel parameter, in order (name = the parameter's name), also for tensors
   that are only reached through a tensor map;
3. one i32 `scalar` per size name, in order of first appearance in the `gl` dims (`"size": name`);
4. the kernel's own scalar parameters, in order (`"scalar": name`);
5. hidden parameters the runtime provides, in IR order: a `workspace` pointer per `tk.workspace`
   (`dtype`, `dims` of ints and NUM_SMS: device memory zeroed once and kept across launches) and an
   i32 `launch_count` per `tk.launch_count` (1 on the first launch of the kernel, then 2, ...).

`requires` lists the run-time conditions the kernel refuses to run without (the runtime checks
them): a size used as a tiled dim must be a multiple of the tile when the grid or a loop bound
floors it (`M / 128`: the last partial tile would not be computed), or when a copy of that dim does
not go through TMA (only TMA fills out-of-bounds elements and clips stores, so partial edge tiles
work there); byte strides of TMA tensors must be multiples of 16 B (HOPPER.md §4.1).
"""

from __future__ import annotations

import ast
import json

from tkir.diagnostics import CompileError
from tkir.ir import Module, Operation, Value
from tkir.layout import tma_swizzle
from tkir.target import WARPGROUP as THREADS_PER_WARPGROUP
from tkir.types import DTYPE_BYTES, GlobalType, ScalarType, TileType, VectorType

CP_ASYNC_BYTES = 16               # cp.async.cg copies 16-byte chunks: 16-B aligned sources (PTX ISA cp.async)
TMA_STRIDE_ALIGN = 16             # cuTensorMapEncodeTiled: strides multiple of 16 B (HOPPER.md §4.1)
CHUNK_BYTES = 16                  # one ld/st.global.v4 of a `row`-layout register tile (backend rules_registers)
PLAIN_SMEM_ALIGN = 16
DESC_FIELDS = ("dtype", "rank", "dims", "strides", "box", "elem_strides", "swizzle", "l2_promotion",
               "oob_fill")


def build_launch(module: Module, target: str) -> dict:
    """The launch description of the module's kernel, as a JSON-ready dict."""
    kernel = module.kernel
    params = kernel.body.args
    tensors = [a for a in params if isinstance(a.type, GlobalType)]
    scalars = [a for a in params if isinstance(a.type, ScalarType)]
    descs = [op for op in module.ops if op.name == "tma.desc"]
    _check_copies(module, kernel)

    sizes: list[str] = []
    for t in tensors:
        for d in t.type.dims:
            if isinstance(d, str) and d not in sizes:
                sizes.append(d)

    ptx_params: list[dict] = [{"name": d.symbol, "kind": "tensor_map", "tma": i} for i, d in enumerate(descs)]
    ptx_params += [{"name": t.name, "kind": "pointer", "dtype": t.type.dtype, "tensor": t.name}
                   for t in tensors]
    ptx_params += [{"name": s, "kind": "scalar", "dtype": "i32", "size": s} for s in sizes]
    ptx_params += [{"name": s.name, "kind": "scalar", "dtype": s.type.dtype, "scalar": s.name}
                   for s in scalars]
    for op in kernel.walk():  # hidden parameters the runtime provides (passes/stream_k.py)
        if op.name == "tk.workspace":
            t = op.result.type
            ptx_params.append({"name": op.attrs["name"], "kind": "workspace", "dtype": t.dtype, "dims": list(t.dims)})
        elif op.name == "tk.launch_count":
            ptx_params.append({"name": op.attrs["name"], "kind": "launch_count", "dtype": "i32"})

    grid = [str(g) for g in kernel.attrs["grid"]]
    occ = kernel.attrs.get("occupancy")
    if isinstance(occ, dict):
        warpgroups = sum(int(r.get("warpgroups", 1)) for r in occ.get("roles", {}).values()) or 1
        threads = int(occ.get("threads") or THREADS_PER_WARPGROUP * warpgroups)  # sm_80: 32 x warps
        smem = int(occ["smem_bytes"])
    else:
        threads, smem = THREADS_PER_WARPGROUP, _alloc_bytes(kernel)
    return {
        "kernel": kernel.symbol,
        "target": target,
        "tensors": [{"name": t.name, "dtype": t.type.dtype, "dims": list(t.type.dims)} for t in tensors],
        "scalars": [{"name": s.name, "dtype": s.type.dtype} for s in scalars],
        "params": ptx_params,
        "grid": grid + ["1"] * (3 - len(grid)),
        "block": [threads, 1, 1],
        "dynamic_smem": smem,
        "requires": _requires(kernel, descs),
        "tma": [{"param": d.symbol, "tensor": d.attrs["tensor"], **{k: d.attrs[k] for k in DESC_FIELDS}}
                for d in descs],
    }


def launch_json(module: Module, target: str) -> str:
    """`build_launch` as indented JSON text (what `--emit launch` writes)."""
    return json.dumps(build_launch(module, target), indent=2) + "\n"


def _check_copies(module: Module, kernel: Operation) -> None:
    """Every TMA copy names a descriptor of its tensor whose swizzle is the one its shared tile has."""
    params = kernel.body.args
    for op in kernel.walk():
        if op.name not in ("tma.load", "tma.store"):
            continue
        g, s = (op.operands[1], op.operands[0]) if op.name == "tma.load" else op.operands[:2]
        sym = op.attrs["desc"].name
        desc = module.lookup(sym)
        if desc is None or desc.name != "tma.desc":
            raise CompileError(op.loc, f"'{op.name}' names @{sym}, which is not a tma.desc")
        if desc.attrs["param"] != params.index(g):
            raise CompileError(op.loc, f"'{op.name}' copies %{g.name} with @{sym}, a descriptor of "
                               f"{desc.attrs['tensor']}")
        want = tma_swizzle(int(s.type.get("swizzle", 0) or 0))
        if desc.attrs["swizzle"] != want:
            raise CompileError(op.loc, f"'{op.name}': @{sym} has swizzle {desc.attrs['swizzle']} but the "
                               f"shared tile is {s.type} (swizzle {want})")


def module_requires(module: Module) -> list[dict]:
    """The `requires` list of the module's kernel (what build_launch writes), for the interpreter."""
    return _requires(module.kernel, [op for op in module.ops if op.name == "tma.desc"])


def requirement_failure(kernel: str, req: dict, sizes: dict[str, int]) -> str | None:
    """The message for a `requires` entry that the sizes break (None if it holds); the runtime's
    LaunchError and the interpreter's InterpError say the same thing."""
    from tkir import symexpr

    got = symexpr.evaluate(req["expr"], sizes)
    if got == req["equals"]:
        return None
    shown = ", ".join(f"{n} = {sizes[n]}" for n in sorted(symexpr.names(req["expr"])) if n in sizes)
    return (f"{kernel}: {req.get('why', 'requirement failed')} "
            f"({req['expr']} is {got}, must be {req['equals']}; {shown})")


def _requires(kernel: Operation, descs: list[Operation]) -> list[dict]:
    req: dict[str, list[str]] = {}

    def need(expr: str, why: str) -> None:
        whys = req.setdefault(expr, [])
        if why not in whys:
            whys.append(why)

    for d, g in enumerate(kernel.attrs["grid"]):
        floor = _floor_div(str(g))
        if floor is not None:
            size, tile = floor
            need(f"{size} % {tile}", f"grid dim {d} is {g}: a partial last tile would not be computed")
    for op in kernel.walk():
        if op.name == "scf.for":
            floor = _floor_div_value(op.operands[1])
            if floor is not None:
                size, tile = floor
                need(f"{size} % {tile}", f"loop bound {size} / {tile} floors: a partial last tile is skipped")
        copy = _plain_copy(op)
        if copy is not None:
            g, tile = copy
            extents = (tile.rows, tile.cols) if isinstance(tile, TileType) else (tile.n,)
            for i, (dim, ext) in enumerate(zip(g.type.dims[-len(extents):], extents, strict=True)):
                if isinstance(dim, str) and ext > 1 and not _masked(tile, i):
                    need(f"{dim} % {ext}", f"%{g.name} is copied without TMA, and the backend masks only "
                                           "the rows of register tiles (and both dims of accumulators)")
            last = g.type.dims[-1]
            if _chunk_aligned(tile) and isinstance(last, str):
                need(f"({last} * {DTYPE_BYTES[g.type.dtype]}) % {CHUNK_BYTES}",
                     f"%{g.name} is copied to or from registers in {CHUNK_BYTES}-byte vector accesses: its "
                     f"rows must start {CHUNK_BYTES}-byte aligned")
            if _shared_tile(tile) and isinstance(last, str):
                need(f"({last} * {DTYPE_BYTES[g.type.dtype]}) % {CP_ASYNC_BYTES}",
                     f"%{g.name} is copied to shared memory in {CP_ASYNC_BYTES}-byte cp.async chunks: its rows "
                     f"must start {CP_ASYNC_BYTES}-byte aligned")
    for desc in descs:
        for s in desc.attrs["strides"]:
            if isinstance(s, str):
                need(f"({s}) % {TMA_STRIDE_ALIGN}",
                     f"TMA ({desc.symbol}): byte strides of {desc.attrs['tensor']} must be multiples of 16")
    return [{"expr": e, "equals": 0, "why": "; ".join(w)} for e, w in req.items()]


def _masked(tile: TileType | VectorType, dim: int) -> bool:
    """Whether the backend masks partial tiles along `dim` of a plain (non-TMA) copy:
    * shared tiles and vectors: cp.async zero-fills rows and columns past the edge, element-wise
      copies (shared vectors, shared -> global stores) test every element (backend/rules_memory.py);
    * register tiles and vectors in a layout of whole 16-byte chunks (`row`, `col_vec` with `vec`):
      each chunk is tested (loads read zeros, stores are predicated), given rows of whole chunks
      (`_chunk_aligned`, a requirement of its own);
    * every other register layout (accumulators, accumulator-shaped vectors) is copied element by
      element with both dims tested."""
    if tile.space in ("st", "sv"):
        return True
    lay = tile.get("layout")
    if not isinstance(lay, dict):
        return isinstance(tile, TileType) and dim == 0
    return True


def _chunk_aligned(tile: TileType | VectorType) -> bool:
    """A register tile or vector whose global copies are 16-byte vector accesses (backend
    rules_registers: `row` / `col_vec` layouts with a `vec` of 16 bytes)."""
    lay = tile.get("layout")
    return (tile.space in ("rt", "rv") and isinstance(lay, dict) and str(lay.get("kind")) in ("row", "col_vec")
            and "vec" in lay and int(lay["vec"]) * DTYPE_BYTES[tile.dtype] == CHUNK_BYTES)


def _shared_tile(tile: TileType | VectorType) -> bool:
    """A shared tile that a plain tk.load fills (only loads reach shared tiles here)."""
    return isinstance(tile, TileType) and tile.space == "st"


def _floor_div(expr: str) -> tuple[str, int] | None:
    """('M', 128) for 'M / 128' or 'M // 128'; None for anything else (cdiv, products, ...)."""
    try:
        node = ast.parse(expr, mode="eval").body
    except SyntaxError:
        return None
    if (isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Div, ast.FloorDiv))
            and isinstance(node.left, ast.Name) and isinstance(node.right, ast.Constant)
            and isinstance(node.right.value, int) and node.right.value > 1):
        return node.left.id, node.right.value
    return None


def _floor_div_value(v: Value) -> tuple[str, int] | None:
    op = v.owner
    if not (isinstance(op, Operation) and op.name == "arith.div"):
        return None
    a, b = (x.owner for x in op.operands)
    if (isinstance(a, Operation) and a.name == "tk.size" and isinstance(b, Operation)
            and b.name == "arith.const" and isinstance(b.attrs["value"], int) and b.attrs["value"] > 1):
        return a.attrs["name"], b.attrs["value"]
    return None


def _plain_copy(op: Operation) -> tuple[Value, TileType | VectorType] | None:
    """(global value, tile) of a tk.load / tk.store that touches global memory (not TMA)."""
    if op.name == "tk.load":
        if op.results and isinstance(op.operands[0].type, GlobalType):
            return op.operands[0], op.result.type
        if not op.results and isinstance(op.operands[1].type, GlobalType):
            return op.operands[1], op.operands[0].type
    if op.name == "tk.store" and isinstance(op.operands[0].type, GlobalType):
        return op.operands[0], op.operands[1].type
    return None


def _alloc_bytes(kernel: Operation) -> int:
    """Shared memory of the kernel's allocations, each rounded to its alignment (no occupancy plan)."""
    total, max_align = 0, PLAIN_SMEM_ALIGN
    for op in kernel.walk():
        if op.name != "tk.alloc":
            continue
        t = op.result.type
        eb = DTYPE_BYTES[t.dtype]
        pad = int(t.get("pad", 0) or 0)
        size = t.rows * (t.cols * eb + pad) if isinstance(t, TileType) else t.n * eb + pad
        align = int(t.get("align", 0) or 0) or PLAIN_SMEM_ALIGN
        stages = t.get("stages") if isinstance(t.get("stages"), int) else 1
        total += -(-size // align) * align * stages
        max_align = max(max_align, align)
    return total + (max_align if max_align > PLAIN_SMEM_ALIGN else 0)
