"""Global loads a thread waits for before an asynchronous wait: read from the SASS.

A consumer loop waits on mbarriers (`SYNCS.PHASECHK`, the stage a producer filled) and issues wgmmas
(`WARPGROUP.ARRIVE`, `HGMMA`, `QGMMA`); a global load (`LDG`) whose value is read before the next wgmma is issued
makes the thread wait out the load's latency there, in front of the product.
`early_reads` lists each such load with the instruction that first reads it: in attention_bwd.tk's loop, the L and
Delta element loads read by an `FSEL` each (the select of an element past the tensor's end) before the stage wait
and the first wgmma, Nsight Compute's top stall there (docs/experiments.md, "The backward's L / Delta stall").
`tkc report` prints the count. The search follows the fall-through path (labels and guarded branches, such as an
mbarrier wait's retry branch, do not end it; an unguarded branch, EXIT or RET does).
"""

from __future__ import annotations

import re

_REG = re.compile(r"\bR(\d+)\b")
_WIDTH = {".64": 2, ".128": 4}
WGMMA_ISSUE = ("WARPGROUP.ARRIVE", "HGMMA", "QGMMA", "IGMMA", "BGMMA")
_NO_DEST = ("ST", "RED", "ATOM", "SYNCS", "BAR", "HGMMA", "QGMMA", "IGMMA", "BGMMA", "WARPGROUP", "BRA", "EXIT",
            "UTMA", "MEMBAR", "FENCE", "DEPBAR", "LDGDEPBAR", "CCTL", "NOP", "RET")


def _sources(op: str, operands: str) -> set[int]:
    """The registers an instruction reads (every register operand but the first, the destination, of an
    instruction that writes one)."""
    regs = [int(r) for r in _REG.findall(operands)]
    if op.startswith(_NO_DEST):
        return set(regs)
    return set(regs[1:])


def early_reads(sass: str) -> list[dict[str, str]]:
    """{"load": the LDG's address in the code, "reader": the opcode that reads its value first} for each global load
    whose value is read before the next wgmma is issued in the same straight-line code (mbarrier waits between
    them included: the thread then waits for the load before it waits for its stage)."""
    from tkir.backend.toolchain import sass_instructions  # the backend loads only when a SASS is read

    ins = [(pc, guard, *text.partition(" ")[::2]) for pc, guard, text in sass_instructions(sass)]
    out = []
    for i, (pc, _, op, operands) in enumerate(ins):
        first = _REG.search(operands) if op.startswith("LDG") else None
        if first is None:
            continue
        width = next((n for suffix, n in _WIDTH.items() if suffix in op), 1)
        dest = set(range(int(first.group(1)), int(first.group(1)) + width))
        reader = None
        for _, guard2, op2, operands2 in ins[i + 1:]:
            if op2.startswith(WGMMA_ISSUE):
                if reader is not None:
                    out.append({"load": pc, "reader": reader})
                break
            if op2.startswith(("BRA", "EXIT", "RET")) and not guard2:
                break  # the fall-through path ends (a guarded branch, such as an mbarrier wait's retry, does not)
            if reader is None and _sources(op2, operands2) & dest:
                reader = op2
            elif reader is None and not op2.startswith(_NO_DEST) and (w := _REG.search(operands2)) \
                    and int(w.group(1)) in dest:
                break  # written again before anything reads it
    return out


def format_early_reads(reads: list[dict[str, str]]) -> str:
    """One line of `tkc report`."""
    readers = sorted({r["reader"] for r in reads})
    return (f"global loads read before the next wgmma is issued: {len(reads)} (first read by {', '.join(readers)}): "
            "the thread waits for each load before it issues the product")
