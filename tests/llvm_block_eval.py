"""One thread block of a kernel's LLVM text, run on the CPU: a CPU oracle for the backend's cross-warp paths.

tests/llvm_eval_test_support.py evaluates the integer arithmetic of one thread; this module executes a
whole kernel for every thread of ONE block: f32/f16/bf16 and i1..i64 arithmetic, vectors and structs,
phis and branches, loads and stores to global memory (numpy arrays) and to shared memory (a byte array),
the NVVM intrinsics the backend calls (special registers, `shfl.sync`, barriers, fma, maxnum, sqrt,
`fptosi.sat`, ...)
and the inline PTX it writes (`ld/st.global`, `ld/st.shared`, `ex2.approx`, `rsqrt.approx`, predicated
stores, `bar.sync`). The text is the backend's regular output (tkir/backend/llvm_text.py), read with
regular expressions; anything else is an `EvalError` naming the instruction, never a silent guess.

The machine model (PTX ISA, "Parallel Synchronization and Communication Instructions"):

* each warp runs on its own, its 32 lanes in lockstep under an active mask; a branch whose condition
  differs between active lanes splits the warp into two groups that run apart (and merge again where
  both wait at the same instruction);
* `shfl.sync` is a rendezvous of the lanes its member mask names: a group waits there until every one of
  them has arrived, and the source lane of each follows the ISA's formula (bfly, down, up, idx, with
  the clamp and segment mask of operand c);
* a barrier (`llvm.nvvm.barrier0`, `bar.sync id[, count]`) holds its threads until all threads of the
  block (or `count`) have arrived; a state where no group can move is an `EvalError` (a deadlock);
* shared memory starts as 0xFF bytes (NaN as f32) and every access is checked against the kernel's
  dynamic shared memory size, a read of a byte no thread wrote is an error, and so are races between warps: a read of a byte another warp wrote, or a
  write of a byte another warp read or wrote (with other bytes), since the last block-wide barrier is an
  `EvalError` -- so a missing barrier fails whatever order the warps happen to run in;
* global accesses are checked against their array's bounds and their alignment;
* lanes of one store that write different values to the same byte are an `EvalError` (which one lands
  is up to the hardware).

Floating point is numpy's IEEE f32 (f16, bf16 through ml_dtypes, rounded to nearest even); the
`.approx` instructions are computed exactly and rounded to f32, within their documented error.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

WARP = 32
GLOBAL_BASE_SHIFT = 40   # global argument k lives at virtual address (k + 1) << 40; shared addresses are small
MAX_STEPS = 5_000_000    # instructions executed by all groups together before the run is called a hang
BF16 = ml_dtypes.bfloat16
FLOAT_DTYPES = {"float": np.dtype(np.float32), "double": np.dtype(np.float64), "half": np.dtype(np.float16),
                "bfloat": np.dtype(BF16)}


class EvalError(Exception):
    """The kernel did something the hardware would not do reliably (a race, a deadlock, an access out of
    bounds), or the evaluator met text it does not know."""


# --- types -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ty:
    """An LLVM type: kind 'int' (bits), 'float' (name), 'vec' (n, elem), 'struct' (members), 'ptr'
    (address space), 'void'."""

    kind: str
    bits: int = 0
    name: str = ""
    n: int = 0
    elem: Ty | None = None
    members: tuple[Ty, ...] = ()
    space: int = 0

    @property
    def dtype(self) -> np.dtype:
        if self.kind == "int":
            return np.dtype(bool) if self.bits == 1 else np.dtype(np.int64)
        if self.kind == "float":
            return FLOAT_DTYPES[self.name]
        if self.kind == "ptr":
            return np.dtype(np.int64)
        if self.kind == "vec":
            return self.elem.dtype
        raise EvalError(f"no dtype for {self}")

    @property
    def nbytes(self) -> int:
        if self.kind == "int":
            return max(self.bits // 8, 1)
        if self.kind == "float":
            return FLOAT_DTYPES[self.name].itemsize
        if self.kind == "vec":
            return self.n * self.elem.nbytes
        if self.kind == "ptr":
            return 4 if self.space == 3 else 8
        raise EvalError(f"no size for {self}")


_NAMED: dict[str, Ty] = {}


def parse_type(s: str) -> tuple[Ty, str]:
    """The type at the start of s, and the rest (stripped)."""
    s = s.lstrip()
    if s.startswith("<"):
        m = re.match(r"<(\d+) x ", s)
        elem, rest = parse_type(s[m.end():])
        assert rest.startswith(">"), s
        return Ty("vec", n=int(m[1]), elem=elem), rest[1:].lstrip()
    if s.startswith("{"):
        members, rest = [], s[1:]
        while True:
            t, rest = parse_type(rest)
            members.append(t)
            rest = rest.lstrip()
            if rest.startswith("}"):
                return Ty("struct", members=tuple(members)), rest[1:].lstrip()
            rest = rest[1:]
    if m := re.match(r"ptr(?: addrspace\((\d+)\))?", s):
        return Ty("ptr", space=int(m[1] or 0)), s[m.end():].lstrip()
    if m := re.match(r"i(\d+)\b", s):
        return Ty("int", bits=int(m[1])), s[m.end():].lstrip()
    if m := re.match(r"(float|double|half|bfloat)\b", s):
        return Ty("float", name=m[1]), s[m.end():].lstrip()
    if s.startswith("void"):
        return Ty("void"), s[4:].lstrip()
    if m := re.match(r"%[\w.]+", s):
        if m[0] in _NAMED:
            return _NAMED[m[0]], s[m.end():].lstrip()
    raise EvalError(f"cannot read a type in: {s[:60]}")


# --- integer helpers (values are int64, sign-extended from their width; i1 is bool) -------------------


def wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """x reduced to a signed `bits`-bit integer, held in int64 (bool for i1)."""
    if bits == 1:
        return (np.asarray(x).astype(np.int64) & 1).astype(bool)
    x = np.asarray(x).astype(np.int64)
    if bits == 64:
        return x
    m = 1 << bits
    x = x & (m - 1)
    return np.where(x >= m >> 1, x - m, x)


def unsigned(x: np.ndarray, bits: int) -> np.ndarray:
    """x as an unsigned `bits`-bit integer (uint64 for 64 bits)."""
    x = np.asarray(x)
    if bits == 1:
        return x.astype(np.int64)
    if bits == 64:
        return x.astype(np.int64).view(np.uint64)
    return x.astype(np.int64) & ((1 << bits) - 1)


def to_bytes(v: np.ndarray, t: Ty) -> np.ndarray:
    """Per lane, the little-endian bytes of a value of type t: (lanes, nbytes) uint8."""
    if t.kind == "vec":
        parts = [to_bytes(v[:, i], t.elem) for i in range(t.n)]
        return np.concatenate(parts, axis=1)
    if t.kind == "int" or t.kind == "ptr":
        bits = t.bits if t.kind == "int" else 8 * t.nbytes
        u = unsigned(v, bits).astype(np.uint64)
        return u.astype({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]).reshape(-1, 1).view(np.uint8)
    return np.ascontiguousarray(np.asarray(v).astype(t.dtype).reshape(-1, 1)).view(np.uint8)


def from_bytes(b: np.ndarray, t: Ty) -> np.ndarray:
    """The inverse of to_bytes."""
    b = np.ascontiguousarray(b, dtype=np.uint8)
    if t.kind == "vec":
        w = t.elem.nbytes
        return np.stack([from_bytes(b[:, i * w:(i + 1) * w], t.elem) for i in range(t.n)], axis=1)
    if t.kind == "int":
        if t.bits == 1:
            return b[:, 0] != 0
        u = b.view({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[t.bits])[:, 0]
        return wrap(u.astype(np.uint64).view(np.int64), t.bits)
    return b.view(t.dtype)[:, 0].copy()


def _f32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


# --- the parsed function -------------------------------------------------------------------------------


Operand = Callable[[dict], np.ndarray]


@dataclass
class Instr:
    """One instruction: `kind` says how the runner treats it; `fn` computes a value from the warp's
    environment (kind 'op') or is called with the runner and the group (kind 'mem')."""

    kind: str        # op, mem, phi, br, condbr, ret, barrier, shfl
    res: str | None
    text: str
    fn: Callable | None = None
    targets: tuple[str, ...] = ()
    cond: Operand | None = None
    phi: list[tuple[str, Operand]] = field(default_factory=list)
    args: tuple = ()


def _split_top(s: str, sep: str = ",") -> list[str]:
    out, depth, cur, quoted = [], 0, "", False
    for ch in s:
        if ch == '"':
            quoted = not quoted
        elif not quoted and ch in "([{<":
            depth += 1
        elif not quoted and ch in ")]}>":
            depth -= 1
        if ch == sep and depth == 0 and not quoted:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def _float_const(tok: str, t: Ty) -> float:
    if tok.startswith("0xR"):  # bfloat bits
        return float(np.array([int(tok[3:], 16)], np.uint16).view(BF16)[0])
    if tok.startswith("0xH"):  # half bits
        return float(np.array([int(tok[3:], 16)], np.uint16).view(np.float16)[0])
    if tok.startswith("0x"):   # the double's bits (LLVM's form for float and double)
        return float(np.array([int(tok[2:], 16)], np.uint64).view(np.float64)[0])
    return float(tok)


class Function:
    """The kernel of an LLVM module's text: parameters, blocks of parsed instructions, the block size."""

    def __init__(self, text: str) -> None:
        _NAMED.clear()
        for m in re.finditer(r"^(%[\w.]+) = type (\{.*\})$", text, re.M):
            _NAMED[m[1]], _ = parse_type(m[2])
        d = re.search(r"^define [^@]*@([\w.]+)\((.*)\)[^{]*\{$", text, re.M)
        if not d:
            raise EvalError("no kernel definition in the text")
        self.name = d[1]
        self.params: list[tuple[Ty, str]] = []
        for p in _split_top(d[2]):
            t, rest = parse_type(p)
            self.params.append((t, rest.split()[-1]))
        m = re.search(r'"nvvm.maxntid"="(\d+)(?:,(\d+),(\d+))?"', text)
        self.threads = int(m[1]) if m else None
        if re.search(r'"nvvm.cluster_dim"', text):
            self.cluster = True
        else:
            self.cluster = False
        self.blocks: dict[str, list[Instr]] = {}
        self.order: list[str] = []
        cur: list[Instr] | None = None
        body = text[d.end():].split("\n}", 1)[0]
        for line in body.splitlines():
            s = line.strip()
            if not s or s.startswith(";"):
                continue
            if m := re.fullmatch(r"([\w.]+):(?:\s*;.*)?", s):
                cur = self.blocks.setdefault(m[1], [])
                self.order.append(m[1])
                continue
            if cur is None:
                cur = self.blocks.setdefault("entry", [])
                self.order.append("entry")
            cur.append(self._instr(s))
        self.phi_count = {b: sum(1 for i in ins if i.kind == "phi") for b, ins in self.blocks.items()}

    # operands ---------------------------------------------------------------------------------------

    def operand(self, tok: str, t: Ty) -> Operand:
        tok = tok.strip()
        if tok.startswith("%"):
            return lambda env, tok=tok: env[tok]
        shape = (WARP, t.n) if t.kind == "vec" else (WARP,)
        if tok in ("poison", "undef", "zeroinitializer"):
            if t.kind == "struct":
                c = tuple(np.zeros((WARP, m.n) if m.kind == "vec" else (WARP,), m.dtype) for m in t.members)
                return lambda env: c
            c = np.zeros(shape, t.dtype)
        elif tok == "@smem":
            c = np.zeros(shape, np.int64)
        elif tok in ("true", "false"):
            c = np.full(shape, tok == "true")
        elif t.kind == "vec" and tok.startswith("<"):
            vals = [self.operand(x.split(None, 1)[1] if " " in x else x, t.elem)({}) for x in _split_top(tok[1:-1])]
            c = np.stack(vals, axis=1)
        elif t.kind == "int" or t.kind == "ptr" or (t.kind == "vec" and t.elem.kind == "int"):
            c = np.full(shape, int(tok), np.int64)
            if t.kind == "int" and t.bits == 1:
                c = c.astype(bool)
        elif t.kind == "float" or (t.kind == "vec" and t.elem.kind == "float"):
            ft = t if t.kind == "float" else t.elem
            c = np.full(shape, _float_const(tok, ft), np.float64).astype(ft.dtype)
        else:
            raise EvalError(f"cannot read the constant {tok} of type {t}")
        c.setflags(write=False)
        return lambda env: c

    def typed(self, s: str) -> tuple[Ty, Operand]:
        t, rest = parse_type(s)
        return t, self.operand(rest, t)

    # instructions -----------------------------------------------------------------------------------

    def _instr(self, s: str) -> Instr:
        res = None
        if m := re.match(r"(%[\w.]+) = (.*)$", s):
            res, rhs = m[1], m[2]
        else:
            rhs = s
        try:
            return self._parse(res, rhs, s)
        except EvalError:
            raise
        except Exception as e:  # a malformed or unexpected line: say which
            raise EvalError(f"cannot read: {s} ({e})") from e

    def _parse(self, res: str | None, rhs: str, s: str) -> Instr:
        op = rhs.split(None, 1)[0]
        rest = rhs[len(op):].strip()
        if op == "br":
            if m := re.fullmatch(r"label %([\w.]+)", rest):
                return Instr("br", None, s, targets=(m[1],))
            m = re.fullmatch(r"i1 (\S+), label %([\w.]+), label %([\w.]+)", rest)
            return Instr("condbr", None, s, targets=(m[2], m[3]), cond=self.operand(m[1], Ty("int", bits=1)))
        if op == "ret":
            return Instr("ret", None, s)
        if op == "phi":
            t, rest2 = parse_type(rest)
            inc = [(lbl, self.operand(v, t)) for v, lbl in re.findall(r"\[\s*([^,\[\]]+),\s*%([\w.]+)\s*\]", rest2)]
            return Instr("phi", res, s, phi=inc)
        if op == "call":
            return self._call(res, rest, s)
        if op in ("load", "store"):
            return self._memory(op, res, rest, s)
        return Instr("op", res, s, fn=self._compute(op, rest))

    def _compute(self, op: str, rest: str) -> Callable[[dict], object]:
        rest = re.sub(r"^((?:nuw|nsw|exact|fast|contract|reassoc|nnan|ninf|nsz|arcp|afn|inbounds|disjoint)\s+)+", "",
                      rest)
        int_bin = {"add", "sub", "mul", "shl", "lshr", "ashr", "and", "or", "xor", "udiv", "sdiv", "urem", "srem"}
        if op in int_bin:
            t, r = parse_type(rest)
            a, b = (self.operand(x, t) for x in _split_top(r))
            return _int_binary(op, t, a, b)
        if op in ("fadd", "fsub", "fmul", "fdiv", "frem"):
            t, r = parse_type(rest)
            a, b = (self.operand(x, t) for x in _split_top(r))
            f = {"fadd": np.add, "fsub": np.subtract, "fmul": np.multiply, "fdiv": np.divide, "frem": np.fmod}[op]
            dt = t.dtype
            if dt == np.float32 or dt == np.float64:
                return lambda env: f(a(env), b(env)).astype(dt)
            return lambda env: f(_f32(a(env)), _f32(b(env))).astype(dt)  # 16-bit: computed in f32, rounded once
        if op == "fneg":
            t, r = parse_type(rest)
            a = self.operand(r, t)
            return lambda env: (-a(env)).astype(t.dtype)
        if op == "icmp":
            pred, r = rest.split(None, 1)
            t, r = parse_type(r)
            a, b = (self.operand(x, t) for x in _split_top(r))
            return _icmp(pred, t.elem if t.kind == "vec" else t, a, b)
        if op == "fcmp":
            pred, r = rest.split(None, 1)
            t, r = parse_type(r)
            a, b = (self.operand(x, t) for x in _split_top(r))
            return _fcmp(pred, a, b)
        if op == "select":
            c, x, y = _split_top(rest)
            ct, cf = self.typed(c)
            tx, xf = self.typed(x)
            _, yf = self.typed(y)

            def select(env: dict) -> np.ndarray:
                cond = cf(env)
                if tx.kind == "vec" and ct.kind != "vec":
                    cond = cond[:, None]
                return np.where(cond, xf(env), yf(env))
            return select
        if op in ("zext", "sext", "trunc", "bitcast", "fptrunc", "fpext", "sitofp", "uitofp", "fptosi", "fptoui",
                  "ptrtoint", "inttoptr", "addrspacecast"):
            m = re.fullmatch(r"(.*) to (.*)", rest)
            st, sf = self.typed(m[1])
            dt, _ = parse_type(m[2])
            return _cast(op, st, dt, sf)
        if op == "extractelement":
            vec, idx = _split_top(rest)
            _, vf = self.typed(vec)
            _, xf = self.typed(idx)
            return lambda env: vf(env)[np.arange(WARP), xf(env)]
        if op == "insertelement":
            vec, el, idx = _split_top(rest)
            _, vf = self.typed(vec)
            _, ef = self.typed(el)
            _, xf = self.typed(idx)

            def insert(env: dict) -> np.ndarray:
                v = np.array(vf(env))
                v[np.arange(WARP), xf(env)] = ef(env)
                return v
            return insert
        if op == "extractvalue":
            parts = _split_top(rest)
            _, sf = self.typed(parts[0])
            k = int(parts[1])
            return lambda env: sf(env)[k]
        if op == "insertvalue":
            parts = _split_top(rest)
            _, sf = self.typed(parts[0])
            _, ef = self.typed(parts[1])
            k = int(parts[2])
            return lambda env: tuple(ef(env) if i == k else x for i, x in enumerate(sf(env)))
        if op == "getelementptr":
            parts = _split_top(rest)
            et, _ = parse_type(parts[0])
            _, pf = self.typed(parts[1])
            if len(parts) != 3:
                raise EvalError("getelementptr with more than one index")
            _, xf = self.typed(parts[2])
            size = et.nbytes
            return lambda env: pf(env) + xf(env).astype(np.int64) * size
        raise EvalError(f"unknown instruction: {op} {rest}")

    def _memory(self, op: str, res: str | None, rest: str, s: str) -> Instr:
        parts = [p for p in _split_top(rest) if not p.startswith("align")]
        if op == "load":
            t, _ = parse_type(parts[0])
            pt, pf = self.typed(parts[1])
            return Instr("mem", res, s, fn=lambda run, g, env: run.load(g, pf(env), pt.space, t))
        vt, vf = self.typed(parts[0])
        pt, pf = self.typed(parts[1])
        return Instr("mem", None, s, fn=lambda run, g, env: run.store(g, pf(env), pt.space, vt, vf(env)))

    def _call(self, res: str | None, rest: str, s: str) -> Instr:
        t, r = parse_type(rest)
        if r.startswith("asm"):
            return self._asm(res, t, r, s)
        m = re.fullmatch(r"@([\w.]+)\((.*)\)(?:\s*#\d+)?", r)
        name, args = m[1], [self.typed(a) for a in _split_top(m[2])]
        fs = [f for _, f in args]
        if m2 := re.fullmatch(r"llvm\.nvvm\.read\.ptx\.sreg\.(tid|ntid|ctaid|nctaid)\.([xyz])", name):
            reg, axis = m2[1], "xyz".index(m2[2])
            return Instr("mem", res, s, fn=lambda run, g, env: run.sreg(g, reg, axis))
        if name == "llvm.nvvm.read.ptx.sreg.laneid":
            return Instr("mem", res, s, fn=lambda run, g, env: np.arange(WARP, dtype=np.int64))
        if name == "llvm.nvvm.barrier0":
            return Instr("barrier", None, s, args=(0, None))
        if m2 := re.fullmatch(r"llvm\.nvvm\.shfl\.sync\.(bfly|down|up|idx)\.(f32|i32)", name):
            return Instr("shfl", res, s, args=(m2[1], *fs))
        unary = {"llvm.sqrt.f32": np.sqrt, "llvm.fabs.f32": np.abs, "llvm.exp2.f32": np.exp2,
                 "llvm.floor.f32": np.floor, "llvm.ceil.f32": np.ceil, "llvm.trunc.f32": np.trunc,
                 "llvm.rint.f32": np.rint}  # rint: to nearest, ties to even (cvt.rni)
        if name in unary:
            f, a = unary[name], fs[0]
            return Instr("op", res, s, fn=lambda env: _f32(f(a(env))))
        binary = {"llvm.maxnum.f32": np.fmax, "llvm.minnum.f32": np.fmin, "llvm.maximum.f32": np.maximum,
                  "llvm.minimum.f32": np.minimum}
        if name in binary:
            f, a, b = binary[name], fs[0], fs[1]
            return Instr("op", res, s, fn=lambda env: _f32(f(a(env), b(env))))
        if name in ("llvm.fma.f32", "llvm.fmuladd.f32"):
            a, b, c = fs
            return Instr("op", res, s, fn=lambda env: _f32(a(env).astype(np.float64) * b(env) + c(env)))
        if m2 := re.fullmatch(r"llvm\.fpto(si|ui)\.sat\.i(\d+)\.f32", name):  # toward zero, saturating, NaN 0
            bits, a = int(m2[2]), fs[0]
            lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if m2[1] == "si" else (0, (1 << bits) - 1)
            return Instr("op", res, s, fn=lambda env: wrap(np.where(
                np.isnan(a(env)), 0, np.trunc(np.clip(np.nan_to_num(a(env).astype(np.float64)), lo, hi))), bits))
        if m2 := re.fullmatch(r"llvm\.(smin|smax|umin|umax)\.i(\d+)", name):
            f, bits, a, b = m2[1], int(m2[2]), fs[0], fs[1]
            if f[0] == "s":
                g = np.minimum if f == "smin" else np.maximum
                return Instr("op", res, s, fn=lambda env: g(a(env), b(env)))
            g = np.minimum if f == "umin" else np.maximum
            return Instr("op", res, s, fn=lambda env: wrap(g(unsigned(a(env), bits), unsigned(b(env), bits)), bits))
        raise EvalError(f"unknown intrinsic: @{name}")

    def _asm(self, res: str | None, t: Ty, r: str, s: str) -> Instr:
        m = re.fullmatch(r'asm (?:sideeffect )?(?:convergent )?"((?:[^"\\]|\\.)*)", "([^"]*)"\((.*)\)', r)
        if not m:
            raise EvalError(f"cannot read the inline asm: {s}")
        text = m[1].replace("\\0A", "\n").replace("\\22", '"')
        cons = [c for c in m[2].split(",") if not c.startswith("~")]
        outs = [c for c in cons if c.startswith("=")]
        args = [self.typed(a) for a in _split_top(m[3])]
        prog = _Ptx(text, outs, [c for c in cons if not c.startswith("=")], args, t)
        if prog.barrier is not None:
            return Instr("barrier", None, s, args=prog.barrier)
        return Instr("mem", res, s, fn=prog.run)


