"""A small writer of LLVM IR text: fresh names, basic blocks, phis patched after the fact, inline asm.

llvmlite parses the text (`llvm.parse_assembly`) and its NVPTX target emits PTX. Inline asm spanning
several PTX lines joins them with `\\0A` inside the LLVM string literal (HOPPER.md, verified).
"""

from __future__ import annotations

import functools
import re
import struct

import numpy as np

# Longest name hint kept in an LLVM local name. LLVM truncates local names past 1024 characters
# (its -non-global-value-max-name-size), so two long names sharing a prefix collided ("redefinition
# of argument"); a kept hint of 64 plus the unique counter never reaches that, and local names do not
# reach the PTX (registers are %r<N>, parameters KERNEL_param_<i>).
NAME_HINT_CHARS = 64
NAME_HINTS_CACHE = 4096  # distinct hints whose cleaned form name_hint keeps (a kernel uses a few dozen)
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def f32_literal(x: float) -> str:
    """An LLVM `float` constant: LLVM wants the double-precision hex of a float-representable value."""
    v = float(np.float32(x))
    return f"0x{struct.unpack('>Q', struct.pack('>d', v))[0]:016X}"


def asm_string(lines: list[str]) -> str:
    text = "\\0A".join(lines)
    return text.replace('"', '\\22')


@functools.lru_cache(maxsize=NAME_HINTS_CACHE)
def name_hint(hint: str) -> str:
    """`hint` as the start of an LLVM local name: identifier characters only, not starting with a
    digit (`%0.8` would read as the numbered value %0: IR text whose temporaries print as %0 failed
    to lower), at most NAME_HINT_CHARS long."""
    clean = "".join(c if c.isalnum() or c == "_" else "_" for c in hint[:NAME_HINT_CHARS]) or "t"
    return clean if PLAIN_NAME.fullmatch(clean) else f"v{clean}"[:NAME_HINT_CHARS]


def param_names(names: list[str]) -> list[str]:
    """LLVM names of a kernel's parameters: `%NAME` where NAME is a plain identifier of at most
    NAME_HINT_CHARS that no earlier parameter took (a tensor `A_tma` and the tensor map of `A` may
    share a name), else `%HINT.p<i>` (no fresh() name ends in `.p<i>`)."""
    out: list[str] = []
    for i, n in enumerate(names):
        plain = PLAIN_NAME.fullmatch(n) and len(n) <= NAME_HINT_CHARS and f"%{n}" not in out
        out.append(f"%{n}" if plain else f"%{name_hint(n)}.p{i}")
    return out


