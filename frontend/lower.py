"""Check a .tk syntax tree (names, shapes, dtypes, annotations) and lower it to tk-level tile IR.

One pass over the tree does both: every expression is type-checked as it is lowered, so each
error points at the construct that caused it. What it produces:

* compile-time values (const params, literals, `let`s of them) fold in Python and become
  `arith.const` only where run-time code reads them; sizes, block ids and constants are emitted
  once, at the top of the kernel (so they dominate every use);
* register variables (`reg`) are SSA-renamed (mem2reg style): an assignment makes a new value; a
  `for` loop carries every register variable that its body assigns and that has a value before
  the loop (iter_args / scf.yield / results);
* shared tiles are memory: `a = A[i, j]` is `tk.load %a, %A, ...`, no renaming;
* compile-time `if` is folded; run-time `if` is rejected.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tkir import scalar, symexpr
from tkir.diagnostics import CompileError
from tkir.facts import MIN_BLOCKS_ATTR
from tkir.frontend import ast
from tkir.frontend.names import Vocabulary, check_untaken, close_matches
from tkir.frontend.tune import check_tune
from tkir.ir import Block, Loc, Module, Operation, Region, Value
from tkir.target import MAX_BLOCKS_PER_SM, MAX_THREADS_PER_BLOCK, REGISTER_FILE_BYTES, SMEM_PER_BLOCK, WARP
from tkir.types import (
    DTYPE_BYTES,
    FLOAT_DTYPES,
    I32,
    SHORT_TILE_ROWS,
    TILE_QUANTUM,
    GlobalType,
    Ident,
    ScalarType,
    TileType,
    Type,
    VectorType,
    is_register,
    is_shared,
)
from tkir.verifier import verify
from tkir.verify_sizes import grid_limit_problem

MAX_GRID_DIMS = 3  # CUDA grids have x, y, z
SWIZZLE_CHOICES = {"128": 128, "64": 64, "32": 32, "none": 0}  # bytes; 0 = unswizzled
SCALAR_DTYPES = ("i32", "u32", "f32")  # dtypes a scalar kernel parameter may have
TENSOR_DTYPES = tuple(d for d in DTYPE_BYTES if d != "i1")
TYPE_KINDS = ("gl", "st", "sv", "rt", "rv")
BLOCK_DIMS = {"x": 0, "y": 1, "z": 2}
BLOCK_ID_NAMES = ("bx", "by", "bz")
RESERVED = ("block", "inf")

UNARY_FUNCS = {n: f for n, f in scalar.FLOAT_UNARY.items() if n != "neg"}  # `-x` is the operator
CAST_FUNCS = ("bf16", "f16", "f32", "i32")
REDUCTIONS = {
    "row_max": ("max", "row"), "row_sum": ("sum", "row"), "row_min": ("min", "row"),
    "row_mean": ("mean", "row"), "row_var": ("var", "row"),   # var: the population (biased) variance
    "col_max": ("max", "col"), "col_sum": ("sum", "col"), "col_min": ("min", "col"),
}
INDEX_FUNCS = {"row_index": "row", "col_index": "col"}
OUTER_FUNCS = {"row_outer": "row", "col_outer": "col"}  # tk.outer {axis = ...}
OTHER_FUNCS = ("max", "min", "cdiv", "mask_causal", "row", "col", "where", *INDEX_FUNCS, *OUTER_FUNCS)
# fixed argument counts; mask_causal takes 3 or 4 (an optional fill)
N_ARGS = {"max": 2, "min": 2, "cdiv": 2, "where": 3, "row_outer": 2, "col_outer": 2}
FP8_DTYPES = ("e4m3", "e5m2")
PREDICATE_DTYPE = "i1"  # tk.cmp results; tk.select conditions
ALL_FUNCS = (*UNARY_FUNCS, *CAST_FUNCS, *REDUCTIONS, *OTHER_FUNCS)
ANNOTATIONS = {"stages": "a for loop", "swizzle": "a shared declaration",
               "no_tma": "a load statement", "warpgroups": "the kernel", "tune": "the kernel",
               "stream_k": "the kernel", "blocks_per_sm": "the kernel", "persistent": "the kernel",
               "hoist_loads": "the kernel", "fence_loads": "the kernel", "cluster": "the kernel",
               "warps": "the kernel"}
STREAM_K_ATTR = "stream_k_requested"  # what `@stream_k(1)` records; passes/stream_k.py reads it
STREAM_K_MIN_ITERS_ATTR = "stream_k_min_iters"  # what `@stream_k(1, min_iters=I)` adds; passes/stream_k.py
MAX_STREAM_K_MIN_ITERS = 1 << 20  # a sanity bound: more K iterations per block than any split would ask
PERSISTENT_ATTR = "persistent_requested"  # what `@persistent(1)` records; passes/persistent.py reads it
HOIST_LOADS_ATTR = "hoist_loads_requested"  # what `@hoist_loads(1)` records; passes/hoist_loads.py reads it
FENCE_LOADS_ATTR = "fence_loads_requested"  # what `@fence_loads(1)` records; passes/fence_loads.py reads it
CLUSTER_ATTR = "cluster_requested"  # what `@cluster(C)` with C > 1 records; passes/cluster_rows.py reads it
WARPS_ATTR = "warps"  # what `@warps(W)` with W >= 1 records; passes/infer_layouts.py reads it
MAX_BLOCK_WARPS = MAX_THREADS_PER_BLOCK // WARP  # 32: a block's 1024 threads
CLUSTER_SIZES = (1, 2, 4, 8)  # CTAs per cluster: powers of two up to the portable maximum, 8 (HOPPER.md; CUDA
                              # C Programming Guide, "Thread Block Clusters")
BINARY_NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "div", "%": "rem", "max": "max", "min": "min"}
# what the name check of an untaken compile-time branch knows (frontend/names.py)
VOCABULARY = Vocabulary(
    functions={f: (3, 4) if f == "mask_causal" else (N_ARGS.get(f, 1),) * 2 for f in ALL_FUNCS},
    type_kinds=(*TYPE_KINDS, *SCALAR_DTYPES), dtypes=(*TENSOR_DTYPES, PREDICATE_DTYPE), annotations=ANNOTATIONS,
    block_dims=BLOCK_DIMS, implicit=("inf",))


def lower_kernel(kernel: ast.Kernel, source: str, consts: dict[str, int | float] | None = None) -> Module:
    """Lower one parsed kernel; `consts` override its compile-time parameters (-D NAME=VALUE)."""
    module = _Lowerer(source).kernel(kernel, dict(consts or {}))
    verify(module)
    return module


# --- what names and expressions denote ---------------------------------------------------------


MMA_OPERAND_DTYPES = ("bf16", "f16")  # what both targets' tensor-core rules lower


@dataclass
class _Sym:
    """A name in scope: const, size, global, scalar (param, let, loop index), shared or reg."""

    kind: str
    name: str
    loc: Loc
    const: int | float | None = None  # kind == "const"
    value: Value | None = None  # global / scalar / shared / a `let` of a register value
    type: Type | None = None  # reg: the declared type
    current: Value | None = None  # reg: its value now (None: not initialized)
    axis: str | None = None  # reg vectors: row/col, once known


@dataclass
class _E:
    """The result of an expression: a compile-time number, an IR value, or a global tile access."""

    loc: Loc
    const: int | float | None = None
    value: Value | None = None
    axis: str | None = None  # vectors: "row" (from row_*) or "col"
    trans: bool = False  # a pending `.T`
    gref: tuple[Value, list[Value]] | None = None  # A[i, j]: the gl and its coordinates
    coords: list[_E] | None = None  # A[i, j]: the coordinates as written (compile-time ones are checked)
    name: str | None = None  # source name, for naming constants

    @property
    def is_const(self) -> bool:
        return self.const is not None


INT_RANGES = {"i32": (-2**31, 2**31 - 1), "u32": (0, 2**32 - 1)}  # the IR's integer scalars (LLVM i32)

def _fold(op: str, a: int | float, b: int | float) -> int | float | None:
    """Compile-time scalar arithmetic as tkir/scalar.py defines it (integer `/` floors); None on
    division by zero."""
    try:
        return scalar.binary(BINARY_NAMES.get(op, op), a, b)
    except ZeroDivisionError:
        return None


_KIND_WORDS = {"const": "const", "size": "size", "global": "global tensor parameter", "scalar": "scalar",
               "shared": "shared variable", "reg": "register variable"}
_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "%": 2}
CMP_PREDS = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}


class _Lowerer:
    def __init__(self, source: str):
        self.source = source
        self.scopes: list[dict[str, _Sym]] = [{}]
        self.kblock = Block()
        self.block = self.kblock
        self.n_prologue = 0
        self.cache: dict[tuple, Value] = {}
        self.smem_bytes = 0
        self.loop_depth = 0
        self.axis_of: dict[int, str] = {}
        # names declared only in untaken branches of compile-time `if`s, with the scope of the `if`
        self.untaken: list[tuple[dict[str, _Sym], dict[str, Loc]]] = []

    # --- helpers -------------------------------------------------------------------------------

    def error(self, loc: Loc, msg: str, hint: str | None = None) -> CompileError:
        return CompileError(loc, msg, self.source, hint=hint)

    def lookup(self, name: str) -> _Sym | None:
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def declare(self, sym: _Sym) -> _Sym:
        if sym.name in RESERVED:
            raise self.error(sym.loc, f"'{sym.name}' is a reserved name")
        prev = self.lookup(sym.name)
        if prev is not None:
            raise self.error(sym.loc, f"duplicate name '{sym.name}': already defined as a "
                             f"{_KIND_WORDS[prev.kind]} at line {prev.loc.line}")
        self.scopes[-1][sym.name] = sym
        return sym

    def emit(self, name: str, operands: list[Value], result_types: list[Type], loc: Loc,
             attrs: dict[str, object] | None = None, result_name: str | None = None) -> Operation:
        op = Operation(name, operands, result_types, attrs, result_names=[result_name] * len(result_types),
                       loc=loc)
        self.block.append(op)
        return op

    def emit_prologue(self, key: tuple, name: str, rtype: Type, loc: Loc, attrs: dict[str, object],
                      result_name: str) -> Value:
        """An op at the top of the kernel, emitted once (sizes, block ids, constants)."""
        if key not in self.cache:
            op = Operation(name, [], [rtype], attrs, result_names=[result_name], loc=loc)
            self.kblock.insert(self.n_prologue, op)
            self.n_prologue += 1
            self.cache[key] = op.result
        return self.cache[key]

    def const_value(self, c: int | float, dtype: str, loc: Loc, name: str | None = None) -> Value:
        if dtype in ("i32", "u32"):
            if isinstance(c, float) and not c.is_integer():
                raise self.error(loc, f"{c} is not an integer", hint="use an integer here")
            value: int | float = int(c)
            lo, hi = INT_RANGES[dtype]
            if not lo <= value <= hi:  # LLVM would wrap it silently (a loop to 2**31 would never run)
                raise self.error(loc, f"the integer {value} does not fit {dtype} ({lo} .. {hi})")
            default = f"c{value}" if value >= 0 else f"cm{-value}"
        else:
            value = float(c)
            default = "cst"
        rname = name or default
        return self.emit_prologue(("const", dtype, value, rname), "arith.const", ScalarType(dtype), loc,
                                  {"value": value}, rname)

    def size_value(self, name: str, loc: Loc) -> Value:
        return self.emit_prologue(("size", name), "tk.size", I32, loc, {"name": name}, name)

    def type_text(self, e: _E) -> str:
        if e.is_const:
            return f"the number {e.const}"
        if e.gref is not None:
            return f"a tile of {e.gref[0].type}"
        return str(e.value.type)

    # --- the kernel ----------------------------------------------------------------------------

    def kernel(self, k: ast.Kernel, overrides: dict[str, int | float]) -> Module:
        self.kernel_ast = k
        names = [c.name for c in k.consts]
        for name in overrides:
            if name not in names:
                raise self.error(k.loc, f"unknown const '{name}' in -D {name}=...",
                                 hint=f"kernel '{k.name}' has consts: {', '.join(names) or 'none'}")
        consts: dict[str, int | float] = {}
        for c in k.consts:
            value = overrides.get(c.name, c.value)
            if value == ast.AUTO:
                raise self.error(c.loc, f"const '{c.name}' is auto: the compiler chooses it (tkir.compile, tkc), "
                                        "and this entry point needs its value",
                                 hint=f"pass -D {c.name}=<value>, or compile with tkir.compile / tkc")
            self.declare(_Sym("const", c.name, c.loc, const=value))
            consts[c.name] = value
        params = self.params(k.params)
        grid = self.grid(k)
        attrs: dict[str, object] = {}
        if consts:
            attrs["consts"] = consts
        attrs["grid"] = grid
        for ann in self.annotations(k.annotations, "kernel").values():
            attrs.update(ann)
        wg = attrs.get("warpgroups")
        if WARPS_ATTR in attrs and isinstance(wg, dict) and "consumers" in wg:
            # @warps(W >= 1) sizes the block in place of @warpgroups' consumers (a producers= stays)
            rest = {r: n for r, n in wg.items() if r != "consumers"}
            if rest:
                attrs["warpgroups"] = rest
            else:
                del attrs["warpgroups"]
        for p in params:
            self.kblock.add_arg(p)
        op = Operation("tk.kernel", [], [], attrs, [Region(self.kblock)], symbol=k.name, loc=k.loc)
        self.stmts(k.body)
        return Module(ops=[op], source=k.loc.file)

    def params(self, params: list[ast.Param]) -> list[Value]:
        values = []
        sizes: dict[str, Loc] = {}
        for p in params:
            t = self.resolve_type(p.type, sizes)
            if not isinstance(t, (GlobalType, ScalarType)):
                raise self.error(p.type.loc, f"kernel parameter '{p.name}' has type {t}",
                                 hint="parameters are global tensors (gl<...>[...]) or scalars (f32, i32)")
            v = Value(t, p.name)
            kind = "global" if isinstance(t, GlobalType) else "scalar"
            self.declare(_Sym(kind, p.name, p.loc, value=v))
            values.append(v)
        for name, loc in sizes.items():
            self.declare(_Sym("size", name, loc))
        return values

    def grid(self, k: ast.Kernel) -> list[str]:
        if not k.grid:
            raise self.error(k.loc, "the grid needs at least one dimension")
        if len(k.grid) > MAX_GRID_DIMS:
            raise self.error(k.grid[MAX_GRID_DIMS].loc,
                             f"the grid has {len(k.grid)} dimensions; at most {MAX_GRID_DIMS} (x, y, z)")
        exprs = [self.size_expr(e) for e in k.grid]
        for axis, (e, text) in enumerate(zip(k.grid, exprs, strict=True)):
            if not symexpr.names(text):  # a number of blocks: within CUDA's limits (tkir/target.py)
                problem = grid_limit_problem(axis, symexpr.evaluate(text, {}))
                if problem:
                    raise self.error(e.loc, problem)
        return exprs

    def size_expr(self, e: ast.Expr) -> str:
        """A grid expression in tkir.symexpr syntax, consts substituted and folded."""
        c = self.const_eval(e)
        if c is not None:
            if not isinstance(c, int):
                raise self.error(e.loc, f"grid sizes are integers, got {c}")
            return str(c)
        if isinstance(e, ast.Name):
            sym = self.lookup(e.id)
            if sym is None or sym.kind != "size":
                raise self.error(e.loc, f"the grid uses sizes and consts; '{e.id}' is "
                                 + ("unknown" if sym is None else f"a {_KIND_WORDS[sym.kind]}"))
            return e.id
        if isinstance(e, ast.BinOp) and e.op in _PRECEDENCE:
            return f"{self.size_operand(e.lhs, e.op, False)} {e.op} {self.size_operand(e.rhs, e.op, True)}"
        if isinstance(e, ast.Call) and e.func in ("cdiv", "min", "max") and len(e.args) == 2:
            return f"{e.func}({self.size_expr(e.args[0])}, {self.size_expr(e.args[1])})"
        raise self.error(e.loc, "unsupported grid expression",
                         hint="use sizes, consts, + - * / % and cdiv/min/max")

    def size_operand(self, e: ast.Expr, parent: str, right: bool) -> str:
        text = self.size_expr(e)
        if isinstance(e, ast.BinOp) and self.const_eval(e) is None:
            p, q = _PRECEDENCE[parent], _PRECEDENCE.get(e.op, 3)
            if q < p or (right and q == p):
                return f"({text})"
        return text

    # --- types ---------------------------------------------------------------------------------

    def dtype(self, e: ast.Expr, allowed: tuple[str, ...]) -> str:
        if not isinstance(e, ast.Name):
            raise self.error(e.loc, "expected a dtype", hint=f"one of {', '.join(allowed)}")
        if e.id not in allowed:
            raise self.error(e.loc, f"unknown dtype '{e.id}'", hint=f"one of {', '.join(allowed)}")
        return e.id

    def tile_dtype(self, e: ast.Expr, kind: str) -> str:
        """The dtype of a declared tile or vector: a float dtype other than fp8."""
        if isinstance(e, ast.Name) and e.id in ("i32", PREDICATE_DTYPE):
            raise self.error(e.loc, f"{kind}<{e.id}, ...> cannot be declared yet; {e.id} tiles are values of "
                             "row_index/col_index, their arithmetic and comparisons",
                             hint="bind them with `let`, or turn them into floats with f32(...) / where(...)")
        dtype = self.dtype(e, tuple(sorted(FLOAT_DTYPES)))
        if dtype in FP8_DTYPES:
            raise self.error(e.loc, "fp8 tiles are not supported yet: neither target lowers them; use bf16 or f16",
                             hint=f"gl<{dtype}> parameters are accepted; tiles of them are not")
        return dtype

    def const_dim(self, e: ast.Expr, what: str) -> int:
        c = self.const_eval(e)
        if not isinstance(c, int) or c <= 0:
            raise self.error(e.loc, f"{what} must be a positive compile-time integer",
                             hint="use integers and const parameters")
        return c

    def resolve_type(self, te: ast.TypeExpr, sizes: dict[str, Loc] | None = None) -> Type:
        kind = te.kind
        if kind in SCALAR_DTYPES and not te.args and te.dims is None:
            return ScalarType(kind)
        if kind not in TYPE_KINDS:
            hint = f"types are {', '.join(TYPE_KINDS)} or a scalar dtype ({', '.join(SCALAR_DTYPES)})"
            raise self.error(te.loc, f"unknown type '{kind}'", hint=hint)
        nargs = {"gl": 1, "st": 3, "rt": 3, "sv": 2, "rv": 2}[kind]
        if len(te.args) != nargs or (kind == "gl") != (te.dims is not None):
            form = {"gl": "gl<dtype>[d0, d1, ...]", "st": "st<dtype, rows, cols>",
                    "rt": "rt<dtype, rows, cols>", "sv": "sv<dtype, n>", "rv": "rv<dtype, n>"}[kind]
            raise self.error(te.loc, f"malformed {kind} type", hint=f"write {form}")
        if kind == "gl":
            dtype = self.dtype(te.args[0], TENSOR_DTYPES)
            return GlobalType(dtype, tuple(self.global_dim(d, sizes) for d in te.dims or []))
        dtype = self.tile_dtype(te.args[0], kind)
        if kind in ("sv", "rv"):
            n = self.const_dim(te.args[1], "a vector length")
            self.check_register_bytes(te, f"{kind}<{dtype}, {n}>", n * DTYPE_BYTES[dtype])
            return VectorType(kind, dtype, n)
        rows = self.const_dim(te.args[1], "tile rows")
        cols = self.const_dim(te.args[2], "tile cols")
        self.check_register_bytes(te, f"{kind}<{dtype}, {rows}, {cols}>", rows * cols * DTYPE_BYTES[dtype])
        short = kind == "rt" and rows in SHORT_TILE_ROWS
        if (rows % TILE_QUANTUM and not short) or cols % TILE_QUANTUM:
            raise self.error(te.loc, f"tile dims must be multiples of {TILE_QUANTUM}, got {kind}<{dtype}, "
                             f"{rows}, {cols}>",
                             hint="tiles are made of 16x16 base tiles (a register tile may also have "
                                  f"{', '.join(map(str, SHORT_TILE_ROWS))} rows)")
        return TileType(kind, dtype, rows, cols)

    def check_register_bytes(self, te: ast.TypeExpr, spelled: str, nbytes: int) -> None:
        """A register tile or vector larger than an SM's register file is refused here (the layout
        passes would otherwise enumerate its elements, per thread, for ever)."""
        if te.kind in ("rt", "rv") and nbytes > REGISTER_FILE_BYTES:
            raise self.error(te.loc, f"{spelled} needs {nbytes} bytes of registers, more than the "
                             f"{REGISTER_FILE_BYTES} of an SM's register file",
                             hint="use smaller tiles and loop over the data")

    def global_dim(self, e: ast.Expr, sizes: dict[str, Loc] | None) -> int | str:
        if isinstance(e, ast.Name) and sizes is not None and self.lookup(e.id) is None:
            sizes.setdefault(e.id, e.loc)
            return e.id
        return self.const_dim(e, "a global dim (a size name or compile-time expression)")

    # --- annotations ---------------------------------------------------------------------------

    def annotations(self, anns: list[ast.Annotation], where: str) -> dict[str, dict[str, object]]:
        """Check annotations against the construct they precede; name -> the attrs they add."""
        out: dict[str, dict[str, object]] = {}
        allowed = {"kernel": ("warpgroups", "tune", "stream_k", "blocks_per_sm", "persistent", "hoist_loads",
                              "fence_loads", "cluster", "warps"),
                   "for": ("stages",),
                   "shared": ("swizzle",), "load": ("no_tma",), "none": ()}[where]
        for a in anns:
            if a.name not in ANNOTATIONS:
                raise self.error(a.loc, f"unknown annotation '@{a.name}'",
                                 hint="known: " + ", ".join("@" + n for n in ANNOTATIONS))
            if a.name not in allowed:
                raise self.error(a.loc, f"'@{a.name}' applies to {ANNOTATIONS[a.name]}, not here")
            if a.name in out:
                raise self.error(a.loc, f"duplicate annotation '@{a.name}'")
            out[a.name] = getattr(self, f"ann_{a.name}")(a)
        return out

    def ann_positive(self, a: ast.Annotation, e: ast.Expr, form: str) -> int:
        c = self.const_eval(e)
        if not isinstance(c, int) or c < 1:
            raise self.error(e.loc, f"bad argument to '@{a.name}': expected a positive integer",
                             hint=f"write {form}")
        return c

    def ann_stages(self, a: ast.Annotation) -> dict[str, object]:
        if len(a.args) != 1 or a.kwargs:
            raise self.error(a.loc, "'@stages' takes one argument", hint="write @stages(4)")
        return {"stages": self.ann_positive(a, a.args[0], "@stages(4)")}

    def ann_swizzle(self, a: ast.Annotation) -> dict[str, object]:
        if len(a.args) != 1 or a.kwargs:
            raise self.error(a.loc, "'@swizzle' takes one argument", hint="write @swizzle(128)")
        e = a.args[0]
        key = str(e.value) if isinstance(e, ast.Num) else e.id if isinstance(e, ast.Name) else None
        if key not in SWIZZLE_CHOICES:
            raise self.error(e.loc, "bad argument to '@swizzle': expected 128, 64, 32 or none",
                             hint="the swizzle is the span in bytes that 16-byte chunks are permuted over")
        return {"swizzle": SWIZZLE_CHOICES[key]}

    def ann_no_tma(self, a: ast.Annotation) -> dict[str, object]:
        if a.args or a.kwargs:
            raise self.error(a.loc, "'@no_tma' takes no arguments")
        return {"no_tma": True}

    def ann_tune(self, a: ast.Annotation) -> dict[str, object]:
        """`@tune(...)`: checked here (frontend/tune.py); the search space adds nothing to the IR."""
        check_tune(self.kernel_ast, a, self.source)
        return {}

    def ann_switch(self, a: ast.Annotation, var: str, attr: str) -> dict[str, object]:
        """A kernel annotation that is a compile-time 0 or 1 (usually a const `var`, so `@tune` can choose
        it per shape): 1 records `attr = true` for the pass that reads it, 0 adds nothing."""
        name = a.name
        if len(a.args) != 1 or a.kwargs:
            raise self.error(a.loc, f"'@{name}' takes one argument",
                             hint=f"write @{name}(1), or @{name}({var}) with a const {var} = 0 or 1")
        c = self.const_eval(a.args[0])
        if c not in (0, 1) or isinstance(c, float):
            raise self.error(a.args[0].loc, f"bad argument to '@{name}': expected 0 (off) or 1 (on)",
                             hint=f"a compile-time 0 or 1, e.g. a const {var} that @tune({var}=[0, 1]) chooses")
        return {attr: True} if c == 1 else {}

    def ann_stream_k(self, a: ast.Annotation) -> dict[str, object]:
        """`@stream_k(S)` or `@stream_k(S, min_iters=I)`: S = 1 asks the stream-k pass for the Stream-K
        schedule (passes/stream_k.py); I, a compile-time integer >= 1 (usually a const, so `@tune` can
        choose it), is the K iterations each block of the split must get, in place of the pass's
        `min_iters` (recorded as `stream_k_min_iters` only when S = 1)."""
        form = "write @stream_k(SK) or @stream_k(SK, min_iters=SKI) with consts SK = 0 or 1 and SKI >= 1"
        kwargs = dict(a.kwargs)
        if len(a.args) != 1 or set(kwargs) - {"min_iters"} or len(kwargs) != len(a.kwargs):
            raise self.error(a.loc, "'@stream_k' takes one argument and an optional min_iters=", hint=form)
        attrs = self.ann_switch(ast.Annotation(a.loc, a.name, a.args, []), "SK", STREAM_K_ATTR)
        if "min_iters" in kwargs:
            e = kwargs["min_iters"]
            c = self.const_eval(e)
            if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_STREAM_K_MIN_ITERS:
                got = "a value known only at run time" if c is None else f"{c}"
                raise self.error(e.loc, "bad argument to '@stream_k': min_iters expects a compile-time integer "
                                 f"1..{MAX_STREAM_K_MIN_ITERS} (K iterations per block of the split), got {got}",
                                 hint=form)
            if attrs:
                attrs[STREAM_K_MIN_ITERS_ATTR] = c
        return attrs

    def ann_persistent(self, a: ast.Annotation) -> dict[str, object]:
        """`@persistent(P)`: 1 asks the persistent pass to loop each block over the tiles of a 1-D or 3-D
        grid too, in launch order (passes/persistent.py; 2-D grids are made persistent either way)."""
        return self.ann_switch(a, "P", PERSISTENT_ATTR)

    def ann_hoist_loads(self, a: ast.Annotation) -> dict[str, object]:
        """`@hoist_loads(H)`: 1 asks the hoist-loads pass to issue the kernel's later global loads right
        after its first one (passes/hoist_loads.py)."""
        return self.ann_switch(a, "H", HOIST_LOADS_ATTR)

    def ann_fence_loads(self, a: ast.Annotation) -> dict[str, object]:
        """`@fence_loads(F)`: 1 asks the fence-loads pass to keep the kernel's first global register loads
        issued before its first reduction (passes/fence_loads.py)."""
        return self.ann_switch(a, "F", FENCE_LOADS_ATTR)

    def ann_blocks_per_sm(self, a: ast.Annotation) -> dict[str, object]:
        """`@blocks_per_sm(B)`: B a compile-time integer 0..MAX_BLOCKS_PER_SM (usually a const, so `@tune`
        can choose it), CUDA's __launch_bounds__ minBlocksPerMultiprocessor: B >= 1 records
        `min_blocks_per_sm = B`, the floor of resident blocks ptxas is asked for (plan-occupancy checks
        that B fit, the backend emits `.minnctapersm`); 0 adds nothing (the planner decides)."""
        form = "write @blocks_per_sm(4), or @blocks_per_sm(OCC) with a const OCC that @tune(OCC=[0, 4]) chooses"
        if len(a.args) != 1 or a.kwargs:
            raise self.error(a.loc, "'@blocks_per_sm' takes one argument", hint=form)
        c = self.const_eval(a.args[0])
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_BLOCKS_PER_SM:
            got = "a value known only at run time" if c is None else f"{c}"
            raise self.error(a.args[0].loc, f"bad argument to '@blocks_per_sm': expected a compile-time integer "
                             f"0..{MAX_BLOCKS_PER_SM} (resident blocks per SM; 0: the planner decides), got {got}",
                             hint=form)
        return {MIN_BLOCKS_ATTR: c} if c else {}

    def ann_cluster(self, a: ast.Annotation) -> dict[str, object]:
        """`@cluster(C)`: C a compile-time 1, 2, 4 or 8 (usually a const, so `@tune` can choose it): C > 1
        records `cluster_requested = C`, the request that the cluster-rows pass spread each block's warps
        over a cluster of C CTAs (C SMs) on sm_90a; 1 adds nothing (one CTA per block)."""
        form = "write @cluster(2), or @cluster(CL) with a const CL that @tune(CL=[1, 2]) chooses"
        if len(a.args) != 1 or a.kwargs:
            raise self.error(a.loc, "'@cluster' takes one argument", hint=form)
        c = self.const_eval(a.args[0])
        if isinstance(c, bool) or c not in CLUSTER_SIZES or isinstance(c, float):
            got = "a value known only at run time" if c is None else f"{c}"
            raise self.error(a.args[0].loc, "bad argument to '@cluster': expected a compile-time "
                             f"{', '.join(map(str, CLUSTER_SIZES[:-1]))} or {CLUSTER_SIZES[-1]} (CTAs per cluster), "
                             f"got {got}", hint=form)
        return {CLUSTER_ATTR: c} if c > 1 else {}

    def ann_warps(self, a: ast.Annotation) -> dict[str, object]:
        """`@warps(W)`: W a compile-time integer 0..MAX_BLOCK_WARPS (usually a const, so `@tune` can choose
        it): W >= 1 records `warps = W`, the block's compute warps, in place of `@warpgroups`' consumers
        (infer-layouts spreads the tiles over them; on sm_90a, W not a multiple of 4 only for kernels
        without `@`, whose wgmma needs whole warpgroups); 0 adds nothing (`@warpgroups` or the default
        sizes the block)."""
        form = "write @warps(2), or @warps(NW) with a const NW that @tune(NW=[0, 1, 2]) chooses"
        if len(a.args) != 1 or a.kwargs:
            raise self.error(a.loc, "'@warps' takes one argument", hint=form)
        c = self.const_eval(a.args[0])
        if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_BLOCK_WARPS:
            got = "a value known only at run time" if c is None else f"{c}"
            raise self.error(a.args[0].loc, f"bad argument to '@warps': expected a compile-time integer "
                             f"0..{MAX_BLOCK_WARPS} (the block's warps; 0: @warpgroups decides), got {got}",
                             hint=form)
        return {WARPS_ATTR: c} if c else {}

    def ann_warpgroups(self, a: ast.Annotation) -> dict[str, object]:
        if a.args or not a.kwargs:
            raise self.error(a.loc, "'@warpgroups' takes named arguments",
                             hint="write @warpgroups(consumers=2) or @warpgroups(consumers=2, producers=1)")
        roles: dict[str, object] = {}
        for key, e in a.kwargs:
            if key not in ("consumers", "producers"):
                raise self.error(e.loc, f"bad argument to '@warpgroups': unknown role '{key}'",
                                 hint="roles are consumers and producers")
            if key == "producers" and _is_int_zero(self.const_eval(e)):
                roles[key] = 0  # no producer warpgroup: the compute warpgroups copy with cp.async (ring buffers)
                continue
            roles[key] = self.ann_positive(a, e, "@warpgroups(consumers=2)")
        return {"warpgroups": roles}

    # --- statements ----------------------------------------------------------------------------

    def stmts(self, stmts: list[ast.Stmt]) -> None:
        for s in stmts:
            getattr(self, f"stmt_{type(s).__name__.lower()}")(s)

    def stmt_shareddecl(self, s: ast.SharedDecl) -> None:
        attrs = self.annotations(s.annotations, "shared").get("swizzle", {})
        if self.loop_depth:
            raise self.error(s.loc, f"shared tile '{s.name}' is declared inside a loop",
                             hint="declare shared tiles at the kernel's top level")
        t = self.resolve_type(s.type)
        if not is_shared(t):
            raise self.error(s.type.loc, f"'shared' declares st or sv, not {t}",
                             hint="register tiles are declared with 'reg'")
        self.smem_bytes += t.nbytes
        if self.smem_bytes > SMEM_PER_BLOCK:
            raise self.error(s.loc, f"shared memory overflow: '{s.name}' ({t}, {t.nbytes} bytes) brings the "
                             f"block's total to {self.smem_bytes} bytes, above the limit of {SMEM_PER_BLOCK} "
                             "bytes (227 KB)", hint="use smaller tiles")
        sym = self.declare(_Sym("shared", s.name, s.loc))
        sym.value = self.emit("tk.alloc", [], [t], s.loc, attrs, s.name).result

    def stmt_regdecl(self, s: ast.RegDecl) -> None:
        self.annotations(s.annotations, "none")
        t = self.resolve_type(s.type)
        if not is_register(t):
            raise self.error(s.type.loc, f"'reg' declares rt or rv, not {t}",
                             hint="shared tiles are declared with 'shared'; scalars with 'let'")
        sym = self.declare(_Sym("reg", s.name, s.loc, type=t))
        if s.init is not None:
            self.assign_reg(sym, "=", s.init, s.init.loc, {})

    def stmt_let(self, s: ast.Let) -> None:
        self.annotations(s.annotations, "none")
        e = self.use(self.expr(s.value))
        if e.is_const:
            self.declare(_Sym("const", s.name, s.loc, const=e.const))
            return
        if is_shared(e.value.type) or isinstance(e.value.type, GlobalType):
            raise self.error(s.value.loc, f"'let' binds scalars and register values, not {e.value.type}")
        if e.value.name is None:
            e.value.name = s.name
        if e.axis:
            self.axis_of[id(e.value)] = e.axis
        self.declare(_Sym("scalar", s.name, s.loc, value=e.value))

    def stmt_assign(self, s: ast.Assign) -> None:
        anns = self.annotations(s.annotations, "load")
        attrs = anns.get("no_tma", {})
        if attrs and not isinstance(s.value, ast.Index):
            raise self.error(s.annotations[0].loc, "'@no_tma' applies to a load statement (x = A[...])")
        target = s.target
        if isinstance(target, ast.Index):
            self.store_global(s, attrs)
            return
        if not isinstance(target, ast.Name):
            raise self.error(target.loc, "cannot assign to this expression",
                             hint="assign to a variable or to a global tile A[i, j]")
        sym = self.lookup(target.id)
        if sym is None:
            what = "assignment to" if s.op == "=" else f"'{s.op}' on"
            raise self.error(target.loc, f"{what} undeclared variable '{target.id}'",
                             hint=f"declare it first, e.g. `reg {target.id}: rt<f32, 64, 64> = 0`")
        if sym.kind == "reg":
            self.assign_reg(sym, s.op, s.value, s.loc, attrs)
        elif sym.kind == "shared":
            self.assign_shared(sym, s, attrs)
        elif sym.kind in ("const", "size"):
            raise self.error(target.loc, f"cannot assign to {sym.kind} '{sym.name}'",
                             hint="consts are set with -D NAME=VALUE; sizes come from the arguments")
        elif sym.kind == "global":
            raise self.error(target.loc, f"cannot assign to global '{sym.name}' as a whole",
                             hint=f"store a tile: {sym.name}[i, j] = ...")
        else:
            raise self.error(target.loc, f"cannot assign to '{sym.name}': let bindings, parameters and "
                             "loop indices are immutable", hint="declare a `reg` variable to update it")

    def stmt_for(self, s: ast.For) -> None:
        attrs = self.annotations(s.annotations, "for").get("stages", {})
        lo = self.index_value(self.expr(s.lo), "a loop bound")
        hi = self.index_value(self.expr(s.hi), "a loop bound")
        step = self.loop_step(s)
        assigned = _assigned_names(s.body)
        regs = [sym for n in assigned if (sym := self.lookup(n)) is not None and sym.kind == "reg"]
        carried = [sym for sym in regs if sym.current is not None]
        local = [sym for sym in regs if sym.current is None]
        blk = Block()
        index = blk.add_arg(Value(I32, s.var))
        inits = [sym.current for sym in carried]
        for sym in carried:
            sym.current = blk.add_arg(Value(sym.type, sym.name))
            if sym.axis:
                self.axis_of[id(sym.current)] = sym.axis
        op = self.emit("scf.for", [lo, hi, step, *inits], [sym.type for sym in carried], s.loc, attrs)
        for res, sym in zip(op.results, carried, strict=True):
            res.name = sym.name
        op.regions.append(Region(blk))
        op.regions[-1].parent = op
        outer = self.block
        self.block = blk
        self.scopes.append({})
        self.loop_depth += 1
        self.declare(_Sym("scalar", s.var, s.loc, value=index))
        self.stmts(s.body)
        self.emit("scf.yield", [sym.current for sym in carried], [], s.loc)
        self.loop_depth -= 1
        self.scopes.pop()
        self.block = outer
        for res, sym in zip(op.results, carried, strict=True):
            sym.current = res
            if sym.axis:
                self.axis_of[id(res)] = sym.axis
        for sym in local:  # assigned only inside the loop: no value after it
            sym.current = None

    def loop_step(self, s: ast.For) -> Value:
        """The step operand: 1 by default, a positive compile-time int, or a run-time i32 (assumed > 0)."""
        if s.step is None:
            return self.const_value(1, "i32", s.loc)
        c = self.const_eval(s.step)
        if c is not None and (not isinstance(c, int) or c <= 0):
            raise self.error(s.step.loc, f"a loop step must be a positive integer, got {c}",
                             hint="count down by rewriting the index, e.g. `hi - 1 - i`")
        return self.index_value(self.expr(s.step), "a loop step")

    def stmt_if(self, s: ast.If) -> None:
        self.annotations(s.annotations, "none")
        cond = self.const_eval(s.cond)
        if cond is None:
            self.runtime_if(s)
            return
        # Like `#if`: only the taken branch exists, and what it declares stays visible after it.
        # The other branch's names are checked all the same (frontend/names.py).
        visible = {n for scope in self.scopes for n in scope} | set(self.untaken_names())
        taken, untaken = (s.then, s.orelse or []) if cond else (s.orelse or [], s.then)
        self.stmts(taken)
        declared = check_untaken(untaken, visible, s.loc, VOCABULARY, self.source)
        self.untaken.append((self.scopes[-1], declared))

    def untaken_names(self) -> dict[str, Loc]:
        """Names declared only in untaken compile-time branches of the scopes visible now."""
        out: dict[str, Loc] = {}
        for scope, declared in self.untaken:
            if any(scope is s for s in self.scopes):
                out.update(declared)
        return out

    def runtime_if(self, s: ast.If) -> None:
        """`if c {..} else {..}` on a run-time scalar comparison -> arith.cmp + a two-region scf.if.

        Register variables assigned in a branch that have a value before the `if` are carried like a
        loop's (each region yields its value; after the `if` the name is the op's result); those
        first assigned inside a branch have no value after it."""
        c = self.if_condition(s.cond)
        branches = [s.then, s.orelse or []]
        for body in branches:
            for st in body:
                if isinstance(st, ast.SharedDecl):
                    raise self.error(st.loc, f"shared tile '{st.name}' is declared inside a run-time 'if'",
                                     hint="declare shared tiles at the kernel's top level")
        regs = [sym for n in _assigned_names(s.then + (s.orelse or []))
                if (sym := self.lookup(n)) is not None and sym.kind == "reg"]
        carried = [sym for sym in regs if sym.current is not None]
        before = {sym.name: (sym.current, sym.axis) for sym in regs}
        op = self.emit("scf.if", [c], [sym.type for sym in carried], s.loc, result_name=None)
        outer = self.block
        for body in branches:
            for sym in regs:
                sym.current, sym.axis = before[sym.name]
            blk = Block()
            op.regions.append(Region(blk))
            op.regions[-1].parent = op
            self.block = blk
            self.scopes.append({})
            self.stmts(body)
            self.emit("scf.yield", [sym.current for sym in carried], [], s.loc)
            self.scopes.pop()
            self.block = outer
        for res, sym in zip(op.results, carried, strict=True):
            res.name = sym.name
            sym.current = res
            if sym.axis:
                self.axis_of[id(res)] = sym.axis
        for sym in regs:
            if sym not in carried:  # assigned only inside a branch: no value after it
                sym.current = None

    def stmt_staticassert(self, s: ast.StaticAssert) -> None:
        """`static_assert(cond, "message")`: `cond` must fold, as a compile-time `if`'s condition does
        (nonzero is true); false is an error at the statement with the consts it reads. Nothing is
        emitted. In an untaken compile-time branch it is only name-checked (frontend/names.py)."""
        self.annotations(s.annotations, "none")
        cond = self.const_eval(s.cond)
        if cond is None:
            self.check_names(s.cond)  # a misspelt name is that error, not "not compile-time"
            at, why = self.runtime_part(s.cond)
            raise self.error(at.loc, "static_assert needs a compile-time condition",
                             hint=f"{why}; a static_assert tests what is known when the kernel is compiled: "
                                  "consts, numbers and `let`s of them")
        if not cond:
            values = ", ".join(f"{n} = {v}" for n, v in self.consts_read(s.cond).items())
            msg = f"static_assert failed: {s.message}" if s.message else "static_assert failed"
            raise self.error(s.loc, msg + (f" ({values})" if values else ""))

    def check_names(self, e: ast.Expr) -> None:
        """The name errors of `e` (unknown names, functions, attributes, argument counts), emitting nothing."""
        if isinstance(e, ast.Name) and self.lookup(e.id) is None and e.id != "inf":
            self.expr_name(e)  # raises: unknown name (a note if an untaken branch declares it)
        if isinstance(e, ast.Attr):
            if isinstance(e.base, ast.Name) and e.base.id == "block" and self.lookup("block") is None:
                if e.name not in BLOCK_DIMS:
                    raise self.error(e.loc, f"unknown block index 'block.{e.name}'", hint="use block.x, .y or .z")
                return
            if e.name != "T":
                raise self.error(e.loc, f"unknown attribute '.{e.name}'", hint="tiles have .T (transpose)")
        if isinstance(e, ast.Call):
            self.check_call(e)
        for x in _parts(e):
            self.check_names(x)

    def runtime_part(self, e: ast.Expr) -> tuple[ast.Expr, str]:
        """The innermost part of `e` that is not compile-time (all of its own parts are), and why."""
        if isinstance(e, ast.Attr) and isinstance(e.base, ast.Name) and e.base.id == "block" \
                and self.lookup("block") is None:
            return e, f"'block.{e.name}' is known only when the kernel runs"
        for x in _parts(e):
            if self.const_eval(x) is None:
                return self.runtime_part(x)
        if isinstance(e, ast.Name):
            sym = self.lookup(e.id)
            if sym.kind == "size":
                return e, f"'{e.id}' is a size, known only when the kernel is launched"
            if sym.kind == "scalar":
                return e, f"'{e.id}' is a run-time value"
            return e, f"'{e.id}' is a {_KIND_WORDS[sym.kind]}"
        if isinstance(e, ast.Call):
            return e, f"'{e.func}' computes at run time"
        if isinstance(e, ast.BinOp) and e.op == "@":
            return e, "'@' multiplies tiles at run time"
        return e, "this is known only at run time"

    def consts_read(self, e: ast.Expr) -> dict[str, int | float]:
        """The consts (and compile-time `let`s) that `e` names, in the order written."""
        out: dict[str, int | float] = {}
        if isinstance(e, ast.Name):
            sym = self.lookup(e.id)
            if sym is not None and sym.kind == "const":
                out[e.id] = sym.const
        for x in _parts(e):
            out.update((k, v) for k, v in self.consts_read(x).items() if k not in out)
        return out

    def if_condition(self, e: ast.Expr) -> Value:
        """A run-time `if` condition: one comparison of two scalars of one dtype -> arith.cmp (i1)."""
        if not isinstance(e, ast.Compare):
            raise self.error(e.loc, "a run-time 'if' condition must be a comparison",
                             hint="compare two scalars, e.g. `if j * BKV < N { ... }`")
        a, b = self.use(self.expr(e.lhs)), self.use(self.expr(e.rhs))
        for x in (a, b):
            if not x.is_const and not isinstance(x.value.type, ScalarType):
                raise self.error(x.loc, f"'{e.op}' compares scalars, not {x.value.type}",
                                 hint="run-time conditions compare scalars (sizes, block ids, loop indices)")
        dtypes = {x.value.type.dtype for x in (a, b) if not x.is_const}
        if len(dtypes) > 1:
            raise self.error(e.loc, f"scalar type mismatch in '{e.op}': {a.value.type} and {b.value.type}",
                             hint="cast one side, e.g. f32(x) or i32(x)")
        dtype = dtypes.pop()
        va, vb = self.scalar_operand(a, dtype), self.scalar_operand(b, dtype)
        pred = {"==": "eq", "!=": "ne", "<": "lt", "<=": "le", ">": "gt", ">=": "ge"}[e.op]
        return self.emit("arith.cmp", [va, vb], [ScalarType("i1")], e.loc, {"pred": Ident(pred)}).result

    # --- assignments ---------------------------------------------------------------------------

    def assign_reg(self, sym: _Sym, op: str, value: ast.Expr, loc: Loc, attrs: dict[str, object]) -> None:
        t = sym.type
        if op == "+=" and isinstance(value, ast.BinOp) and value.op == "@":
            acc = self.read_reg(sym, loc)
            e = self.mma(self.expr(value.lhs), self.expr(value.rhs), value.loc, acc)
        elif op != "=":
            cur = _E(loc, value=self.read_reg(sym, loc), axis=sym.axis)
            e = self.arith(op[0], cur, self.expr(value), loc)
        else:
            e = self.expr(value)
        if e.gref is not None:
            gl, coords = e.gref
            self.check_global_access(gl.type, t, e.loc, f"loading into '{sym.name}'")
            self.check_extents(gl, t, e.coords or [])
            new = self.emit("tk.load", [gl, *coords], [t], e.loc, attrs, sym.name).result
        elif e.is_const:
            new = self.emit("tk.fill", [], [t], e.loc, {"value": float(e.const)}, sym.name).result
        else:
            e = self.use(e)
            vt = e.value.type
            if isinstance(vt, ScalarType):
                raise self.error(e.loc, f"cannot assign run-time scalar ({vt}) to '{sym.name}' ({t})",
                                 hint="fill values must be compile-time constants")
            if isinstance(vt, GlobalType):
                raise self.error(e.loc, f"cannot assign the whole global '{e.value.name}' to '{sym.name}'",
                                 hint=f"index one tile: {e.value.name}[i, j]")
            self.check_same(vt, t, e.loc, f"assigning {vt} to '{sym.name}' ({t})")
            if is_shared(vt):
                new = self.emit("tk.load", [e.value], [t], e.loc, {}, sym.name).result
            else:
                new = e.value
        if new.name is None:
            new.name = sym.name
        sym.current = new
        if e.axis:
            sym.axis = e.axis
        if sym.axis:
            self.axis_of[id(new)] = sym.axis

    def read_reg(self, sym: _Sym, loc: Loc) -> Value:
        if sym.current is None:
            raise self.error(loc, f"register variable '{sym.name}' is used before it is initialized",
                             hint=f"give it a value first, e.g. `reg {sym.name}: {sym.type} = 0`")
        return sym.current

    def assign_shared(self, sym: _Sym, s: ast.Assign, attrs: dict[str, object]) -> None:
        t = sym.value.type
        if s.op != "=":
            raise self.error(s.loc, f"'{s.op}' on shared tile '{sym.name}'",
                             hint="compute in registers (`reg`), then store with `=`")
        e = self.expr(s.value)
        if e.gref is not None:
            gl, coords = e.gref
            self.check_global_access(gl.type, t, e.loc, f"loading into '{sym.name}'")
            self.check_extents(gl, t, e.coords or [])
            self.emit("tk.load", [sym.value, gl, *coords], [], e.loc, attrs)
            return
        if e.is_const or isinstance(e.value.type, (ScalarType, GlobalType)) or is_shared(e.value.type):
            raise self.error(e.loc, f"cannot assign {self.type_text(e)} to shared '{sym.name}' ({t})",
                             hint=f"assign a global tile ({sym.name} = A[i, j]) or a register value")
        e = self.use(e)
        self.check_same(e.value.type, t, e.loc, f"storing {e.value.type} into '{sym.name}' ({t})")
        self.emit("tk.store", [sym.value, e.value], [], e.loc)

    def store_global(self, s: ast.Assign, attrs: dict[str, object]) -> None:
        target = s.target
        dst = self.expr(target)
        if dst.gref is None:
            raise self.error(target.loc, "cannot assign to this expression")
        if s.op != "=":
            raise self.error(s.loc, f"'{s.op}' on a global tile",
                             hint="load it, update it in registers, and store it with `=`")
        gl, coords = dst.gref
        e = self.expr(s.value)
        if e.is_const or e.gref is not None or isinstance(e.value.type, (ScalarType, GlobalType)):
            raise self.error(e.loc, f"cannot store {self.type_text(e)} into a tile of '{gl.name}'",
                             hint="store a register or shared tile")
        e = self.use(e)
        self.check_global_access(gl.type, e.value.type, s.loc, f"storing {e.value.type} into '{gl.name}'")
        self.check_extents(gl, e.value.type, dst.coords or [])
        self.emit("tk.store", [gl, e.value, *coords], [], s.loc, attrs)

    def check_global_access(self, g: GlobalType, t: Type, loc: Loc, what: str) -> None:
        rank = 2 if isinstance(t, TileType) else 1
        if g.rank < rank:
            raise self.error(loc, f"{what}: a {t} needs a global of rank >= {rank}, got {g}")
        if g.dtype != t.dtype:
            raise self.error(loc, f"{what}: dtype mismatch, {t} and {g}",
                             hint=f"cast it first, e.g. {g.dtype}(x)")
        extents = (t.rows, t.cols) if isinstance(t, TileType) else (t.n,)
        for dim, n in zip(g.dims[-rank:], extents, strict=True):
            if isinstance(dim, int) and dim % n:
                raise self.error(loc, f"{what}: global dim {dim} is not a multiple of the tile's {n}")

    def check_extents(self, gl: Value, t: Type, coords: list[_E]) -> None:
        """A compile-time coordinate of a dim whose extent is a number must address inside it: the
        last two (a tile) or last one (a vector) count in tiles of `t`, the others in elements. An
        access wholly outside the tensor silently reads zeros or writes nothing where the copy is
        TMA or masked, and goes past the tensor where it is not (issue 14)."""
        g: GlobalType = gl.type
        tiled = (t.rows, t.cols) if isinstance(t, TileType) else (t.n,)
        extents = (1,) * (g.rank - len(tiled)) + tiled
        for i, (c, dim, n) in enumerate(zip(coords, g.dims, extents, strict=True)):
            if not (c.is_const and isinstance(c.const, int) and isinstance(dim, int) and c.const * n >= dim):
                continue
            if n > 1:  # dim is a multiple of n (check_global_access)
                raise self.error(c.loc, f"tile coordinate {c.const} is past the end of dim {i} of '{gl.name}' "
                                 f"({g}): tile {c.const} of {n} starts at element {c.const * n}",
                                 hint=f"dim {i} holds {dim // n} tile{'s' * (dim > n)} of {n} (coordinates "
                                      f"0..{dim // n - 1})")
            raise self.error(c.loc, f"coordinate {c.const} is past the end of dim {i} of '{gl.name}' ({g})",
                             hint=f"dim {i} has {dim} element{'s' * (dim > 1)} (coordinates 0..{dim - 1})")

    def check_same(self, got: Type, want: Type, loc: Loc, what: str) -> None:
        if isinstance(got, TileType) != isinstance(want, TileType) or _shape(got) != _shape(want):
            raise self.error(loc, f"shape mismatch: {what}")
        if got.dtype != want.dtype:
            raise self.error(loc, f"dtype mismatch: {what}", hint=f"cast it: {want.dtype}(...)")

    # --- expressions ---------------------------------------------------------------------------

    def const_eval(self, e: ast.Expr) -> int | float | None:
        """The value of a compile-time expression, or None if any part is known only at run time."""
        if isinstance(e, ast.Num):
            return e.value
        if isinstance(e, ast.Name):
            if e.id == "inf" and self.lookup("inf") is None:
                return math.inf
            sym = self.lookup(e.id)
            return sym.const if sym is not None and sym.kind == "const" else None
        if isinstance(e, ast.Neg):
            c = self.const_eval(e.operand)
            return None if c is None else -c
        if isinstance(e, (ast.BinOp, ast.Compare)):
            a, b = self.const_eval(e.lhs), self.const_eval(e.rhs)
            if a is None or b is None or getattr(e, "op", "") == "@":
                return None
            if isinstance(e, ast.Compare):
                return int(scalar.COMPARE[CMP_PREDS[e.op]](a, b))
            r = _fold(e.op, a, b)
            if r is None:
                raise self.error(e.loc, "division by zero in a compile-time expression")
            return r
        if isinstance(e, ast.Call) and e.func in ("max", "min", "cdiv") and len(e.args) == 2:
            a, b = self.const_eval(e.args[0]), self.const_eval(e.args[1])
            if a is None or b is None:
                return None
            r = _fold(e.func, a, b)
            if r is None:
                raise self.error(e.loc, "division by zero in a compile-time expression")
            return r
        if isinstance(e, ast.Call) and (e.func in UNARY_FUNCS or e.func in CAST_FUNCS) and len(e.args) == 1:
            c = self.const_eval(e.args[0])
            return None if c is None else self.fold_call(e.func, c, e.loc)
        return None

    def fold_call(self, f: str, c: int | float, loc: Loc) -> int | float:
        """A math function or cast of a compile-time number (`sqrt(D)`, `f32(BM)`, `i32(x)`)."""
        if f == "i32":
            if not math.isfinite(c):
                raise self.error(loc, f"'i32({c})' is not an integer", hint="i32(x) needs a finite x")
            return int(c)
        if f in CAST_FUNCS:
            return float(c)
        try:
            return float(UNARY_FUNCS[f](c))
        except (ValueError, OverflowError, ZeroDivisionError):
            raise self.error(loc, f"'{f}({c})' is undefined") from None

    def expr(self, e: ast.Expr) -> _E:
        c = self.const_eval(e)
        if c is not None:
            return _E(e.loc, const=c, name=e.id if isinstance(e, ast.Name) else None)
        return getattr(self, f"expr_{type(e).__name__.lower()}")(e)

    def expr_num(self, e: ast.Num) -> _E:  # pragma: no cover - Num is always folded by const_eval
        return _E(e.loc, const=e.value)

    def expr_name(self, e: ast.Name) -> _E:
        sym = self.lookup(e.id)
        if sym is None:
            if e.id == "block":
                raise self.error(e.loc, "'block' needs .x, .y or .z")
            close = close_matches(e.id, [n for s in self.scopes for n in s], n=1)
            untaken = self.untaken_names().get(e.id)
            if untaken is not None:
                raise self.error(e.loc, f"unknown name '{e.id}'", hint=f"'{e.id}' is declared at line "
                                 f"{untaken.line}, in a compile-time branch these consts do not take")
            raise self.error(e.loc, f"unknown name '{e.id}'",
                             hint=f"did you mean '{close[0]}'?" if close else None)
        if sym.kind == "size":
            return _E(e.loc, value=self.size_value(sym.name, e.loc))
        if sym.kind == "reg":
            v = self.read_reg(sym, e.loc)
            return _E(e.loc, value=v, axis=sym.axis or self.axis_of.get(id(v)))
        return _E(e.loc, value=sym.value, axis=self.axis_of.get(id(sym.value)))

    def expr_attr(self, e: ast.Attr) -> _E:
        if isinstance(e.base, ast.Name) and e.base.id == "block" and self.lookup("block") is None:
            if e.name not in BLOCK_DIMS:
                raise self.error(e.loc, f"unknown block index 'block.{e.name}'", hint="use block.x, .y or .z")
            dim = BLOCK_DIMS[e.name]
            v = self.emit_prologue(("block", dim), "tk.block_id", I32, e.loc, {"dim": dim},
                                   BLOCK_ID_NAMES[dim])
            return _E(e.loc, value=v)
        base = self.expr(e.base)
        if e.name != "T":
            raise self.error(e.loc, f"unknown attribute '.{e.name}'", hint="tiles have .T (transpose)")
        if base.is_const or base.gref is not None or not isinstance(base.value.type, TileType):
            raise self.error(e.loc, f"'.T' transposes tiles, not {self.type_text(base)}")
        return _E(e.loc, value=base.value, trans=not base.trans)

    def tile_coordinate(self, e: _E) -> Value:
        """One coordinate of a global access; a compile-time one must not be negative (the
        interpreter dropped such a store, the GPU would write before the tensor)."""
        if e.is_const and isinstance(e.const, int) and e.const < 0:
            raise self.error(e.loc, f"coordinate {e.const} is negative", hint="coordinates count from 0")
        return self.index_value(e, "a coordinate")

    def expr_index(self, e: ast.Index) -> _E:
        base = self.use(self.expr(e.base))
        if base.is_const or not isinstance(base.value.type, GlobalType):
            raise self.error(e.loc, f"only global tensors can be indexed, not {self.type_text(base)}")
        g = base.value.type
        if len(e.indices) != g.rank:
            raise self.error(e.loc, f"wrong number of coordinates: '{base.value.name}' is {g} "
                             f"({g.rank} dims), got {len(e.indices)}",
                             hint="give one coordinate per dim; the last two (a tile) or last one (a "
                                  "vector) count in tiles")
        exprs: list[_E] = []
        coords: list[Value] = []
        for i in e.indices:  # one at a time: the order of the prologue's constants stays the source's
            exprs.append(self.expr(i))
            coords.append(self.tile_coordinate(exprs[-1]))
        return _E(e.loc, gref=(base.value, coords), coords=exprs)

    def index_value(self, e: _E, what: str) -> Value:
        if e.is_const:
            if not isinstance(e.const, int):
                raise self.error(e.loc, f"{what} must be an integer, got {e.const}")
            return self.const_value(e.const, "i32", e.loc, e.name)
        e = self.use(e)
        if not (isinstance(e.value.type, ScalarType) and e.value.type.dtype in ("i32", "u32")):
            raise self.error(e.loc, f"{what} must be an integer scalar, got {e.value.type}")
        return e.value

    def expr_compare(self, e: ast.Compare) -> _E:
        """`a < b` with a register tile/vector on one side -> tk.cmp (an i1 tile)."""
        a, b = self.use(self.expr(e.lhs)), self.use(self.expr(e.rhs))
        ka, kb = self.shaped_kind(a, e.op), self.shaped_kind(b, e.op)
        if ka == kb == "scalar":
            raise self.error(e.loc, "run-time scalar comparisons are not supported yet",
                             hint="compare compile-time constants, or tiles elementwise (`s < x`)")
        operands, attrs, ref, _ = self.elementwise(e.op, a, b, ka, kb, e.loc)
        if ref.dtype == PREDICATE_DTYPE:
            raise self.error(e.loc, f"'{e.op}' compares values, not predicates ({ref})",
                             hint="combine conditions with where(c, ...)")
        v = self.emit("tk.cmp", operands, [ref.bare().with_dtype(PREDICATE_DTYPE)], e.loc,
                      {"pred": Ident(CMP_PREDS[e.op]), **attrs}).result
        return _E(e.loc, value=v)

    def expr_neg(self, e: ast.Neg) -> _E:
        x = self.use(self.expr(e.operand))
        t = x.value.type
        if isinstance(t, GlobalType) or is_shared(t):
            raise self.error(e.loc, f"cannot negate {t}", hint="load it into a `reg` first")
        if isinstance(t, ScalarType) and t.dtype in ("i32", "u32"):
            zero = self.const_value(0, t.dtype, e.loc)
            return _E(e.loc, value=self.emit("arith.sub", [zero, x.value], [t], e.loc).result)
        if t.dtype not in FLOAT_DTYPES:  # i32 tiles: 0 - x (tk.neg is float-only)
            self.check_tile_arith("-", t, e.loc)
            zero = self.const_value(0, t.dtype, e.loc)
            return _E(e.loc, value=self.emit("tk.sub", [zero, x.value], [t.bare()], e.loc).result, axis=x.axis)
        return _E(e.loc, value=self.emit("tk.neg", [x.value], [t], e.loc).result, axis=x.axis)

    def expr_binop(self, e: ast.BinOp) -> _E:
        if e.op == "@":
            return self.mma(self.expr(e.lhs), self.expr(e.rhs), e.loc, None)
        return self.arith(e.op, self.expr(e.lhs), self.expr(e.rhs), e.loc)

    def use(self, e: _E) -> _E:
        """Materialize a pending `.T` (outside an `@`) and reject unloaded global tiles."""
        if e.gref is not None:
            raise self.error(e.loc, f"a tile of '{e.gref[0].name}' must be loaded before it is used",
                             hint="assign it to a `shared` or `reg` variable first")
        if e.trans:
            t = e.value.type
            rt = TileType("rt", t.dtype, t.cols, t.rows)
            if is_shared(t):  # a transposed shared -> register read
                return _E(e.loc, value=self.emit("tk.load", [e.value], [rt], e.loc, {"trans": True}).result)
            return _E(e.loc, value=self.emit("tk.transpose", [e.value], [rt], e.loc).result)
        return e

    def shaped_kind(self, e: _E, op: str) -> str:
        """'scalar', 'tile' or 'vector' for an elementwise operand; errors for memory operands."""
        if e.is_const or isinstance(e.value.type, ScalarType):
            return "scalar"
        t = e.value.type
        if isinstance(t, GlobalType):
            raise self.error(e.loc, f"'{op}' on global '{e.value.name}'", hint="load a tile of it first")
        if is_shared(t):
            raise self.error(e.loc, f"'{op}' computes on registers, but '{e.value.name}' is shared ({t})",
                             hint="load it into a `reg` first")
        return "tile" if isinstance(t, TileType) else "vector"

    def scalar_operand(self, e: _E, dtype: str) -> Value:
        """A scalar operand of a tile op or a run-time scalar op, in `dtype`."""
        if e.is_const:
            return self.const_value(e.const, dtype, e.loc, e.name)
        if e.value.type.dtype == dtype:
            return e.value
        if dtype in FLOAT_DTYPES and e.value.type.dtype in ("i32", "u32"):
            return self.emit("arith.cast", [e.value], [ScalarType(dtype)], e.loc).result
        raise self.error(e.loc, f"scalar type mismatch: {e.value.type} where {dtype} is needed",
                         hint=f"cast it: {dtype}(...)")

    def arith(self, op: str, a: _E, b: _E, loc: Loc) -> _E:
        """`a op b` for + - * / % max min: folded, scalar (arith.*), or elementwise (tk.*)."""
        if a.is_const and b.is_const:
            r = _fold(op, a.const, b.const)
            if r is None:
                raise self.error(loc, "division by zero in a compile-time expression")
            return _E(loc, const=r)
        if op in ("/", "%") and b.is_const and b.const == 0:
            raise self.error(loc, f"division by zero: the right side of '{op}' is 0")
        a, b = self.use(a), self.use(b)
        ka, kb = self.shaped_kind(a, op), self.shaped_kind(b, op)
        name = BINARY_NAMES[op]
        if ka == kb == "scalar":
            return self.scalar_arith(name, a, b, loc)
        if op == "%":
            raise self.error(loc, "'%' is defined on integer scalars only")
        operands, attrs, ref, axis = self.elementwise(op, a, b, ka, kb, loc)
        self.check_tile_arith(op, ref, loc)
        v = self.emit(f"tk.{name}", operands, [ref.bare()], loc, attrs).result
        return _E(loc, value=v, axis=axis)

    def elementwise(self, op: str, a: _E, b: _E, ka: str, kb: str,
                    loc: Loc) -> tuple[list[Value], dict[str, object], Type, str | None]:
        """Operands, attrs (bcast), the shaped operand's type and the vector axis of `a op b`.

        At least one side is a register tile or vector. A scalar operand is f32 for float tiles
        and the tile's dtype for integer tiles; vectors broadcast over tiles (bcast = row|col)."""
        if "scalar" in (ka, kb):
            shaped, other = (a, b) if kb == "scalar" else (b, a)
            t = shaped.value.type
            sv = self.scalar_operand(other, "f32" if t.dtype in FLOAT_DTYPES else t.dtype)
            operands = [shaped.value, sv] if kb == "scalar" else [sv, shaped.value]
            return operands, {}, t, shaped.axis
        ta, tb = a.value.type, b.value.type
        if ta.dtype != tb.dtype:
            raise self.error(loc, f"dtype mismatch in '{op}': {ta} and {tb}",
                             hint="cast one side, e.g. f32(x)")
        if ka == kb:
            if ta.bare() != tb.bare():
                raise self.error(loc, f"shape mismatch in '{op}': {ta} and {tb}")
            return [a.value, b.value], {}, ta, a.axis or b.axis
        tile, vec = (a, b) if ka == "tile" else (b, a)
        tt, vt = tile.value.type, vec.value.type
        attrs: dict[str, object] = {"bcast": Ident(self.bcast_axis(tt, vt, vec.axis, op, loc))}
        return [a.value, b.value], attrs, tt, None

    def check_tile_arith(self, op: str, t: Type, loc: Loc) -> None:
        """Integer tiles take + - * min max; predicate (i1) tiles take no arithmetic."""
        if t.dtype == PREDICATE_DTYPE:
            raise self.error(loc, f"'{op}' on a predicate ({t})", hint="use where(c, a, b) to pick values")
        if t.dtype not in FLOAT_DTYPES and op == "/":
            raise self.error(loc, f"'/' on an integer tile ({t}) is not supported",
                             hint="integer tiles take + - * min max; cast with f32(...) to divide")

    def bcast_axis(self, t: TileType, v: VectorType, axis: str | None, op: str, loc: Loc) -> str:
        if axis is not None:
            want = t.rows if axis == "row" else t.cols
            if v.n != want:
                raise self.error(loc, f"shape mismatch in '{op}': a {axis} vector of {t} has {want} "
                                 f"elements, got {v}")
            return axis
        if v.n == t.rows and v.n != t.cols:
            return "row"
        if v.n == t.cols and v.n != t.rows:
            return "col"
        if v.n == t.rows:
            raise self.error(loc, f"ambiguous broadcast in '{op}': {v} fits both the rows and cols of {t}",
                             hint="say which with row(v) (one value per row) or col(v) (one per column)")
        raise self.error(loc, f"shape mismatch in '{op}': {v} fits neither the rows ({t.rows}) nor the "
                         f"cols ({t.cols}) of {t}")

    def scalar_arith(self, name: str, a: _E, b: _E, loc: Loc) -> _E:
        dtypes = {x.value.type.dtype for x in (a, b) if not x.is_const}
        if len(dtypes) > 1:
            raise self.error(loc, f"scalar type mismatch: {a.value.type} and {b.value.type}",
                             hint="cast one side, e.g. f32(x) or i32(x)")
        dtype = dtypes.pop()
        va, vb = self.scalar_operand(a, dtype), self.scalar_operand(b, dtype)
        return _E(loc, value=self.emit(f"arith.{name}", [va, vb], [ScalarType(dtype)], loc).result)

    def mma(self, a: _E, b: _E, loc: Loc, acc: Value | None) -> _E:
        """`a @ b` (zero accumulator) or `acc += a @ b` -> tk.mma, transposes as attributes."""
        for x in (a, b):
            if x.gref is not None:
                raise self.error(x.loc, f"'@' needs a loaded tile; '{x.gref[0].name}[...]' is not loaded",
                                 hint="assign it to a `shared` variable first")
            if x.is_const or not isinstance(x.value.type, TileType):
                raise self.error(loc, f"'@' multiplies tiles, got {self.type_text(x)}",
                                 hint="use '*' for elementwise or scalar products")
        ta, tb = a.value.type, b.value.type
        if ta.dtype not in FLOAT_DTYPES:
            raise self.error(loc, f"'@' multiplies float tiles, got {ta}", hint="cast it: bf16(...)")
        if ta.dtype != tb.dtype:
            raise self.error(loc, f"dtype mismatch in '@': {ta} @ {tb}",
                             hint="cast both operands to one dtype")
        if ta.dtype not in MMA_OPERAND_DTYPES:  # wgmma/mma.sync k16 forms (tf32 and fp8 are not lowered)
            raise self.error(loc, f"'@' multiplies bf16 or f16 tiles (f32 accumulation), got {ta} @ {tb}",
                             hint="cast the operands first: bf16(x)")
        m, ka = (ta.cols, ta.rows) if a.trans else (ta.rows, ta.cols)
        kb, n = (tb.cols, tb.rows) if b.trans else (tb.rows, tb.cols)
        if ka != kb:
            raise self.error(loc, f"shape mismatch in '@': {m}x{ka} @ {kb}x{n} "
                             f"(inner dims {ka} and {kb} differ)")
        ctype = TileType("rt", "f32", m, n)
        if acc is None:
            acc = self.emit("tk.fill", [], [ctype], loc, {"value": 0.0}).result
        elif acc.type.bare() != ctype:
            raise self.error(loc, f"accumulator mismatch: {acc.type} += {m}x{n} product",
                             hint=f"the accumulator of this '@' must be {ctype}")
        attrs: dict[str, object] = {}
        if a.trans:
            attrs["trans_a"] = True
        if b.trans:
            attrs["trans_b"] = True
        return _E(loc, value=self.emit("tk.mma", [a.value, b.value, acc], [acc.type], loc, attrs).result)

    # --- calls ---------------------------------------------------------------------------------

    def check_call(self, e: ast.Call) -> None:
        """The function exists and gets an argument count it takes."""
        f = e.func
        if f not in ALL_FUNCS:
            close = close_matches(f, ALL_FUNCS, n=1)
            raise self.error(e.loc, f"unknown function '{f}'",
                             hint=f"did you mean '{close[0]}'?" if close else None)
        if f == "mask_causal":
            if len(e.args) not in (3, 4):
                raise self.error(e.loc, f"'mask_causal' takes 3 or 4 arguments, got {len(e.args)}")
        elif len(e.args) != (nargs := N_ARGS.get(f, 1)):
            raise self.error(e.loc, f"'{f}' takes {nargs} argument{'s' * (nargs > 1)}, got {len(e.args)}")

    def expr_call(self, e: ast.Call) -> _E:
        f = e.func
        self.check_call(e)
        args = [self.expr(x) for x in e.args]
        if f == "where":
            return self.where(*args, e.loc)
        if f in ("max", "min"):
            return self.arith(f, args[0], args[1], e.loc)
        if f in OUTER_FUNCS:
            return self.outer(f, self.use(args[0]), self.use(args[1]), e.loc)
        if f == "cdiv":
            if args[1].is_const and args[1].const == 0:
                raise self.error(e.loc, "division by zero: the divisor of 'cdiv' is 0")
            x, y = (self.index_value(a, "an argument of 'cdiv'") for a in args)
            return _E(e.loc, value=self.emit("arith.cdiv", [x, y], [I32], e.loc).result)
        x = self.use(args[0])
        if f in UNARY_FUNCS:
            return self.unary(f, x, e.loc)
        if f in CAST_FUNCS:
            return self.cast(f, x, e.loc)
        if f in REDUCTIONS:
            return self.reduce(f, x, e.loc)
        if f in ("row", "col"):
            if x.is_const or not (isinstance(x.value.type, VectorType) and is_register(x.value.type)):
                raise self.error(e.loc, f"'{f}' marks a register vector, not {self.type_text(x)}")
            return _E(e.loc, value=x.value, axis=f)
        if f in INDEX_FUNCS:
            return self.index_tile(f, x, e.loc)
        return self.mask_causal(x, args[1], args[2], args[3] if len(args) > 3 else None, e.loc)

    def unary(self, f: str, x: _E, loc: Loc) -> _E:
        if x.is_const:  # pragma: no cover - const_eval folds a call of a compile-time number
            return _E(loc, const=self.fold_call(f, x.const, loc))
        t = x.value.type
        self.shaped_kind(x, f)
        if t.dtype not in FLOAT_DTYPES:
            raise self.error(loc, f"'{f}' needs a float operand, got {t}", hint="cast it: f32(...)")
        rtype = t if isinstance(t, ScalarType) else t.bare()
        return _E(loc, value=self.emit(f"tk.{f}", [x.value], [rtype], loc).result, axis=x.axis)

    def cast(self, f: str, x: _E, loc: Loc) -> _E:
        if x.is_const:  # pragma: no cover - const_eval folds a call of a compile-time number
            return _E(loc, const=self.fold_call(f, x.const, loc))
        t = x.value.type
        if isinstance(t, ScalarType):
            if t.dtype == f:
                return x
            return _E(loc, value=self.emit("arith.cast", [x.value], [ScalarType(f)], loc).result)
        self.shaped_kind(x, f)
        if f not in FLOAT_DTYPES:
            raise self.error(loc, f"tiles and vectors cast to float dtypes, not '{f}'")
        if t.dtype == PREDICATE_DTYPE:
            raise self.error(loc, f"cannot cast a predicate ({t}) to {f}", hint="use where(c, 1.0, 0.0)")
        v = self.emit("tk.cast", [x.value], [t.bare().with_dtype(f)], loc).result
        return _E(loc, value=v, axis=x.axis)

    def reduce(self, f: str, x: _E, loc: Loc) -> _E:
        kind, axis = REDUCTIONS[f]
        t = None if x.is_const else x.value.type
        if isinstance(t, TileType) and is_shared(t):
            raise self.error(loc, f"reduction of shared tile '{x.value.name}' ({t})",
                             hint="load it into a `reg` tile first")
        if not (isinstance(t, TileType) and is_register(t)):
            raise self.error(loc, f"'{f}' reduces a register tile, not {self.type_text(x)}")
        if t.dtype not in FLOAT_DTYPES:
            raise self.error(loc, f"'{f}' reduces float tiles, not {t}", hint="cast it: f32(...)")
        n = t.rows if axis == "row" else t.cols
        attrs = {"kind": Ident(kind), "axis": Ident(axis)}
        v = self.emit("tk.reduce", [x.value], [VectorType("rv", t.dtype, n)], loc, attrs).result
        self.axis_of[id(v)] = axis
        return _E(loc, value=v, axis=axis)

    def mask_causal(self, s: _E, row0: _E, col0: _E, fill: _E | None, loc: Loc) -> _E:
        t = None if s.is_const else s.value.type
        if not (isinstance(t, TileType) and is_register(t)) or t.dtype not in FLOAT_DTYPES:
            raise self.error(loc, f"'mask_causal' masks a float register tile, not {self.type_text(s)}")
        offsets = [self.index_value(x, "a mask offset") for x in (row0, col0)]
        if fill is not None and not fill.is_const:
            raise self.error(fill.loc, f"the fill of 'mask_causal' must be a compile-time number, got "
                             f"{self.type_text(fill)}", hint="for a run-time value use where(...)")
        value = -math.inf if fill is None else float(fill.const)
        v = self.emit("tk.mask_causal", [s.value, *offsets], [t.bare()], loc, {"fill": value}).result
        return _E(loc, value=v)

    def index_tile(self, f: str, x: _E, loc: Loc) -> _E:
        """row_index(x) / col_index(x) -> tk.index: an i32 tile of x's shape (and layout)."""
        t = None if x.is_const else x.value.type
        if not (isinstance(t, TileType) and is_register(t)):
            raise self.error(loc, f"'{f}' takes a register tile, not {self.type_text(x)}",
                             hint="load a shared tile into a `reg` first" if t is not None and is_shared(t)
                             else None)
        rtype = TileType("rt", "i32", t.rows, t.cols)
        v = self.emit("tk.index", [x.value], [rtype], loc, {"axis": Ident(INDEX_FUNCS[f])}).result
        return _E(loc, value=v)

    def outer(self, f: str, a: _E, b: _E, loc: Loc) -> _E:
        """row_outer(a, b) / col_outer(a, b) -> tk.outer {axis = row|col}: the outer product of each
        pair of rows (r[i, p*Cb + q] = a[i, p] b[i, q]) or of columns (r[p*Rb + q, j] = a[p, j] b[q, j])."""
        axis = OUTER_FUNCS[f]
        for x in (a, b):
            t = None if x.is_const else x.value.type
            if isinstance(t, TileType) and is_shared(t):
                raise self.error(x.loc, f"'{f}' multiplies register tiles; '{x.value.name}' is shared ({t})",
                                 hint="load it into a `reg` tile first")
            if not (isinstance(t, TileType) and is_register(t)):
                raise self.error(x.loc, f"'{f}' multiplies register tiles, not {self.type_text(x)}")
        ta, tb = a.value.type, b.value.type
        if ta.dtype != tb.dtype:
            raise self.error(loc, f"dtype mismatch in '{f}': {ta} and {tb}", hint="cast one side, e.g. bf16(x)")
        if ta.dtype not in FLOAT_DTYPES:
            raise self.error(loc, f"'{f}' multiplies float tiles, not {ta}", hint="cast it: f32(...)")
        if axis == "row":
            if ta.rows != tb.rows:
                raise self.error(loc, f"shape mismatch in '{f}': {ta} and {tb} (the row counts differ)")
            rows, cols = ta.rows, ta.cols * tb.cols
        else:
            if ta.cols != tb.cols:
                raise self.error(loc, f"shape mismatch in '{f}': {ta} and {tb} (the column counts differ)")
            rows, cols = ta.rows * tb.rows, ta.cols
        nbytes = rows * cols * DTYPE_BYTES[ta.dtype]
        if nbytes > REGISTER_FILE_BYTES:
            raise self.error(loc, f"'{f}' of {ta} and {tb} is rt<{ta.dtype}, {rows}, {cols}> ({nbytes} bytes): "
                                  f"more than an SM's {REGISTER_FILE_BYTES}-byte register file")
        rtype = TileType("rt", ta.dtype, rows, cols)
        v = self.emit("tk.outer", [a.value, b.value], [rtype], loc, {"axis": Ident(axis)}).result
        return _E(loc, value=v)

    def where(self, c: _E, a: _E, b: _E, loc: Loc) -> _E:
        """where(c, a, b) -> tk.select: c an i1 tile/vector, a and b of its shape or scalars."""
        c = self.use(c)
        ct = None if c.is_const else c.value.type
        if not (is_register(ct) and ct.dtype == PREDICATE_DTYPE):
            raise self.error(c.loc, f"'where' needs a condition tile (a comparison such as s < x), "
                             f"got {self.type_text(c)}")
        a, b = self.use(a), self.use(b)
        shaped = [x for x in (a, b) if self.shaped_kind(x, "where") != "scalar"]
        if not shaped:
            raise self.error(loc, "'where' needs a tile or vector among its values; both are scalars",
                             hint="one of the two values gives the result's dtype")
        for x in shaped:
            xt = x.value.type
            if type(xt) is not type(ct) or _shape(xt) != _shape(ct):
                raise self.error(x.loc, f"shape mismatch in 'where': condition {ct}, value {xt}")
        ref = shaped[0].value.type
        if len(shaped) == 2 and shaped[1].value.type.dtype != ref.dtype:
            raise self.error(loc, f"dtype mismatch in 'where': {ref} and {shaped[1].value.type}",
                             hint="cast one side, e.g. f32(x)")
        if ref.dtype == PREDICATE_DTYPE:
            raise self.error(loc, f"'where' selects values, not predicates ({ref})")
        sdtype = "f32" if ref.dtype in FLOAT_DTYPES else ref.dtype
        ops = [x.value if any(x is y for y in shaped) else self.scalar_operand(x, sdtype) for x in (a, b)]
        v = self.emit("tk.select", [c.value, *ops], [ref.bare()], loc).result
        return _E(loc, value=v, axis=shaped[0].axis)


