"""Where ptxas put overlap-mma's waits: does the softmax of a rotated attention loop run under the second mma?

overlap-mma (passes/overlap_mma.py) rotates a consumer loop so that block j's element-wise work W runs while block
j-1's second product (`o += p @ v`) is in flight; the PTX waits for that product (`wgmma.wait_group 0`) after W.
ptxas may move the wait: `overlap_windows` reads the SASS and, for each wait for the first product
(`WARPGROUP.DEPBAR.LE gsb0, 0x1`) followed by a wait for everything (`0x0`) before the next wgmma, counts the
MUFU.EX2 between the two (`under`: exponentials that run while the second product may still be in flight) and
from the second wait to the next wgmma or the end (`after`). `tkc report` prints them for kernels overlap-mma
rotated (docs/passes.md, overlap-mma: "What ptxas makes of the rotation").
"""

from __future__ import annotations

from tkir.ir import Operation, parent_op
from tkir.ops_pipeline import WAIT_FENCE_ATTR

WAIT_FIRST = "WARPGROUP.DEPBAR.LE gsb0, 0x1"   # all but the newest wgmma group done: the first product's
WAIT_ALL = "WARPGROUP.DEPBAR.LE gsb0, 0x0"     # every group done: the second product's
EXP = "MUFU.EX2"


def _is_wgmma(ins: str) -> bool:
    return ins.startswith(("HGMMA", "QGMMA", "IGMMA", "BGMMA"))


def overlap_windows(sass: str) -> list[dict[str, int]]:
    """{"under": n, "after": m} for each first-product wait followed by an all-groups wait before the next wgmma,
    in SASS order."""
    from tkir.backend.toolchain import sass_instructions  # the backend loads only when a SASS is read

    ins = [text for _, _, text in sass_instructions(sass)]
    out: list[dict[str, int]] = []
    for i, text in enumerate(ins):
        if WAIT_FIRST not in text:
            continue
        j, under = i + 1, 0
        while j < len(ins) and WAIT_ALL not in ins[j] and not _is_wgmma(ins[j]):
            under += ins[j].startswith(EXP)
            j += 1
        if j == len(ins) or WAIT_ALL not in ins[j]:
            continue
        k, after = j + 1, 0
        while k < len(ins) and not _is_wgmma(ins[k]) and not ins[k].startswith("EXIT"):
            after += ins[k].startswith(EXP)
            k += 1
        out.append({"under": under, "after": after})
    return out


def rotated_waits(kernel: Operation) -> list[Operation]:
    """The waits overlap-mma puts after W in its steady loops: a `tk.mma_wait` inside a loop, of a `defer_wait`
    mma whose A operand is the previous iteration's (a value the loop carries: p of block j-1). pingpong's
    deferred waits read an A of their own iteration and are not counted."""
    out = []
    for op in kernel.walk():
        loop = parent_op(op) if op.name == "tk.mma_wait" else None
        if loop is None or loop.name != "scf.for":
            continue
        mma = op.operands[0].owner
        if not (isinstance(mma, Operation) and mma.name == "tk.mma" and mma.attrs.get("defer_wait")):
            continue
        if mma.operands[0] in op.parent.args:
            out.append(op)
    return out


def overlap_report(kernel: Operation, sass: str) -> dict | None:
    """The report's `overlap_in_sass` for a kernel overlap-mma rotated (None for any other): the windows, and
    whether the steady loops' waits carry overlap-mma{fence_wait}'s fence."""
    waits = rotated_waits(kernel)
    if not waits:
        return None
    return {"windows": overlap_windows(sass), "fenced": all(w.attrs.get(WAIT_FENCE_ATTR) for w in waits)}


def format_overlap(rep: dict) -> str:
    """One line of `tkc report`."""
    wins = rep["windows"]
    if not wins:
        return "overlap-mma in the SASS: no wait for the first product followed by one for the second found"
    counts = ", ".join(f"{w['under']} of {w['under'] + w['after']}" for w in wins)
    line = f"overlap-mma in the SASS: exponentials between the waits for the first and the second mma: {counts}"
    if rep["fenced"]:
        return line + " (fence_wait)"
    if any(w["under"] < w["after"] for w in wins):
        line += ("; ptxas moved the second mma's wait above the rest (overlap-mma{fence_wait=true} keeps it below "
                 "them, docs/passes.md)")
    return line