def _int_binary(op: str, t: Ty, a: Operand, b: Operand) -> Callable[[dict], np.ndarray]:
    bits = t.elem.bits if t.kind == "vec" else t.bits

    def f(env: dict) -> np.ndarray:
        x, y = a(env), b(env)
        if bits == 1:
            return {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op](x, y)
        if op in ("add", "sub", "mul", "and", "or", "xor"):
            return wrap({"add": np.add, "sub": np.subtract, "mul": np.multiply, "and": np.bitwise_and,
                         "or": np.bitwise_or, "xor": np.bitwise_xor}[op](x, y), bits)
        if op == "shl":
            return wrap(np.left_shift(x, y & 63), bits)
        if op == "lshr":
            return wrap(unsigned(x, bits) >> unsigned(y, bits).astype(unsigned(x, bits).dtype), bits)
        if op == "ashr":
            return wrap(np.right_shift(x, y), bits)
        if op in ("udiv", "urem"):
            ux, uy = unsigned(x, bits), unsigned(y, bits)
            uy = np.where(uy == 0, 1, uy).astype(ux.dtype)   # a zero divisor in an inactive lane
            return wrap((ux // uy if op == "udiv" else ux % uy).astype(np.uint64).view(np.int64), bits)
        y = np.where(y == 0, 1, y)
        q = np.sign(x) * np.sign(y) * (np.abs(x) // np.abs(y))  # sdiv truncates toward zero
        return wrap(q if op == "sdiv" else x - q * y, bits)
    return f


def _icmp(pred: str, t: Ty, a: Operand, b: Operand) -> Callable[[dict], np.ndarray]:
    bits = t.bits if t.kind == "int" else 64
    cmp = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}

    def f(env: dict) -> np.ndarray:
        x, y = a(env), b(env)
        if pred[0] == "u":
            x, y = unsigned(x, bits), unsigned(y, bits)
        return cmp[pred if pred in ("eq", "ne") else pred[1:]](x, y)
    return f


def _fcmp(pred: str, a: Operand, b: Operand) -> Callable[[dict], np.ndarray]:
    cmp = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
           "ge": np.greater_equal}

    def f(env: dict) -> np.ndarray:
        x, y = _f32(a(env)), _f32(b(env))
        nan = np.isnan(x) | np.isnan(y)
        if pred == "ord":
            return ~nan
        if pred == "uno":
            return nan
        r = cmp[pred[1:]](x, y)
        return (r & ~nan) if pred[0] == "o" else (r | nan)
    return f


def _cast(op: str, st: Ty, dt: Ty, sf: Operand) -> Callable[[dict], np.ndarray]:
    if op == "bitcast":
        if st.nbytes != dt.nbytes:
            raise EvalError(f"bitcast between sizes: {st} to {dt}")
        return lambda env: from_bytes(to_bytes(sf(env), st), dt)
    if op == "zext":
        return lambda env: unsigned(sf(env), st.bits).astype(np.int64)
    if op == "sext":
        return lambda env: -sf(env).astype(np.int64) if st.bits == 1 else sf(env)
    if op in ("trunc", "ptrtoint", "inttoptr", "addrspacecast"):
        bits = dt.bits if dt.kind == "int" else 8 * dt.nbytes
        return lambda env: wrap(sf(env), bits)
    if op in ("fptrunc", "fpext"):
        return lambda env: np.asarray(sf(env)).astype(np.float32).astype(dt.dtype) if st.name in ("half", "bfloat") \
            else np.asarray(sf(env)).astype(dt.dtype)
    if op == "sitofp":
        return lambda env: sf(env).astype(np.float64).astype(dt.dtype)
    if op == "uitofp":
        return lambda env: unsigned(sf(env), st.bits).astype(np.float64).astype(dt.dtype)
    return lambda env: wrap(np.trunc(sf(env).astype(np.float64)).astype(np.int64), dt.bits)  # fptosi / fptoui


# --- inline PTX ------------------------------------------------------------------------------------------

_PTX_ACCESS = re.compile(r"(?P<op>ld|st)\.(?P<space>global|shared)(?:\.[\w:]+)*?(?:\.v(?P<v>\d))?"
                         r"\.(?P<ty>b8|b16|b32|b64|f32|u32|s32|f16|u16)$")
_PTX_UNARY = {"ex2": np.exp2, "rsqrt": lambda x: 1.0 / np.sqrt(x.astype(np.float64)), "lg2": np.log2,
              "tanh": np.tanh, "rcp": lambda x: 1.0 / x.astype(np.float64), "sqrt": np.sqrt}
_FTZ_MIN = np.finfo(np.float32).tiny
# fp8 conversions (PTX ISA, cvt; sm_89+): two f32 -> an e4m3x2 / e5m2x2 (round to nearest even, satfinite:
# past the largest finite value -> that value, NaN stays NaN), `a` into the upper byte; and an fp8 pair ->
# f16x2, exact, the upper byte into the upper half
_PTX_FP8_CVT = re.compile(r"cvt\.rn\.(?:satfinite\.(?P<down>e4m3|e5m2)x2\.f32|f16x2\.(?P<up>e4m3|e5m2)x2)")
_FP8 = {"e4m3": (ml_dtypes.float8_e4m3fn, 448.0), "e5m2": (ml_dtypes.float8_e5m2, 57344.0)}


def _fp8_cvt(m: re.Match, srcs: list[np.ndarray]) -> np.ndarray:
    if m["down"]:
        dt, top = _FP8[m["down"]]
        a, b = (np.clip(_f32(x), -top, top).astype(dt).view(np.uint8).astype(np.int64) for x in srcs)
        return (a << 8) | b
    dt, _ = _FP8[m["up"]]
    word = np.asarray(srcs[0]).astype(np.int64) & 0xFFFF
    halves = [(((word >> sh) & 0xFF).astype(np.uint8).view(dt).astype(np.float16).view(np.uint16)
               .astype(np.int64)) for sh in (0, 8)]
    return halves[0] | (halves[1] << 16)


class _Ptx:
    """A few lines of inline PTX: loads and stores to global and shared memory (predicated by a
    `setp.ne.b32 p, $k, 0` guard), .approx math, `createpolicy`, `bar.sync`."""

    def __init__(self, text: str, outs: list[str], ins: list[str], args: list[tuple[Ty, Operand]], ret: Ty) -> None:
        self.text, self.outs, self.args, self.ret = text, outs, args, ret
        self.lines = []
        self.barrier: tuple | None = None
        for raw in text.replace(";", ";\n").splitlines():
            ln = raw.strip().rstrip(";").strip()
            if not ln or ln in ("{", "}") or ln.startswith(".reg"):
                continue
            self.lines.append(ln)
        if len(self.lines) == 1 and (m := re.fullmatch(r"(?:bar|barrier)\.sync(?:\.aligned)? (\S+)(?:, (\S+))?",
                                                       self.lines[0])):
            ident = self._const(m[1])
            self.barrier = (ident, self._const(m[2]) if m[2] else None)

    def _const(self, tok: str) -> object:
        if tok.startswith("$"):
            k = int(tok[1:]) - len(self.outs)
            return ("arg", self.args[k][1])
        return int(tok)

    def run(self, run: BlockRun, g: _Group, env: dict) -> object:
        regs: dict[str, np.ndarray] = {}
        for k, (_, f) in enumerate(self.args):
            regs[f"${k + len(self.outs)}"] = f(env)
        preds: dict[str, np.ndarray] = {}
        for ln in self.lines:
            mask = g.mask
            if m := re.match(r"@(!?)(\w+) (.*)$", ln):
                p = preds[m[2]]
                mask = mask & (~p if m[1] else p)
                ln = m[3]
            opc, _, ops = ln.partition(" ")
            ops = [o.strip() for o in _split_top(ops)]
            if m := re.fullmatch(r"setp\.(ne|eq)\.[bsu]32", opc):
                x = regs[ops[1]] if ops[1].startswith("$") else int(ops[1])
                y = int(ops[2])
                preds[ops[0]] = (x != y) if m[1] == "ne" else (x == y)
            elif opc.startswith("fence.proxy.async"):  # orders the generic proxy before the async one: one
                pass                                     # memory here, in program order
            elif opc.startswith("createpolicy"):
                regs[ops[0]] = np.zeros(WARP, np.int64)
            elif m := _PTX_ACCESS.fullmatch(opc):
                self._access(run, g, mask, m, ops, regs)
            elif m := _PTX_FP8_CVT.fullmatch(opc):
                regs[ops[0]] = _fp8_cvt(m, [regs[o] for o in ops[1:]])
            elif (name := opc.split(".")[0]) in _PTX_UNARY and opc.endswith(".f32"):
                with np.errstate(all="ignore"):
                    y = _f32(_PTX_UNARY[name](_f32(regs[ops[1]])))
                if ".ftz" in opc:
                    y = np.where(np.abs(y) < _FTZ_MIN, np.float32(0), y).astype(np.float32)
                regs[ops[0]] = y
            else:
                raise EvalError(f"unknown PTX instruction in inline asm: {ln!r} of {self.text!r}")
        outs = [regs.get(f"${k}") for k in range(len(self.outs))]
        if self.ret.kind == "void":
            return None
        if self.ret.kind == "struct":
            return tuple(_as_type(o, t) for o, t in zip(outs, self.ret.members, strict=True))
        return _as_type(outs[0], self.ret)

    def _access(self, run: BlockRun, g: _Group, mask: np.ndarray, m: re.Match, ops: list[str],
                regs: dict[str, np.ndarray]) -> None:
        n = int(m["v"] or 1)
        size = {"b8": 1, "b16": 2, "f16": 2, "u16": 2, "b64": 8}.get(m["ty"], 4)
        space = 1 if m["space"] == "global" else 3
        data, addr = (ops[0], ops[1]) if m["op"] == "ld" else (ops[1], ops[0])
        am = re.fullmatch(r"\[(\$\d+)(?:\s*\+\s*(\d+))?\]", addr)
        base = regs[am[1]] + int(am[2] or 0)
        names = [x.strip() for x in data.strip("{}").split(",")]
        assert len(names) == n, (data, n)
        if m["op"] == "ld":
            raw = run.read(g, mask, base, space, n * size)
            for i, r in enumerate(names):
                regs[r] = raw[:, i * size:(i + 1) * size]   # bytes, typed when the asm's outputs are read
                if size == 1:  # a byte into a wider register: zero-extended (PTX ISA, ld: .b8 into .b16)
                    regs[r] = raw[:, i].astype(np.int64)
        else:
            words = [_reg_bytes(regs[r], size) for r in names]
            run.write(g, mask, base, space, np.concatenate(words, axis=1))


def _reg_bytes(v: np.ndarray, size: int) -> np.ndarray:
    v = np.asarray(v)
    if v.dtype == np.uint8 and v.ndim == 2:
        return v
    if v.dtype.kind == "f":
        return to_bytes(v, Ty("float", name={4: "float", 2: "half", 8: "double"}[v.dtype.itemsize]))
    return to_bytes(v, Ty("int", bits=8 * size))


def _as_type(v: np.ndarray, t: Ty) -> np.ndarray:
    if v is None:
        raise EvalError("an inline asm output was never written")
    if v.dtype == np.uint8 and v.ndim == 2:  # bytes from a load
        return from_bytes(v, t)
    return np.asarray(v).astype(t.dtype)


# --- the block --------------------------------------------------------------------------------------------


@dataclass
class _Group:
    """Some lanes of one warp at one place in the program."""

    warp: int
    mask: np.ndarray
    block: str
    pc: int
    state: str = "run"    # run, bar, shfl, done
    bar: tuple = ()
    prev: str = ""


class BlockRun:
    """Runs one block of `fn` (the module docstring). `args`: the kernel's arguments in order, numpy
    arrays for pointers (written in place) and ints for integers; `block`: this block's index, `grid` the
    grid's size (x, y, z); `threads`: the block's size (default: the kernel's nvvm.maxntid); `smem_bytes`:
    the dynamic shared memory of the launch."""

    def __init__(self, fn: Function, args: Sequence[object], block: tuple[int, int, int] = (0, 0, 0),
                 grid: tuple[int, int, int] = (1, 1, 1), threads: int | None = None, smem_bytes: int = 0,
                 warp_order: str = "up") -> None:
        if fn.cluster:
            raise EvalError("a cluster kernel: one CTA of it cannot be run alone")
        if len(args) != len(fn.params):
            raise EvalError(f"{fn.name} takes {len(fn.params)} arguments, got {len(args)}")
        self.fn = fn
        self.threads = threads or fn.threads
        if not self.threads:
            raise EvalError("the block size is unknown: pass threads=")
        self.block, self.grid = block, grid
        self.smem = np.full(max(smem_bytes, 0), 0xFF, np.uint8)
        self.epoch = 0
        self.w_epoch = np.full(self.smem.size, -1, np.int64)
        self.w_warp = np.full(self.smem.size, -1, np.int64)
        self.r_epoch = np.full(self.smem.size, -1, np.int64)
        self.r_warps = np.zeros(self.smem.size, np.int64)
        self.globals: list[np.ndarray] = []
        self.steps = 0
        self.barriers = 0
        self.shuffles = 0
        nwarps = -(-self.threads // WARP)
        self.envs: list[dict] = [{} for _ in range(nwarps)]
        for (t, name), a in zip(fn.params, args, strict=True):
            if t.kind == "ptr":
                arr = np.asarray(a)
                if not arr.flags.c_contiguous:
                    raise EvalError(f"argument {name} is not contiguous")
                self.globals.append(arr.reshape(-1).view(np.uint8))
                val = np.full(WARP, (len(self.globals)) << GLOBAL_BASE_SHIFT, np.int64)
            else:
                val = wrap(np.full(WARP, int(a)), t.bits)
            for env in self.envs:
                env[name] = val
        lanes = np.arange(WARP)
        order = range(nwarps) if warp_order == "up" else range(nwarps - 1, -1, -1)
        self.groups = [_Group(w, w * WARP + lanes < self.threads, fn.order[0], 0) for w in order]

    # special registers, memory ---------------------------------------------------------------------

    def sreg(self, g: _Group, reg: str, axis: int) -> np.ndarray:
        if reg == "tid":
            v = g.warp * WARP + np.arange(WARP) if axis == 0 else np.zeros(WARP)
        elif reg == "ntid":
            v = np.full(WARP, self.threads if axis == 0 else 1)
        elif reg == "ctaid":
            v = np.full(WARP, self.block[axis])
        else:
            v = np.full(WARP, self.grid[axis])
        return v.astype(np.int64)

    def _where(self, g: _Group, mask: np.ndarray, addr: np.ndarray, space: int, nbytes: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(memory, byte index per active lane and byte, active lanes) of an access."""
        lanes = np.flatnonzero(mask)
        a = np.asarray(addr, dtype=np.int64)[lanes]
        if space == 0:
            space = 1 if (a >= 1 << GLOBAL_BASE_SHIFT).all() else 3
        if space == 3:
            mem, off = self.smem, a
            what = "shared memory"
        else:
            region = a >> GLOBAL_BASE_SHIFT
            if len(lanes) and not (region == region[0]).all():
                raise EvalError("one access spans several arguments")
            k = int(region[0]) - 1 if len(lanes) else 0
            if not 0 <= k < len(self.globals):
                raise EvalError(f"a global address outside every argument: {a[:4]}")
            mem, off = self.globals[k], a - ((k + 1) << GLOBAL_BASE_SHIFT)
            what = f"argument {self.fn.params[self._ptr_index(k)][1].lstrip('%')}"
        if len(lanes) and ((off < 0).any() or (off + nbytes > mem.size).any()):
            bad = lanes[(off < 0) | (off + nbytes > mem.size)]
            raise EvalError(f"warp {g.warp} lanes {bad.tolist()[:8]}: a {nbytes}-byte access out of the bounds of "
                            f"{what} ({mem.size} bytes) at {off[(off < 0) | (off + nbytes > mem.size)][:4].tolist()}")
        if len(lanes) and (off % min(nbytes, 16)).any():
            raise EvalError(f"warp {g.warp}: a misaligned {nbytes}-byte access to {what}")
        return mem, off[:, None] + np.arange(nbytes)[None, :], lanes

    def _ptr_index(self, k: int) -> int:
        return [i for i, (t, _) in enumerate(self.fn.params) if t.kind == "ptr"][k]

    def read(self, g: _Group, mask: np.ndarray, addr: np.ndarray, space: int, nbytes: int) -> np.ndarray:
        mem, idx, lanes = self._where(g, mask, addr, space, nbytes)
        if mem is self.smem and idx.size:
            self._race(g, idx.reshape(-1), write=None)
        out = np.zeros((WARP, nbytes), np.uint8)
        out[lanes] = mem[idx]
        return out

    def write(self, g: _Group, mask: np.ndarray, addr: np.ndarray, space: int, data: np.ndarray) -> None:
        mem, idx, lanes = self._where(g, mask, addr, space, data.shape[1])
        flat, vals = idx.reshape(-1), data[lanes].reshape(-1)
        order = np.argsort(flat, kind="stable")
        same = flat[order][1:] == flat[order][:-1]
        differ = same & (vals[order][1:] != vals[order][:-1])
        if differ.any():   # which lane's value lands is up to the hardware
            raise EvalError(f"warp {g.warp}: lanes store different values to byte {flat[order][1:][differ][0]} of "
                            f"{'shared memory' if mem is self.smem else 'an argument'} in one instruction")
        if mem is self.smem and idx.size:
            self._race(g, idx.reshape(-1), write=data[lanes].reshape(-1))
        mem[idx] = data[lanes]

    def _race(self, g: _Group, idx: np.ndarray, write: np.ndarray | None) -> None:
        e, w = self.epoch, g.warp
        other_w = (self.w_epoch[idx] == e) & (self.w_warp[idx] != w)
        if write is None:
            if (self.w_epoch[idx] < 0).any():
                raise EvalError(f"warp {w} reads shared byte {idx[self.w_epoch[idx] < 0][0]}, which no thread wrote")
            if other_w.any():
                b = idx[other_w][0]
                raise EvalError(f"race: warp {w} reads shared byte {b} that warp {self.w_warp[b]} wrote since the "
                                f"last barrier")
            fresh = self.r_epoch[idx] != e
            self.r_warps[idx[fresh]] = 0
            self.r_epoch[idx] = e
            np.bitwise_or.at(self.r_warps, idx, 1 << w)
            return
        other_r = (self.r_epoch[idx] == e) & ((self.r_warps[idx] & ~(1 << w)) != 0)
        if other_r.any():
            raise EvalError(f"race: warp {w} writes shared byte {idx[other_r][0]} that another warp read since "
                            f"the last barrier")
        clash = other_w & (self.smem[idx] != write)
        if clash.any():
            b = idx[clash][0]
            raise EvalError(f"race: warps {self.w_warp[b]} and {w} write different values to shared byte {b} "
                            f"since the last barrier")
        self.w_epoch[idx] = e
        self.w_warp[idx] = w

    def load(self, g: _Group, ptr: np.ndarray, space: int, t: Ty) -> np.ndarray:
        return from_bytes(self.read(g, g.mask, ptr, space, t.nbytes), t)

    def store(self, g: _Group, ptr: np.ndarray, space: int, t: Ty, v: np.ndarray) -> None:
        self.write(g, g.mask, ptr, space, to_bytes(v, t))

    # execution ------------------------------------------------------------------------------------

    def _set(self, g: _Group, env: dict, name: str, v: object) -> None:
        """env[name] = v in g's lanes (the other lanes of the warp keep theirs)."""
        if g.mask.all():
            env[name] = v
        elif isinstance(v, tuple):
            old = env.get(name)
            env[name] = tuple(_masked(g.mask, x, None if old is None else o) for x, o in
                              zip(v, old if old is not None else v, strict=True))
        else:
            env[name] = _masked(g.mask, v, env.get(name))

    def _jump(self, g: _Group, env: dict, target: str) -> None:
        ins = self.fn.blocks[target]
        n = self.fn.phi_count[target]
        vals = []
        for i in ins[:n]:
            src = next((f for lbl, f in i.phi if lbl == g.block), None)
            if src is None:
                raise EvalError(f"{i.text}: no value for the edge from {g.block}")
            vals.append((i.res, src(env)))
        for name, v in vals:
            self._set(g, env, name, v)
        g.prev, g.block, g.pc = g.block, target, n

    def _step_group(self, g: _Group) -> None:
        env = self.envs[g.warp]
        code = self.fn.blocks[g.block]
        while True:
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise EvalError(f"more than {MAX_STEPS} instructions: a loop that does not end?")
            ins = code[g.pc]
            k = ins.kind
            try:
                if k == "op":
                    self._set(g, env, ins.res, ins.fn(env))
                elif k == "mem":
                    v = ins.fn(self, g, env)
                    if ins.res is not None:
                        self._set(g, env, ins.res, v)
                elif k == "shfl":
                    mode, _, af, bf, cf = ins.args
                    members = self._members(g)
                    if (members & ~g.mask).any():   # wait for the other lanes (a rendezvous)
                        g.state = "shfl"
                        return
                    if (g.mask & ~members).any():
                        raise EvalError(f"warp {g.warp}: lanes outside the member mask execute {ins.text}")
                    self._set(g, env, ins.res, _shfl(mode, af(env), bf(env), cf(env), members))
                    self.shuffles += 1
                elif k == "barrier":
                    g.state, g.bar = "bar", ins.args
                    g.pc += 1
                    return
                elif k == "br":
                    self._jump(g, env, ins.targets[0])
                    code = self.fn.blocks[g.block]
                    continue
                elif k == "condbr":
                    c = np.asarray(ins.cond(env), bool)
                    t, f = g.mask & c, g.mask & ~c
                    if not f.any() or not t.any():
                        self._jump(g, env, ins.targets[0] if t.any() else ins.targets[1])
                    else:  # the warp diverges: the false side becomes a group of its own
                        other = _Group(g.warp, f, g.block, g.pc, prev=g.prev)
                        g.mask = t
                        self._jump(g, env, ins.targets[0])
                        other_block = ins.targets[1]
                        self._jump(other, env, other_block)
                        self.groups.insert(self.groups.index(g) + 1, other)
                    code = self.fn.blocks[g.block]
                    continue
                elif k == "ret":
                    g.state = "done"
                    return
                elif k == "phi":
                    raise EvalError(f"a phi after the start of block {g.block}")
            except EvalError as e:
                if "\n  at: " in str(e):
                    raise
                raise EvalError(f"{e}\n  at: {ins.text}") from None
            g.pc += 1

    def _members(self, g: _Group) -> np.ndarray:
        """The lanes of g's warp that the shfl.sync g waits at names (and that exist)."""
        _, mf, *_ = self.fn.blocks[g.block][g.pc].args
        members = (int(unsigned(mf(self.envs[g.warp]), 32)[0]) >> np.arange(WARP)) & 1 == 1
        return members & (g.warp * WARP + np.arange(WARP) < self.threads)

    def _merge(self) -> None:
        """Groups of one warp at the same place become one; a shfl.sync whose lanes are all there runs."""
        out: list[_Group] = []
        for g in self.groups:
            if g.state == "done":
                continue
            same = next((h for h in out if h.warp == g.warp and (h.block, h.pc, h.state, h.bar) ==
                         (g.block, g.pc, g.state, g.bar)), None)
            if same is not None:
                same.mask = same.mask | g.mask
            else:
                out.append(g)
        for g in out:
            if g.state == "shfl" and not (self._members(g) & ~g.mask).any():
                g.state = "run"
        self.groups = out

    def run(self) -> BlockRun:
        """Run the block to its end; returns self (counts in .steps, .barriers, .shuffles)."""
        with np.errstate(all="ignore"):
            while True:
                self._merge()
                if not self.groups:
                    return self
                runnable = [g for g in self.groups if g.state == "run"]
                if runnable:
                    for g in runnable:
                        self._step_group(g)
                    continue
                self._release()

    def _release(self) -> None:
        """Release the barriers every thread they wait for has reached; none: a deadlock."""
        waiting = [g for g in self.groups if g.state == "bar"]
        released = False
        for ident in sorted({_value(g.bar[0], self, g) for g in waiting}):
            at = [g for g in waiting if _value(g.bar[0], self, g) == ident]
            counts = {_value(g.bar[1], self, g) for g in at}
            if len(counts) != 1:
                raise EvalError(f"barrier {ident} waited on with different thread counts {sorted(counts)}")
            (need,) = counts
            if need is None:   # every thread of the block (PTX: bar.sync without a count)
                ok = len(at) == len(self.groups)
            else:              # bar.sync a, b counts whole warps
                ok = WARP * len({g.warp for g in at}) >= need
            if ok:
                for g in at:
                    g.state, g.bar = "run", ()
                released = True
                self.barriers += 1
                if len({g.warp for g in at}) == len(self.envs) and len(at) == len(self.groups):
                    self.epoch += 1   # the whole block met: the race check starts afresh
        if not released:
            desc = "; ".join(f"warp {g.warp} ({g.state}) at {self.fn.blocks[g.block][g.pc - (g.state == 'bar')].text}"
                             for g in self.groups[:6])
            raise EvalError(f"deadlock: no warp can move: {desc}")


def _masked(mask: np.ndarray, v: np.ndarray, old: np.ndarray | None) -> np.ndarray:
    v = np.asarray(v)
    if old is None or np.shape(old) != v.shape:
        old = np.zeros_like(v)
    return np.where(mask if v.ndim == 1 else mask[:, None], v, old)


def _value(x: object, run: BlockRun, g: _Group) -> int | None:
    if x is None or isinstance(x, int):
        return x
    return int(x[1](run.envs[g.warp])[np.flatnonzero(g.mask)[0]])


def _shfl(mode: str, a: np.ndarray, b: np.ndarray, c: np.ndarray, members: np.ndarray) -> np.ndarray:
    """shfl.sync (PTX ISA): each lane's source lane j from mode, b and c (clamp c[4:0], segment mask
    c[12:8]); a lane whose j falls outside its segment keeps its own value."""
    lane = np.arange(WARP)
    bval, cval, seg = unsigned(b, 32) & 31, unsigned(c, 32) & 31, (unsigned(c, 32) >> 8) & 31
    max_lane = (lane & seg) | (cval & ~seg)
    min_lane = lane & seg
    if mode == "up":
        j = lane - bval
        ok = j >= max_lane
    elif mode == "down":
        j = lane + bval
        ok = j <= max_lane
    elif mode == "bfly":
        j = lane ^ bval
        ok = j <= max_lane
    else:
        j = min_lane | (bval & ~seg)
        ok = j <= max_lane
    j = np.where(ok, j, lane)
    if not members[j[members]].all():
        raise EvalError("shfl.sync reads a lane outside the member mask")
    return np.asarray(a)[j]


def run_block(text: str, args: Sequence[object], block: int | tuple[int, int, int] = 0,
              grid: int | tuple[int, int, int] = 1, threads: int | None = None, smem_bytes: int = 0,
              warp_order: str = "up") -> BlockRun:
    """Parse `text` (a module's LLVM text) and run one block of its kernel (BlockRun)."""
    blk = (block, 0, 0) if isinstance(block, int) else block
    grd = (grid, 1, 1) if isinstance(grid, int) else grid
    return BlockRun(Function(text), args, blk, grd, threads, smem_bytes, warp_order).run()
