"""Global loads with an L2 cache hint: the `l2` attribute that passes/cache_policy.py sets on `tk.load`.

`create_policies` makes one policy register per priority the kernel's loads ask for, with
`createpolicy.fractional.L2::<priority>.b64 %p, 1.0` (the whole access gets the priority) in the
entry block, so it dominates every load that uses it. `hinted_load` emits
`ld.global.L2::cache_hint{.v2,.v4}.b32` (or `.b16`) with that register as the last operand (PTX ISA:
ld, createpolicy; sm_80 and later), with `.nc` where passes/readonly_loads.py marked the load
`readonly` (also without a policy), and returns the loaded value in the type a plain LLVM load of the
same bytes would give, so the rules that call it convert and extract exactly as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tkir.backend.values import LoweringError
from tkir.ir import Operation
from tkir.ops import L2_ATTR as ATTR
from tkir.ops import L2_PRIORITIES as PRIORITIES
from tkir.ops import READONLY_ATTR as READONLY
from tkir.ops import REREAD_ATTR as REREAD
from tkir.target import REG_BYTES as WORD

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext



def create_policies(cx: LoweringContext) -> None:
    """The kernel's policy registers (cx.l2_policies), created in the entry block."""
    asked = sorted({str(op.attrs[ATTR]) for op in cx.kernel.walk() if op.name == "tk.load" and ATTR in op.attrs})
    for p in asked:
        if p not in PRIORITIES:
            op = next(o for o in cx.kernel.walk() if o.name == "tk.load" and o.attrs.get(ATTR) == p)
            raise LoweringError(op.loc, f"backend: tk.load {{{ATTR} = \"{p}\"}}: not an L2 priority "
                                        f"({', '.join(PRIORITIES)})")
        cx.l2_policies[p] = cx.w.asm("i64", [f"createpolicy.fractional.L2::{p}.b64 $0, 1.0;"], ["=l"], [],
                                     "l2pol")


def policy_of(cx: LoweringContext, op: Operation) -> str | None:
    """The policy register of a load's `l2` attribute, or None (a plain load)."""
    p = op.attrs.get(ATTR)
    return None if p is None else cx.l2_policies[str(p)]


def readonly_of(op: Operation) -> str | None:
    """How a load reads through the non-coherent path (passes/readonly_loads.py): None (it does not),
    "nc", or "nc_reread" (`reread`: with .L1::no_allocate, so that ptxas loads it again)."""
    if op.attrs.get(READONLY) is not True:
        return None
    return "nc_reread" if op.attrs.get(REREAD) is True else "nc"


def hinted_load(cx: LoweringContext, ptr: str, ety: str, n: int, elem_bytes: int, policy: str | None,
                vector: bool = True, nc: str | None = None) -> str:
    """`n` elements of LLVM type `ety` (`elem_bytes` each; 1, 2, 4, 8 or 16 bytes in all) at `ptr` (ptr
    addrspace(1)), loaded with the L2 policy `policy` (None: no hint) and, with `nc` (readonly_of),
    through the non-coherent read-only path (`ld.global.nc`; `.L1::no_allocate` for a re-read). The
    value is the `<n x ety>` (with `vector=False`, one `ety`) a plain `load` of that type would give.
    The access is the one LLVM's NVPTX backend picks for that load: 8 bytes of 16-bit elements as
    `.v4.b16` (no unpacking of words afterwards), whole 32-bit words otherwise."""
    w = cx.w
    nbytes = n * elem_bytes
    vt = f"<{n} x {ety}>" if vector else ety
    opcode = ("ld.global" + (".nc" if nc else "") + (".L1::no_allocate" if nc == "nc_reread" else "")
              + (".L2::cache_hint" if policy is not None else ""))
    args = [("ptr addrspace(1)", ptr)] + ([("i64", policy)] if policy is not None else [])
    pcons = ["l"] * len(args)

    def tail(k: int) -> str:  # the address operand $k, then the policy's
        return f"[${k}]" + (f", ${k + 1}" if policy is not None else "") + ";"

    if nbytes == 8 and elem_bytes == 2:
        ret = "{i16, i16, i16, i16}"
        r = w.asm(ret, [f"{opcode}.v4.b16 {{$0, $1, $2, $3}}, {tail(4)}"], ["=h"] * 4 + pcons, args, "ldq")
        vec = "poison"  # built from its elements, so that LLVM extracts each as the i16 it was loaded as
        for j in range(4):
            half = w.op(f"bitcast i16 {w.op(f'extractvalue {ret} {r}, {j}', 'lh')} to {ety}", "le")
            vec = w.op(f"insertelement {vt} {vec}, {ety} {half}, i32 {j}", "lq")
        return vec
    if nbytes == 1:  # one fp8 element, through a 16-bit register
        h = w.asm("i16", [f"{opcode}.b8 $0, {tail(1)}"], ["=h"] + pcons, args, "ldb")
        b = w.op(f"trunc i16 {h} to i8", "lb")
        return b if vt == "i8" else w.op(f"bitcast i8 {b} to {vt}", "ld")
    if nbytes == 2:
        h = w.asm("i16", [f"{opcode}.b16 $0, {tail(1)}"], ["=h"] + pcons, args, "ldh")
        return w.op(f"bitcast i16 {h} to {vt}", "ld")
    if nbytes % WORD or nbytes // WORD not in (1, 2, 4):
        raise LoweringError(None, f"backend: no hinted global load of {nbytes} bytes")
    n = nbytes // WORD
    if n == 1:
        word = w.asm("i32", [f"{opcode}.b32 $0, {tail(1)}"], ["=r"] + pcons, args, "ldw")
        return word if vt == "i32" else w.op(f"bitcast i32 {word} to {vt}", "ld")
    ret = "{" + ", ".join(["i32"] * n) + "}"
    regs = ", ".join(f"${j}" for j in range(n))
    r = w.asm(ret, [f"{opcode}.v{n}.b32 {{{regs}}}, {tail(n)}"], ["=r"] * n + pcons, args, "ldv")
    vec = "poison"
    for j in range(n):
        word = w.op(f"extractvalue {ret} {r}, {j}", "lw")
        vec = w.op(f"insertelement <{n} x i32> {vec}, i32 {word}, i32 {j}", "lv")
    return w.op(f"bitcast <{n} x i32> {vec} to {vt}", "ld")
