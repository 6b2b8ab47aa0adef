"""Statements: declarations, assignments, loops, `if`s and `static_assert`s, in source order.

`StatementLowering.stmts` lowers each statement by its entry of STATEMENTS. Register variables
are SSA-renamed (mem2reg style): an assignment makes a new value; a `for` loop (and a run-time
`if`) carries every register variable its body assigns that has a value before it (iter_args /
scf.yield / results). Shared tiles are memory: `a = A[i, j]` is `tk.load %a, %A, ...`. A
compile-time `if` is folded like `#if`: only the taken branch is lowered, the other is name-checked
(frontend/names.py). Assignments check what they load or store against the global's shape, dtype
and compile-time extents.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from tkir.diagnostics import TkirWarning
from tkir.frontend import ast
from tkir.frontend.annotations import ANNOTATIONS, check_annotations
from tkir.frontend.calls import CALLS, check_call
from tkir.frontend.exprs import BLOCK_DIMS, CMP_PREDS, ExpressionLowering
from tkir.frontend.names import Vocabulary, check_untaken
from tkir.frontend.operands import PREDICATE_DTYPE, gathered, shape
from tkir.frontend.scope import KIND_WORDS, Lowered, Symbol
from tkir.frontend.type_exprs import SCALAR_DTYPES, TENSOR_DTYPES, TYPE_KINDS, resolve_type
from tkir.ir import Block, Loc, Operation, Region, Value
from tkir.opdef import REDUCE_ATTR, REDUCE_DTYPES
from tkir.scalar import I32_MAX, INT_RANGES
from tkir.target import SMEM_PER_BLOCK
from tkir.types import I32, GlobalType, Ident, ScalarType, TileType, Type, is_register, is_shared

# what the name check of an untaken compile-time branch knows (frontend/names.py)
VOCABULARY = Vocabulary(
    functions={f: (b.least, b.most) for f, b in CALLS.items()},
    type_kinds=(*TYPE_KINDS, *SCALAR_DTYPES), dtypes=(*TENSOR_DTYPES, PREDICATE_DTYPE), annotations=ANNOTATIONS,
    block_dims=BLOCK_DIMS, implicit=("inf",))


class StatementLowering(ExpressionLowering):
    """The lowering of every kind of statement, into the block being built."""

    def stmts(self, stmts: list[ast.Stmt]) -> None:
        for s in stmts:
            STATEMENTS[type(s)](self, s)

    def stmt_shareddecl(self, s: ast.SharedDecl) -> None:
        attrs = check_annotations(self, s.annotations, "shared").get("swizzle", {})
        if self.loop_depth:
            raise self.error(s.loc, f"shared tile '{s.name}' is declared inside a loop",
                             hint="declare shared tiles at the kernel's top level")
        t = resolve_type(self, s.type)
        if not is_shared(t):
            raise self.error(s.type.loc, f"'shared' declares st or sv, not {t}",
                             hint="register tiles are declared with 'reg'")
        self.smem_bytes += t.nbytes
        if self.smem_bytes > SMEM_PER_BLOCK:
            raise self.error(s.loc, f"shared memory overflow: '{s.name}' ({t}, {t.nbytes} bytes) brings the "
                             f"block's total to {self.smem_bytes} bytes, above the limit of {SMEM_PER_BLOCK} "
                             "bytes (227 KB)", hint="use smaller tiles")
        sym = self.declare(Symbol("shared", s.name, s.loc))
        sym.value = self.emit("tk.alloc", [], [t], s.loc, attrs, s.name).result

    def stmt_regdecl(self, s: ast.RegDecl) -> None:
        check_annotations(self, s.annotations, "none")
        t = resolve_type(self, s.type)
        if not is_register(t):
            raise self.error(s.type.loc, f"'reg' declares rt or rv, not {t}",
                             hint="shared tiles are declared with 'shared'; scalars with 'let'")
        sym = self.declare(Symbol("reg", s.name, s.loc, type=t))
        if s.init is not None:
            self.assign_reg(sym, "=", s.init, s.init.loc, {})

    def stmt_let(self, s: ast.Let) -> None:
        check_annotations(self, s.annotations, "none")
        e = self.use(self.expr(s.value))
        if e.is_const:
            self.declare(Symbol("const", s.name, s.loc, const=e.const))
            return
        if is_shared(e.value.type) or isinstance(e.value.type, GlobalType):
            raise self.error(s.value.loc, f"'let' binds scalars and register values, not {e.value.type}")
        if e.value.name is None:
            e.value.name = s.name
        if e.axis:
            self.axis_of[id(e.value)] = e.axis
        self.declare(Symbol("scalar", s.name, s.loc, value=e.value))

    def stmt_assign(self, s: ast.Assign) -> None:
        anns = check_annotations(self, s.annotations, "load")
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
        attrs = check_annotations(self, s.annotations, "for").get("stages", {})
        lo = self.index_value(self.expr(s.lo), "a loop bound")
        hi = self.index_value(self.expr(s.hi), "a loop bound")
        step = self.loop_step(s)
        self.check_counter(s, hi)
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
        op.requested.update(attrs)  # @stages(n): pipeline-cp-async refuses a depth no pass honoured
        for res, sym in zip(op.results, carried, strict=True):
            res.name = sym.name
        op.regions.append(Region(blk))
        op.regions[-1].parent = op
        outer = self.block
        self.block = blk
        self.scopes.append({})
        self.loop_depth += 1
        self.declare(Symbol("scalar", s.var, s.loc, value=index))
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

    def check_counter(self, s: ast.For, hi: Value) -> None:
        """The loop runs `i = lo; while i < hi: ...; i += step` on an i32 counter (the GPU and the
        interpreter alike, tkir/scalar.py). A counter that passes 2**31 - 1 wraps and the loop never ends:
        with compile-time bounds and step that is an error; with a run-time lower bound, a warning. A
        run-time upper bound that multiplies two run-time values can wrap itself: a warning."""
        lo_c, hi_c = self.const_eval(s.lo), self.const_eval(s.hi)
        step_c = 1 if s.step is None else self.const_eval(s.step)
        if isinstance(hi_c, int) and isinstance(step_c, int) and hi_c - 1 + step_c > I32_MAX:
            if isinstance(lo_c, int):
                last = lo_c + (hi_c - 1 - lo_c) // step_c * step_c
                if lo_c < hi_c and last + step_c > I32_MAX:
                    raise self.error(s.hi.loc, f"the loop counter passes {I32_MAX} ({last} + {step_c}): the i32 "
                                     "counter would wrap and the loop never end",
                                     hint=f"keep the upper bound at most {I32_MAX + 1 - step_c}")
            else:
                self.warn(s.hi.loc, f"the loop counter can pass {I32_MAX} (up to {hi_c - 1} + {step_c}): the i32 "
                                    "counter would wrap and the loop never end")
        if _runtime_product(hi) is not None:
            self.warn(ast.left_spine(s.hi)[0].loc, "this loop bound multiplies two values known only at run time: past "
                                f"{I32_MAX} the product wraps (on the GPU and in the interpreter) and the loop "
                                "runs the wrapped count")

    def warn(self, loc: Loc, msg: str) -> None:
        warnings.warn(f"{loc}: {msg}", SourceWarning, stacklevel=2)

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
        check_annotations(self, s.annotations, "none")
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
        return self.emit("arith.cmp", [va, vb], [ScalarType("i1")], e.loc, {"pred": Ident(CMP_PREDS[e.op])}).result

    def stmt_staticassert(self, s: ast.StaticAssert) -> None:
        """`static_assert(cond, "message")`: `cond` must fold, as a compile-time `if`'s condition does
        (nonzero is true); false is an error at the statement with the consts it reads. Nothing is
        emitted. In an untaken compile-time branch it is only name-checked (frontend/names.py)."""
        check_annotations(self, s.annotations, "none")
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
        """The name errors of `e` (unknown names, functions, attributes, argument counts), emitting nothing;
        the parts in the order written (a stack, not recursion: a chain of operators may be long)."""
        todo = [e]
        while todo:
            e = todo.pop()
            if isinstance(e, ast.Name) and self.lookup(e.id) is None and e.id != "inf":
                self.expr_name(e)  # raises: unknown name (a note if an untaken branch declares it)
            if isinstance(e, ast.Attr):
                if isinstance(e.base, ast.Name) and e.base.id == "block" and self.lookup("block") is None:
                    if e.name not in BLOCK_DIMS:
                        raise self.error(e.loc, f"unknown block index 'block.{e.name}'",
                                         hint="use block.x, .y or .z")
                    continue
                if e.name != "T":
                    raise self.error(e.loc, f"unknown attribute '.{e.name}'", hint="tiles have .T (transpose)")
            if isinstance(e, ast.Call):
                check_call(self, e)
            todo.extend(reversed(_parts(e)))

    def runtime_part(self, e: ast.Expr) -> tuple[ast.Expr, str]:
        """The innermost part of `e` that is not compile-time (all of its own parts are), and why."""
        while True:
            if isinstance(e, ast.Attr) and isinstance(e.base, ast.Name) and e.base.id == "block" \
                    and self.lookup("block") is None:
                return e, f"'block.{e.name}' is known only when the kernel runs"
            inner = self.runtime_operand(e)
            if inner is None:
                break
            e = inner
        if isinstance(e, ast.Name):
            sym = self.lookup(e.id)
            if sym.kind == "size":
                return e, f"'{e.id}' is a size, known only when the kernel is launched"
            if sym.kind == "scalar":
                return e, f"'{e.id}' is a run-time value"
            return e, f"'{e.id}' is a {KIND_WORDS[sym.kind]}"
        if isinstance(e, ast.Call):
            return e, f"'{e.func}' computes at run time"
        if isinstance(e, ast.BinOp) and e.op == "@":
            return e, "'@' multiplies tiles at run time"
        return e, "this is known only at run time"

    def runtime_operand(self, e: ast.Expr) -> ast.Expr | None:
        """The first part of `e` that is not compile-time, or None. Of a chain of operators (ast.left_spine),
        the innermost link whose operands are not both compile-time: found in one pass up the chain."""
        if not isinstance(e, ast.BinOp):
            return next((x for x in _parts(e) if self.const_eval(x) is None), None)
        bottom, chain = ast.left_spine(e)
        value = self.const_eval(bottom)
        if value is None:
            return bottom
        for link in chain:
            rhs = self.const_eval(link.rhs)
            if rhs is None:
                return link.rhs
            value = self.fold_link(link, value, rhs)
            if value is None:  # both operands compile-time, the link not (`@`): the innermost part
                return None if link is e else link
        return None

    def consts_read(self, e: ast.Expr) -> dict[str, int | float]:
        """The consts (and compile-time `let`s) that `e` names, in the order written."""
        out: dict[str, int | float] = {}
        todo = [e]
        while todo:
            e = todo.pop()
            if isinstance(e, ast.Name) and e.id not in out:
                sym = self.lookup(e.id)
                if sym is not None and sym.kind == "const":
                    out[e.id] = sym.const
            todo.extend(reversed(_parts(e)))
        return out

    # --- assignments ---------------------------------------------------------------------------

    def assign_reg(self, sym: Symbol, op: str, value: ast.Expr, loc: Loc, attrs: dict[str, object]) -> None:
        t = sym.type
        if op == "+=" and isinstance(value, ast.BinOp) and value.op == "@":
            acc = self.read_reg(sym, loc)
            e = self.mma(self.expr(value.lhs), self.expr(value.rhs), value.loc, acc)
        elif op != "=":
            cur = Lowered(loc, value=self.read_reg(sym, loc), axis=sym.axis)
            e = self.arith(op[0], cur, self.expr(value), loc)
        else:
            e = self.expr(value)
        if e.gref is not None:
            gl, coords = e.gref
            self.check_global_access(gl.type, t, e.loc, f"loading into '{sym.name}'")
            self.check_extents(gl, t, e.coords or [])
            if gathered(coords):
                self.check_gather(gl, coords, t, e.loc, sym.name)
                new = self.emit("tk.gather", [gl, *coords], [t], e.loc, attrs, sym.name).result
            else:
                new = self.emit("tk.load", [gl, *coords], [t], e.loc, attrs, sym.name).result
        elif e.is_const:
            fill = self.fill_value(e.const, t.dtype, e.loc)
            new = self.emit("tk.fill", [], [t], e.loc, {"value": fill}, sym.name).result
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

    def assign_shared(self, sym: Symbol, s: ast.Assign, attrs: dict[str, object]) -> None:
        t = sym.value.type
        if s.op != "=":
            raise self.error(s.loc, f"'{s.op}' on shared tile '{sym.name}'",
                             hint="compute in registers (`reg`), then store with `=`")
        e = self.expr(s.value)
        if e.gref is not None:
            gl, coords = e.gref
            if gathered(coords):
                raise self.error(e.loc, f"a gather (rows of '{gl.name}' picked by a vector of indices) loads into a "
                                        f"register tile, not the shared '{sym.name}'",
                                 hint=f"declare a `reg` tile: reg x: rt<{gl.type.dtype}, rows, cols> = ...")
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
        if s.op not in ("=", "+="):
            raise self.error(s.loc, f"'{s.op}' on a global tile",
                             hint="`+=` adds into global memory; otherwise load it, update it in registers, "
                                  "and store it with `=`")
        gl, coords = dst.gref
        if gathered(coords):
            raise self.error(target.loc, f"a store to rows of '{gl.name}' picked by a vector of indices (a scatter) "
                                         "is not supported", hint="gathers load: x = A[idx, c]")
        if s.op == "+=" and gl.type.dtype not in REDUCE_DTYPES:
            raise self.error(s.loc, f"'+=' on a global tile of '{gl.name}' ({gl.type}): adding into global memory "
                                    "takes " + "/".join(REDUCE_DTYPES) + " tensors",
                             hint="accumulate into an f32 workspace and cast once at the end")
        e = self.expr(s.value)
        if e.is_const or e.gref is not None or isinstance(e.value.type, (ScalarType, GlobalType)):
            verb = "add" if s.op == "+=" else "store"
            raise self.error(e.loc, f"cannot {verb} {self.type_text(e)} into a tile of '{gl.name}'",
                             hint=f"{verb} a register or shared tile")
        e = self.use(e)
        verb = "adding" if s.op == "+=" else "storing"
        self.check_global_access(gl.type, e.value.type, s.loc, f"{verb} {e.value.type} into '{gl.name}'")
        self.check_extents(gl, e.value.type, dst.coords or [])
        if s.op == "+=":
            attrs = {**attrs, REDUCE_ATTR: "add"}
        self.emit("tk.store", [gl, e.value, *coords], [], s.loc, attrs)

    def fill_value(self, c: int | float, dtype: str, loc: Loc) -> int | float:
        """A compile-time fill of a register tile or vector: a float of a float dtype, an integer in range of
        an integer one."""
        if dtype not in INT_RANGES:
            return self.float_value(c, dtype, loc)
        if isinstance(c, float) and not c.is_integer():
            raise self.error(loc, f"an {dtype} tile is filled with an integer, not {c}",
                             hint="integer tiles hold integers; cast a float tile instead: i32(x)")
        lo, hi = INT_RANGES[dtype]
        if not lo <= int(c) <= hi:
            raise self.error(loc, f"the integer {int(c)} does not fit {dtype} ({lo} .. {hi})")
        return int(c)

    def check_gather(self, gl: Value, coords: list[Value], t: Type, loc: Loc, name: str) -> None:
        """A gather `x = A[idx, c]`: x a register tile with one row per index."""
        idx = next(c for c in coords if is_register(c.type))
        if not isinstance(t, TileType):
            raise self.error(loc, f"a gather picks rows: '{name}' must be a register tile, not {t}")
        if idx.type.n != t.rows:
            raise self.error(loc, f"a gather of {idx.type.bare()} picks {idx.type.n} rows of '{gl.name}', but '{name}' "
                                  f"({t}) has {t.rows}", hint="one index per row of the tile")

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

    def check_extents(self, gl: Value, t: Type, coords: list[Lowered]) -> None:
        """A compile-time coordinate of a dim whose extent is a number must address inside it: the
        last two (a tile) or last one (a vector) count in tiles of `t`, the others in elements. An
        access wholly outside the tensor silently reads zeros or writes nothing where the copy is
        TMA or masked, and goes past the tensor where it is not (issue 14)."""
        g: GlobalType = gl.type
        tiled = (t.rows, t.cols) if isinstance(t, TileType) else (t.n,)
        extents = (1,) * (g.rank - len(tiled)) + tiled
        for i, (c, dim, n) in enumerate(zip(coords, g.dims, extents, strict=True)):
            if c.is_const and isinstance(c.const, int) and (c.const + 1) * n - 1 > I32_MAX:
                raise self.error(c.loc, f"tile coordinate {c.const} of dim {i} of '{gl.name}' reaches element "
                                 f"{(c.const + 1) * n - 1}, past the {I32_MAX} an i32 index holds")
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
        if isinstance(got, TileType) != isinstance(want, TileType) or shape(got) != shape(want):
            raise self.error(loc, f"shape mismatch: {what}")
        if got.dtype != want.dtype:
            raise self.error(loc, f"dtype mismatch: {what}", hint=f"cast it: {want.dtype}(...)")


class SourceWarning(TkirWarning):
    """A located warning about the source (`file:line:col: warning: ...`): the program is accepted."""


def _runtime_product(v: Value) -> Operation | None:
    """An `arith.mul` of two run-time values that `v` is computed from through scalar arithmetic, or None."""
    todo, seen = [v], set()
    while todo:
        v = todo.pop()
        owner = v.owner
        if id(v) in seen or not isinstance(owner, Operation) or not owner.name.startswith("arith."):
            continue
        seen.add(id(v))
        if owner.name == "arith.mul" and not any(_is_const(x) for x in owner.operands):
            return owner
        todo += owner.operands
    return None


def _is_const(v: Value) -> bool:
    return isinstance(v.owner, Operation) and v.owner.name == "arith.const"


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


# the lowering of each kind of statement node
STATEMENTS: dict[type, Callable[[StatementLowering, ast.Stmt], None]] = {
    ast.SharedDecl: StatementLowering.stmt_shareddecl,
    ast.RegDecl: StatementLowering.stmt_regdecl,
    ast.Let: StatementLowering.stmt_let,
    ast.Assign: StatementLowering.stmt_assign,
    ast.For: StatementLowering.stmt_for,
    ast.If: StatementLowering.stmt_if,
    ast.StaticAssert: StatementLowering.stmt_staticassert,
}