def _assigned_names(stmts: list[ast.Stmt]) -> list[str]:
    """Names assigned (`x = ...`, `x op= ...`) anywhere in `stmts`, in first-assignment order."""
    out: list[str] = []
    for s in stmts:
        if isinstance(s, ast.Assign) and isinstance(s.target, ast.Name) and s.target.id not in out:
            out.append(s.target.id)
        nested: list[list[ast.Stmt]] = []
        if isinstance(s, ast.For):
            nested = [s.body]
        elif isinstance(s, ast.If):
            nested = [s.then, s.orelse or []]
        for body in nested:
            out.extend(n for n in _assigned_names(body) if n not in out)
    return out


def _parts(e: ast.Expr) -> list[ast.Expr]:
    """The subexpressions of `e`."""
    if isinstance(e, (ast.BinOp, ast.Compare)):
        return [e.lhs, e.rhs]
    if isinstance(e, ast.Neg):
        return [e.operand]
    if isinstance(e, ast.Attr):
        return [e.base]
    if isinstance(e, ast.Index):
        return [e.base, *e.indices]
    if isinstance(e, ast.Call):
        return list(e.args)
    return []


def _shape(t: Type) -> tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else (t.n,)


def _is_int_zero(c: object) -> bool:
    """A compile-time integer 0 (not 0.0, not False): `@warpgroups(producers=0)`."""
    return type(c) is int and c == 0