class LLVMWriter:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.counter = 0
        self.block = "entry"
        self.declares: set[str] = set()
        self.labels: set[str] = set()
        self.types: dict[str, str] = {}  # named struct types: name -> definition
        # 16-bit halves unpacked from a b32 word (unpack_pair): half -> (word, 0 | 1), so that
        # pack_pair of the same two halves is the word itself, with no copy
        self.halves: dict[str, tuple[str, int]] = {}
        # bytes taken from a b32 word (unpack_bytes): byte -> (word, 0..3), for the same reason (fp8 A fragments)
        self.bytes_of: dict[str, tuple[str, int]] = {}
        # bytes taken from a 16-bit word (an fp8 cvt's pair, backend/f32.py): byte -> (i16 word, 0 | 1)
        self.pairs_of: dict[str, tuple[str, int]] = {}

    def fresh(self, hint: str = "t") -> str:
        self.counter += 1
        return f"%{name_hint(hint)}.{self.counter}"

    def label(self, hint: str) -> str:
        self.counter += 1
        name = f"{hint}.{self.counter}"
        self.labels.add(name)
        return name

    def emit(self, line: str) -> int:
        self.lines.append("  " + line)
        return len(self.lines) - 1

    def op(self, text: str, hint: str = "t") -> str:
        name = self.fresh(hint)
        self.emit(f"{name} = {text}")
        return name

    def start_block(self, name: str) -> None:
        self.lines.append(f"{name}:")
        self.block = name

    def br(self, target: str) -> None:
        self.emit(f"br label %{target}")

    def cond_br(self, cond: str, then: str, other: str) -> None:
        self.emit(f"br i1 {cond}, label %{then}, label %{other}")

    def declare(self, decl: str) -> None:
        self.declares.add(decl)

    def struct(self, elem: str, n: int) -> str:
        """The named struct type of `n` members of type `elem` (`%floatx128 = type {float, ...}`), defined
        once at the top of the module: the wgmma accumulator's 128 floats are then not spelled out at
        every asm call and extractvalue (gemm's LLVM text: 0.85 MB -> 0.17 MB; the PTX is the same)."""
        name = f"%{elem}x{n}"
        self.types.setdefault(name, f"{name} = type {{{', '.join([elem] * n)}}}")
        return name

    def call(self, ret: str, fn: str, args: list[tuple[str, str]], decl_args: list[str] | None = None,
             hint: str = "c") -> str | None:
        arg_types = decl_args if decl_args is not None else [t for t, _ in args]
        self.declare(f"declare {ret} @{fn}({', '.join(arg_types)})")
        call = f"call {ret} @{fn}({', '.join(f'{t} {v}' for t, v in args)})"
        if ret == "void":
            self.emit(call)
            return None
        return self.op(call, hint)

    def asm(self, ret: str, lines: list[str], constraints: list[str], args: list[tuple[str, str]],
            hint: str = "asm") -> str | None:
        cons = ",".join(constraints + ["~{memory}"])
        a = ", ".join(f"{t} {v}" for t, v in args)
        text = f'call {ret} asm sideeffect "{asm_string(lines)}", "{cons}"({a})'
        if ret == "void":
            self.emit(text)
            return None
        return self.op(text, hint)

    def pack_bf16x2(self, lo: str, hi: str) -> str:
        """Two bf16 values as one b32 register (low half = lo), the pair layout of every fragment."""
        v = self.op(f"insertelement <2 x bfloat> poison, bfloat {lo}, i32 0", "pk")
        v = self.op(f"insertelement <2 x bfloat> {v}, bfloat {hi}, i32 1", "pk")
        return self.op(f"bitcast <2 x bfloat> {v} to i32", "bits")

    def unpack_pair(self, word: str, dtype: str) -> tuple[str, str]:
        """The two 16-bit floats (bf16 or f16) of a b32 register, low half first."""
        ety = {"bf16": "bfloat", "f16": "half"}[dtype]
        v = self.op(f"bitcast i32 {word} to <2 x {ety}>", "up")
        lo, hi = (self.op(f"extractelement <2 x {ety}> {v}, i32 {k}", "half") for k in (0, 1))
        self.halves[lo], self.halves[hi] = (word, 0), (word, 1)
        return lo, hi

    def unpack_bytes(self, word: str) -> list[str]:
        """The four i8 bytes of a b32 register, lowest first (remembered: pack_a_fragment_fp8 reuses the word)."""
        out = []
        for k in range(4):
            shifted = self.op(f"lshr i32 {word}, {8 * k}", "byte") if k else word
            out.append(self.op(f"trunc i32 {shifted} to i8", "b8"))
            self.bytes_of[out[-1]] = (word, k)
        return out

    def pack_bytes(self, vals: list[str]) -> str:
        """Four i8 values as one b32 register, the first in the lowest byte: the word they were taken from
        (unpack_bytes) as it is, two fp8 cvt pairs joined (one prmt), or the bytes inserted one by one."""
        known = [self.bytes_of.get(v) for v in vals]
        if all(b is not None and b == (known[0][0], e) for e, b in enumerate(known)):
            return known[0][0]
        pairs = [self.pairs_of.get(v) for v in vals]
        if all(p is not None for p in pairs) and [p[1] for p in pairs] == [0, 1, 0, 1] \
                and pairs[0][0] == pairs[1][0] and pairs[2][0] == pairs[3][0]:
            lo = self.op(f"zext i16 {pairs[0][0]} to i32", "lo16")
            hi = self.op(f"shl i32 {self.op(f'zext i16 {pairs[2][0]} to i32', 'hi16')}, 16", "hi16")
            return self.op(f"or i32 {lo}, {hi}", "w8")
        v = "poison"
        for e, x in enumerate(vals):
            v = self.op(f"insertelement <4 x i8> {v}, i8 {x}, i32 {e}", "pk8")
        return self.op(f"bitcast <4 x i8> {v} to i32", "w8")

    def pack_pair(self, lo: str, hi: str, dtype: str) -> str:
        """Two 16-bit floats (bf16 or f16) as one b32 register, low half = lo. The halves of one word
        (unpack_pair) give that word back: no unpack-and-repack copies, which ptxas counts as writes
        to a wgmma's A registers and answers by serializing the wgmmas (warning C7513)."""
        a, b = self.halves.get(lo), self.halves.get(hi)
        if a is not None and b is not None and a[0] == b[0] and (a[1], b[1]) == (0, 1):
            return a[0]
        if dtype == "bf16":
            return self.pack_bf16x2(lo, hi)
        ety = {"f16": "half"}[dtype]
        v = self.op(f"insertelement <2 x {ety}> poison, {ety} {lo}, i32 0", "pk")
        v = self.op(f"insertelement <2 x {ety}> {v}, {ety} {hi}, i32 1", "pk")
        return self.op(f"bitcast <2 x {ety}> {v} to i32", "bits")

    def sreg(self, name: str) -> str:
        return self.call("i32", f"llvm.nvvm.read.ptx.sreg.{name}", [], hint=name.replace(".", "_"))
