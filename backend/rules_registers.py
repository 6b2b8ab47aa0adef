"""Lowering rules for register tiles and vectors in any layout: fill, cast, elementwise math,
broadcasts, row reductions, layout relabels, and global loads/stores of `row`-layout tiles.

A mixin of backend.lower_llvm.KernelLowering. A register tile is a `Frag`: this thread's values, one
per slot of its layout. Which element a slot holds comes from backend.fragments.slot_coords (checked
against tkir.layout's tables in tests), so every rule is written once for all layouts:

* elementwise ops work slot by slot; a broadcast finds, for each tile slot, the vector slot of the
  same thread holding that row (or column) - a compile-time match, since layouts pair them;
* a row reduction combines the slots of one row in the thread, then across the lanes that share the
  row with butterfly shuffles (`shfl.sync.bfly`): the quad for wgmma accumulators, up to 32 lanes
  for `row` tiles;
* `row` tiles move between registers and global memory in 16-byte chunks (one `ld/st.global.v4`
  per chunk); rows past the tensor's edge are clamped on load and skipped on store.
"""

from __future__ import annotations

import numpy as np

from tkir.backend.fragments import NumpyBuilder, row_groups, slot_coords
from tkir.backend.llvm_text import f32_literal
from tkir.backend.values import LLVM_TYPE, Frag, LoweringError
from tkir.ir import Operation
from tkir.types import GlobalType, ScalarType, TileType, VectorType, dtype_bytes

LOG2E = 1.4426950408889634   # exp(x) = 2^(x log2 e): PTX has ex2.approx only
LN2 = 0.6931471805599453      # log(x) = lg2(x) ln 2
CHUNK_BYTES = 16              # one v4.b32 global access


