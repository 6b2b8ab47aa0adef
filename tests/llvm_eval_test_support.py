"""A tiny evaluator of the integer arithmetic in tkir's LLVM text, for CPU tests of the backend's meaning.

The backend writes straight-line i32/i64 arithmetic on named values (`%abase.282 = add i32 %a_s.278,
%arow.281`). `LLVMText` reads every `%name = <instruction>` line and evaluates a value for one thread:
the thread index (`llvm.nvvm.read.ptx.sreg.tid.x`) comes from the caller, kernel parameters (sizes)
take `params`, the grid size is 132 blocks, and everything else the arithmetic cannot see (phis of loop
counters, block indices, loaded values) is 0 -- iteration 0 of every loop, block 0 of the grid,
pipeline stage 0 -- unless the caller overrides a name (a block index, an iteration counter). With that, tests can
say which shared-memory byte a wgmma descriptor points at, or where a TMA copy writes, for each
warpgroup, and check it against the hardware's rules (tests/backend/test_mutation_kills.py).

Also `asm_calls`: every inline-asm call in order, with its asm text and typed arguments, and
`ref_swizzle`: the tensor-map/wgmma swizzle written from the PTX ISA's description (independent of
tkir.layout.SWIZZLE_MASK, so a wrong mask there cannot hide).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

_DEF = re.compile(r"^\s*(%[\w.]+) = (.*)$")
_BIN = re.compile(r"^(add|sub|mul|shl|lshr|ashr|and|or|xor|udiv|sdiv|urem|srem)(?: nuw| nsw| exact)* "
                  r"(i\d+) ([^,]+), (.+)$")
_CAST = re.compile(r"^(zext|sext|trunc) i\d+ (\S+) to i\d+$")
_ICMP = re.compile(r"^icmp (\w+) i\d+ ([^,]+), (.+)$")
_SELECT = re.compile(r"^select i1 (\S+), i\d+ (\S+), i\d+ (\S+)$")
_MINMAX = re.compile(r"^call i\d+ @llvm\.(smin|smax|umin|umax)\.i\d+\(i\d+ (\S+), i\d+ (\S+)\)$")
_ASM = re.compile(r'asm (?:sideeffect )?"(?P<asm>(?:[^"\\]|\\.)*)", "(?P<cons>[^"]*)"\((?P<args>.*)\)\s*$')
_PARAM = re.compile(r"i32 (%\w+)")
_GEP = re.compile(r"^getelementptr (?:inbounds )?i8, ptr(?: addrspace\(\d+\))? (%[\w.]+), i\d+ (\S+)$")


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def ref_swizzle(addr: np.ndarray | int, span: int) -> np.ndarray | int:
    """The swizzle of the PTX ISA's tensor swizzling modes (§5.5.7; HOPPER.md §3.1, CuTe Swizzle<B,4,3>),
    in the ISA's own terms: shared memory is 128-byte lines of eight 16-byte chunks; in 32B/64B/128B
    mode, chunk c of line L is stored at chunk c XOR (L mod span/16). Span 0 and 16 (interleaved) do
    not swizzle."""
    if span in (0, 16):
        return addr
    chunks = span // 16
    line, chunk, byte = addr // 128, (addr // 16) % 8, addr % 16
    return line * 128 + (chunk ^ (line % chunks)) * 16 + byte


@dataclass
class AsmCall:
    """One inline-asm call: its PTX text (lines joined by newlines) and its (type, value) arguments."""

    result: str | None
    asm: str
    args: list[tuple[str, str]]
    line: int


class LLVMText:
    """The values of one kernel's LLVM text, evaluated for one thread (see the module docstring)."""

    def __init__(self, text: str, params: int = 4096) -> None:
        self.defs: dict[str, str] = {}
        self.calls: list[AsmCall] = []
        self.lines = text.splitlines()
        self.param_names: set[str] = set()
        for i, line in enumerate(self.lines):
            if line.startswith("define "):
                self.param_names |= set(_PARAM.findall(line))
            m = _DEF.match(line)
            result = None
            if m:
                result, rhs = m.group(1), m.group(2)
                self.defs[result] = rhs
            a = _ASM.search(line)
            if a:
                args = [tuple(x.strip().rsplit(" ", 1)) for x in _split_args(a.group("args"))]
                self.calls.append(AsmCall(result, a.group("asm").replace("\\0A", "\n"), args, i))  # type: ignore[arg-type]
        self.params = params
        self._reach: dict[str, list[str]] = {}

    def value(self, token: str, tid: int, overrides: dict[str, int] | None = None) -> int:
        """The integer value of an operand (`%name` or a literal) for thread `tid`; `overrides` fixes
        the values of some names (a loop's iteration counter, say)."""
        return self._eval(token.strip(), tid, dict(overrides or {}))

    def depends_on(self, token: str, prefix: str) -> list[str]:
        """The names starting with `prefix` that the value of `token` is computed from (not through
        phis: a value carried from the previous iteration does not depend on this one's counter)."""
        return [n for n in self.reachable(token) if n.startswith(prefix)]

    def reachable(self, token: str) -> list[str]:
        """`token` and every name its value is computed from, stopping at phis."""
        token = token.strip()
        if token not in self._reach:
            self._reach[token] = self._reachable(token)
        return self._reach[token]

    def _reachable(self, token: str) -> list[str]:
        seen: dict[str, None] = {}
        todo = [token]
        while todo:
            tok = todo.pop()
            if tok in seen:
                continue
            seen[tok] = None
            rhs = self.defs.get(tok, "")
            if not rhs.startswith("phi "):
                todo += re.findall(r"%[\w.]+", rhs)
        return list(seen)

    def pointer(self, token: str, tid: int) -> tuple[str, int]:
        """(kernel parameter, byte offset) of a pointer built with `getelementptr i8` from a parameter."""
        tok, off = token.strip(), 0
        while tok in self.defs:
            m = _GEP.match(self.defs[tok])
            if not m:
                raise ValueError(f"cannot follow the pointer {tok}: {self.defs[tok]}")
            tok, off = m.group(1), off + self.value(m.group(2), tid)
        return tok.lstrip("%"), off

    def _eval(self, tok: str, tid: int, memo: dict[str, int]) -> int:
        if re.fullmatch(r"-?\d+", tok):
            return int(tok)
        if tok in ("true", "false"):
            return int(tok == "true")
        if tok in memo:
            return memo[tok]
        if tok in self.param_names:
            return self.params
        rhs = self.defs.get(tok)
        if rhs is None:
            raise KeyError(f"no definition of {tok}")
        v = self._rhs(rhs, tid, memo)
        memo[tok] = v
        return v

    def _rhs(self, rhs: str, tid: int, memo: dict[str, int]) -> int:
        ev = lambda t: self._eval(t, tid, memo)  # noqa: E731
        if rhs.startswith(("phi ", "load ")) or rhs.startswith("call i32 @llvm.nvvm.read.ptx.sreg.ctaid"):
            return 0  # iteration 0, block 0, values from memory
        if rhs.startswith("call i32 @llvm.nvvm.read.ptx.sreg.nctaid"):
            return 132  # a grid of one block per SM of an H100/H200
        if "@llvm.nvvm.read.ptx.sreg.tid.x" in rhs:
            return tid
        if rhs.startswith("ptrtoint"):
            return 0  # the shared window's base
        m = _BIN.match(rhs)
        if m:
            op, _, a, b = m.groups()
            x, y = ev(a), ev(b)
            if op in ("udiv", "sdiv", "urem", "srem") and y == 0:
                return 0
            return {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "shl": lambda: x << y,
                    "lshr": lambda: x >> y, "ashr": lambda: x >> y, "and": lambda: x & y, "or": lambda: x | y,
                    "xor": lambda: x ^ y, "udiv": lambda: x // y, "sdiv": lambda: _trunc_div(x, y),
                    "urem": lambda: x % y, "srem": lambda: x - _trunc_div(x, y) * y}[op]()
        m = _CAST.match(rhs)
        if m:
            return ev(m.group(2))
        m = _ICMP.match(rhs)
        if m:
            pred, a, b = m.groups()
            x, y = ev(a), ev(b)
            return int({"eq": x == y, "ne": x != y, "slt": x < y, "sle": x <= y, "sgt": x > y, "sge": x >= y,
                        "ult": x < y, "ule": x <= y, "ugt": x > y, "uge": x >= y}[pred])
        m = _SELECT.match(rhs)
        if m:
            c, a, b = m.groups()
            return ev(a) if ev(c) else ev(b)
        m = _MINMAX.match(rhs)
        if m:
            f, a, b = m.groups()
            return (min if f.endswith("min") else max)(ev(a), ev(b))
        raise ValueError(f"cannot evaluate: {rhs}")


def shared_addresses(fn: LLVMText, call: AsmCall, threads: int, store: bool) -> np.ndarray:
    """The shared address every thread 0 .. threads-1 gives a shared-memory asm call: a store's first argument
    (`st.shared... [$0], ...`), a load's last (`ld.shared... ..., [$n]`, ldmatrix likewise)."""
    addr = call.args[0][1] if store else call.args[-1][1]
    return np.array([fn.value(addr, t) for t in range(threads)])


def _split_args(s: str) -> list[str]:
    """Split an argument list at top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur)
    return out