class LLVMBuilder:
    """backend.fragments.Builder on LLVM i32 values; folds constants, uses shifts for powers of 2."""

    def __init__(self, w):
        self.w = w

    def _bin(self, op: str, a, b, fold):
        if isinstance(a, int) and isinstance(b, int):
            return fold(a, b)
        return self.w.op(f"{op} i32 {a}, {b}", "ix")

    def add(self, a, b):
        if b == 0:
            return a
        if a == 0:
            return b
        return self._bin("add", a, b, lambda x, y: x + y)

    def mul(self, a, b):
        if b == 1:
            return a
        if a == 0 or b == 0:
            return 0
        if isinstance(b, int) and b & (b - 1) == 0 and not isinstance(a, int):
            return self.w.op(f"shl i32 {a}, {b.bit_length() - 1}", "ix")
        return self._bin("mul", a, b, lambda x, y: x * y)

    def div(self, a, b):
        if b == 1:
            return a
        if isinstance(b, int) and b & (b - 1) == 0 and not isinstance(a, int):
            return self.w.op(f"lshr i32 {a}, {b.bit_length() - 1}", "ix")
        return self._bin("udiv", a, b, lambda x, y: x // y)

    def rem(self, a, b):
        if isinstance(b, int) and b & (b - 1) == 0 and not isinstance(a, int):
            return self.w.op(f"and i32 {a}, {b - 1}", "ix")
        return self._bin("urem", a, b, lambda x, y: x % y)


def pack_a_fragment(w, values: list[str], mblocks: int, ksteps: int) -> list[list[list[str]]]:
    """A 16-bit A fragment (wgmma_a, HOPPER.md §1.6, or mma_a, §6.3 - the same order) as 4 x b32 per
    m block and k16 step: slots 8 kk + 2j, 2j + 1 of a block are register j's low and high halves."""
    per_block = len(values) // mblocks
    return [[[w.pack_bf16x2(values[mb * per_block + 8 * kk + 2 * j], values[mb * per_block + 8 * kk + 2 * j + 1])
              for j in range(4)] for kk in range(ksteps)] for mb in range(mblocks)]


def _numeric_slots(layout: dict, shape: tuple[int, ...]) -> list[tuple[np.ndarray, ...]]:
    """Slot coordinates evaluated for every thread of the layout (compile-time analysis)."""
    from tkir.layout import num_threads

    tid = np.arange(num_threads(layout))
    out = []
    for s in slot_coords(layout, shape, NumpyBuilder(), tid):
        out.append(tuple(np.broadcast_to(np.asarray(x), tid.shape) for x in s))
    return out


def _shape(t: TileType | VectorType) -> tuple[int, ...]:
    return t.shape if isinstance(t, TileType) else (t.n,)


class RegisterRules:
    # --- helpers -------------------------------------------------------------------------------

    def thread_index(self) -> str:
        return self.role.tid if self.role is not None else self.tid

    def coords(self, t: TileType | VectorType) -> list[tuple]:
        lay = t.get("layout")
        if not isinstance(lay, dict):
            raise LoweringError(None, f"backend: {t} has no layout (run infer-layouts)")
        key = ("coords", str(t.bare()), str(lay))
        cache = self.__dict__.setdefault("_coord_cache", {})
        if key not in cache:
            cache[key] = slot_coords(lay, _shape(t), LLVMBuilder(self.w), self.thread_index())
        return cache[key]

    def nslots(self, t: TileType | VectorType) -> int:
        lay = t.get("layout")
        if not isinstance(lay, dict):
            raise LoweringError(None, f"backend: {t} has no layout (run infer-layouts)")
        return len(_numeric_slots(lay, _shape(t)))

    def _fop(self, op: str, a: str, b: str) -> str:
        w = self.w
        if op == "max":
            return w.call("float", "llvm.maxnum.f32", [("float", a), ("float", b)], hint="mx")
        if op == "min":
            return w.call("float", "llvm.minnum.f32", [("float", a), ("float", b)], hint="mn")
        llvm_op = {"add": "fadd", "sub": "fsub", "mul": "fmul", "div": "fdiv"}[op]
        return w.op(f"{llvm_op} float {a}, {b}", op)

    def _unary(self, name: str, x: str) -> str:
        w = self.w
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
        raise LoweringError(None, f"backend: no rule for tk.{name}")

    def _as_f32(self, v: str, dtype: str) -> str:
        if dtype == "f32":
            return v
        return self.w.op(f"fpext {LLVM_TYPE[dtype]} {v} to float", "up")

    def _from_f32(self, v: str, dtype: str) -> str:
        if dtype == "f32":
            return v
        return self.w.op(f"fptrunc float {v} to {LLVM_TYPE[dtype]}", "dn")

    # --- fill, cast, relabel ---------------------------------------------------------------------

    def _op_tk_fill(self, op: Operation) -> None:
        t = op.result.type
        lit = f32_literal(op.attrs["value"])
        if t.dtype != "f32":
            lit = self._from_f32(lit, t.dtype)
        self.set(op.result, Frag(t, [lit] * self.nslots(t)))

    def _op_tk_cast(self, op: Operation) -> None:
        x = self.get(op.operands[0])
        assert isinstance(x, Frag)
        src, dst = x.type.dtype, op.result.type.dtype
        if src not in LLVM_TYPE or dst not in LLVM_TYPE or "i" in (src[0], dst[0]):
            raise LoweringError(op.loc, f"backend: cast {src} -> {dst} not implemented")
        vals = [self._from_f32(self._as_f32(v, src), dst) for v in x.values]
        self.set(op.result, Frag(op.result.type, vals))

    def _op_tk_convert_layout(self, op: Operation) -> None:
        x = self.get(op.operands[0])
        assert isinstance(x, Frag)
        if str(op.attrs.get("via", "none")) != "none":
            raise LoweringError(op.loc, f"backend: layout conversion via {op.attrs.get('via')} is not "
                                        "implemented yet")
        src, dst = _numeric_slots(x.layout, _shape(x.type)), _numeric_slots(op.result.type.get("layout"),
                                                                           _shape(op.result.type))
        index = {tuple(np.concatenate([c.ravel() for c in s]).tolist()): i for i, s in enumerate(src)}
        vals = []
        for s in dst:
            k = tuple(np.concatenate([c.ravel() for c in s]).tolist())
            if k not in index:
                raise LoweringError(op.loc, "backend: a 'none' layout conversion moves elements between threads")
            vals.append(x.values[index[k]])
        self.set(op.result, Frag(op.result.type, vals))

    # --- elementwise -----------------------------------------------------------------------------

    def _binary(self, op: Operation) -> None:
        a, b = (self.get(v) for v in op.operands)
        name = op.name.split(".")[1]
        rt = op.result.type
        if isinstance(rt, ScalarType):
            raise LoweringError(op.loc, f"backend: scalar {op.name} should be arith.{name}")
        bcast = op.attrs.get("bcast")
        ta, tb = op.operands[0].type, op.operands[1].type
        va = self._operand_values(a, ta, rt, bcast, op)
        if name == "div" and not isinstance(tb, type(rt)):
            # dividing by a broadcast vector or a scalar: one reciprocal per distinct value, then
            # multiplies (div.rn.f32 is a long instruction sequence; x * (1/y) is within 1 ulp)
            recips: dict[str, str] = {}
            vb = []
            for y in self._operand_values(b, tb, rt, bcast, op):
                if y not in recips:
                    recips[y] = self._fop("div", f32_literal(1.0), y)
                vb.append(recips[y])
            name = "mul"
        else:
            vb = self._operand_values(b, tb, rt, bcast, op)
        out = [self._from_f32(self._fop(name, x, y), rt.dtype) for x, y in zip(va, vb, strict=True)]
        self.set(op.result, Frag(rt, out))

    _op_tk_add = _op_tk_sub = _op_tk_mul = _op_tk_div = _op_tk_max = _op_tk_min = _binary

    def _operand_values(self, x: object, t, rt, bcast, op: Operation) -> list[str]:
        """f32 values of an operand, one per slot of the result's layout."""
        n = self.nslots(rt)
        if isinstance(t, ScalarType):
            assert isinstance(x, str)
            return [self._as_f32(x, t.dtype)] * n
        assert isinstance(x, Frag)
        vals = [self._as_f32(v, t.dtype) for v in x.values]
        if type(t) is type(rt):
            return vals
        # a vector broadcast over the rows (bcast = row) or columns (col) of a tile
        axis = 0 if str(bcast) == "row" else 1
        tile_slots = _numeric_slots(rt.get("layout"), _shape(rt))
        vec_slots = _numeric_slots(x.layout, _shape(t))
        out = []
        for ts in tile_slots:
            want = ts[axis]
            j = next((j for j, vs in enumerate(vec_slots) if np.array_equal(vs[0], want)), None)
            if j is None:
                raise LoweringError(op.loc, f"backend: {t} does not hold the {bcast}s of {rt} in the same "
                                            "threads (layout mismatch)")
            out.append(vals[j])
        return out

    def _unary_op(self, op: Operation) -> None:
        x = self.get(op.operands[0])
        rt = op.result.type
        name = op.name.split(".")[1]
        if isinstance(rt, ScalarType):
            assert isinstance(x, str)
            self.set(op.result, self._unary(name, x))
            return
        assert isinstance(x, Frag)
        vals = [self._from_f32(self._unary(name, self._as_f32(v, rt.dtype)), rt.dtype) for v in x.values]
        self.set(op.result, Frag(rt, vals))

    _op_tk_exp = _op_tk_exp2 = _op_tk_log = _op_tk_log2 = _unary_op
    _op_tk_sqrt = _op_tk_rsqrt = _op_tk_abs = _op_tk_neg = _unary_op

    # --- masks -------------------------------------------------------------------------------------

    def _op_tk_mask_causal(self, op: Operation) -> None:
        """Elements with col0 + c > row0 + r take `fill` (a key after the query is masked)."""
        x = self.get(op.operands[0])
        assert isinstance(x, Frag)
        w = self.w
        row0, col0 = (self.scalar(v) for v in op.operands[1:])
        fill = f32_literal(op.attrs["fill"])
        if x.type.dtype != "f32":
            fill = self._from_f32(fill, x.type.dtype)
        ety = LLVM_TYPE[x.type.dtype]
        delta = w.op(f"sub i32 {col0}, {row0}", "dlt")  # masked where c - r > row0 - col0
        out = []
        for (r, c), v in zip(self.coords(x.type), x.values, strict=True):
            cr = w.op(f"sub i32 {c}, {r}", "cr") if not (isinstance(c, int) and isinstance(r, int)) else c - r
            masked = w.op(f"icmp sgt i32 {cr}, {w.op(f'sub i32 0, {delta}', 'nd')}", "msk")
            out.append(w.op(f"select i1 {masked}, {ety} {fill}, {ety} {v}", "mk"))
        self.set(op.result, Frag(op.result.type, out))

    # --- reductions ------------------------------------------------------------------------------

    def _op_tk_reduce(self, op: Operation) -> None:
        x = self.get(op.operands[0])
        assert isinstance(x, Frag)
        kind, axis = str(op.attrs["kind"]), str(op.attrs["axis"])
        if axis != "row":
            raise LoweringError(op.loc, "backend: column reductions are not implemented yet")
        rt = op.result.type
        fop = {"max": "max", "min": "min", "sum": "add"}[kind]
        slots = _numeric_slots(x.layout, _shape(x.type))
        groups: list[tuple[np.ndarray, list[int]]] = []
        for i, s in enumerate(slots):
            for rows, members in groups:
                if np.array_equal(rows, s[0]):
                    members.append(i)
                    break
            else:
                groups.append((s[0], [i]))
        lanes, _ = row_groups(x.layout, _shape(x.type))
        partial = []
        for rows, members in groups:
            acc = self._as_f32(x.values[members[0]], x.type.dtype)
            for m in members[1:]:
                acc = self._fop(fop, acc, self._as_f32(x.values[m], x.type.dtype))
            step = 1
            while step < lanes:
                other = self.w.call("float", "llvm.nvvm.shfl.sync.bfly.f32",
                                    [("i32", "-1"), ("float", acc), ("i32", str(step)), ("i32", "31")],
                                    hint="sh")
                acc = self._fop(fop, acc, other)
                step *= 2
            partial.append((rows, acc))
        out = []
        for vs in _numeric_slots(rt.get("layout"), _shape(rt)):
            hit = next((v for rows, v in partial if np.array_equal(rows, vs[0])), None)
            if hit is None:
                raise LoweringError(op.loc, f"backend: {rt} does not match the rows of {x.type}")
            out.append(self._from_f32(hit, rt.dtype))
        self.set(op.result, Frag(rt, out))

    # --- global memory ---------------------------------------------------------------------------

    def _global_chunks(self, op: Operation, gl: tuple, coords: list[str], t) -> list[tuple[str, str, list[int]]]:
        """(element offset (i64), in-bounds i1, slots) per 16-byte chunk of a row-layout tile/vector."""
        _, ptr, gty = gl
        assert isinstance(gty, GlobalType)
        lay = t.get("layout")
        kind = str(lay["kind"])
        if kind not in ("row", "col_vec"):
            raise LoweringError(op.loc, f"backend: global access of a '{kind}' register tile is not "
                                        "implemented yet")
        vec = int(lay["vec"])
        if vec * dtype_bytes(t.dtype) != CHUNK_BYTES:
            raise LoweringError(op.loc, f"backend: chunks of {vec} x {t.dtype} are not 16 bytes")
        w = self.w
        dims = [self._dim(d) for d in gty.dims]
        strides: list[str] = []
        acc = "1"
        for d in reversed(dims):  # row-major strides, in elements (i64)
            strides.insert(0, acc)
            acc = w.op(f"mul i64 {acc}, {self._i64(d)}", "st") if acc != "1" else self._i64(d)
        is_tile = isinstance(t, TileType)
        nlead = gty.rank - (2 if is_tile else 1)
        base = "0"
        for k in range(nlead):
            base = w.op(f"add i64 {base}, {w.op(f'mul i64 {self._i64(coords[k])}, {strides[k]}', 'lo')}", "lb")
        slots = self.coords(t)
        out = []
        if is_tile:
            r0 = w.op(f"mul i32 {coords[nlead]}, {t.rows}", "r0")
            c0 = w.op(f"mul i32 {coords[nlead + 1]}, {t.cols}", "c0")
        else:
            c0 = w.op(f"mul i32 {coords[nlead]}, {t.n}", "c0")
        for first in range(0, len(slots), vec):
            s = slots[first]
            if is_tile:
                row = w.op(f"add i32 {r0}, {s[0]}", "row")
                col = w.op(f"add i32 {c0}, {s[1]}", "col")
                ok = w.op(f"icmp slt i32 {row}, {dims[nlead]}", "ok")
                last = w.op(f"sub i32 {dims[nlead]}, 1", "last")
                safe = w.op(f"select i1 {ok}, i32 {row}, i32 {last}", "rowc")
                off = w.op(f"mul i64 {self._i64(safe)}, {strides[nlead]}", "ro")
                off = w.op(f"add i64 {off}, {self._i64(col)}", "off")
            else:
                col = w.op(f"add i32 {c0}, {s[0]}", "col")
                ok = w.op(f"icmp slt i32 {col}, {dims[nlead]}", "ok")
                off = self._i64(col)
            off = w.op(f"add i64 {off}, {base}", "off")
            out.append((off, ok, list(range(first, first + vec))))
        return out

    def _i64(self, v: str | int) -> str:
        if isinstance(v, int) or str(v).lstrip("-").isdigit():
            return str(v)
        return self.w.op(f"sext i32 {v} to i64", "w")

    def _op_tk_load(self, op: Operation) -> None:
        if not op.results:
            raise LoweringError(op.loc, "backend: global->shared tk.load without TMA is not implemented yet")
        src = self.get(op.operands[0])
        t = op.result.type
        if not (isinstance(src, tuple) and src[0] == "gl"):
            raise LoweringError(op.loc, "backend: shared->register loads are not implemented yet")
        w = self.w
        coords = [self.scalar(v) for v in op.operands[1:]]
        ety = LLVM_TYPE[t.dtype]
        vals: list[str] = [""] * self.nslots(t)
        for off, _ok, members in self._global_chunks(op, src, coords, t):
            p = w.op(f"getelementptr {ety}, ptr addrspace(1) {src[1]}, i64 {off}", "p")
            vt = f"<{len(members)} x {ety}>"
            v = w.op(f"load {vt}, ptr addrspace(1) {p}, align 16", "ld")
            for k, m in enumerate(members):
                vals[m] = w.op(f"extractelement {vt} {v}, i32 {k}", "e")
        self.set(op.result, Frag(t, vals))

    def _op_tk_store(self, op: Operation) -> None:
        dst = self.get(op.operands[0])
        val = self.get(op.operands[1])
        if not (isinstance(dst, tuple) and dst[0] == "gl" and isinstance(val, Frag)):
            raise LoweringError(op.loc, "backend: only register -> global stores are implemented")
        if val.kind == "wgmma_acc":
            self._store_wgmma_acc(op)
            return
        w = self.w
        t = val.type
        coords = [self.scalar(v) for v in op.operands[2:]]
        ety = LLVM_TYPE[t.dtype]
        for off, ok, members in self._global_chunks(op, dst, coords, t):
            p = w.op(f"getelementptr {ety}, ptr addrspace(1) {dst[1]}, i64 {off}", "p")
            vt = f"<{len(members)} x {ety}>"
            v = "poison"
            for k, m in enumerate(members):
                v = w.op(f"insertelement {vt} {v}, {ety} {val.values[m]}, i32 {k}", "iv")
            nwords = len(members) * dtype_bytes(t.dtype) // 4
            words = w.op(f"bitcast {vt} {v} to <{nwords} x i32>", "wd")
            regs = [w.op(f"extractelement <{nwords} x i32> {words}, i32 {k}", "r") for k in range(nwords)]
            okz = w.op(f"zext i1 {ok} to i32", "okz")
            lst = ", ".join(f"${k + 2}" for k in range(nwords))
            w.asm("void", ["{", ".reg .pred p;", "setp.ne.b32 p, $1, 0;",
                           f"@p st.global.v{nwords}.b32 [$0], {{{lst}}};", "}"],
                  ["l", "r"] + ["r"] * nwords,
                  [("ptr addrspace(1)", p), ("i32", okz)] + [("i32", r) for r in regs])
