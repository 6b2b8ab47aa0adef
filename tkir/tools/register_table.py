"""Predicted registers per thread beside ptxas's for every example and every user-suite kernel: the error of
plan-occupancy's register estimate (docs/passes.md, "plan-occupancy"), measured with the local ptxas (no GPU).

    python3 -m tkir.tools.register_table          # examples/*.tk and examples/user/*.tk at their defaults, both targets
    python3 -m tkir.tools.register_table softmax_bwd user/layernorm_bwd
    python3 -m tkir.tools.register_table --need gemm      # also the fewest registers ptxas holds the code in

Each row: kernel (its path under examples/, without .tk), target, predicted (the computing role's `regs`,
tkir.tools.report.register_comparison), estimate (plan-occupancy's live-range estimate before rounding, the
occupancy budget's total), ptxas ("Used N registers"), sass (1 + the highest R register the SASS names), the
reference the estimate is measured against, the relative error (reference - estimate) / reference, spills
(bytes stored to local memory), `spill_fallback` (the backend's record where ptxas spilled at the blocks per SM
it asked for, the plan's or its own two-block floor, and the kernel was lowered again for fewer: backend/lower.py
avoid_spills) and `planned_blocks` (plan-occupancy's blocks per SM). The reference is
ptxas's count, but for a kernel with setmaxnreg: there ptxas reports the launch allocation (65536 / threads,
rounded down to 8), not what the consumers' code uses after `setmaxnreg.inc`, so the reference is what the
SASS names plus PTXAS_EXTRA_REGS, the count ptxas would report for that code (the rows say `setmaxnreg`).

With `--need`, each row also gives `need`: the fewest registers a thread ptxas assembles the same PTX in without
spilling (ptxas_need: a bisection of `.maxnreg` for a one-role kernel; for a warp-specialized one, of the
consumers' setmaxnreg value in steps of REG_ALLOC_UNIT, down to the launch allocation, below which setmaxnreg
does not cap ptxas). ptxas's own count is what it takes under the plan's cap, and it takes more where it can
(the ldmatrix fragments of later k16 steps on sm_80, the loads of a row kernel issued early): `need` says how much
of that is need. About two to eight ptxas runs a row. ptxas's spilling is not monotone in the cap (embedding.tk
holds at `.maxnreg` 25-29, spills 16 B at 30, holds from 31), so the bisection gives a cap that holds with the
one below it spilling: an upper bound of the least (31 for embedding).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tkir.target import MAX_REGS_PER_THREAD, REG_ALLOC_UNIT, REGS_PER_SM

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("sm_90a", "sm_80")
# ptxas's "Used N registers" is 2 more than the registers its SASS names (1 + the highest R): so on every row
# without setmaxnreg, both targets, ptxas 13.5 (tests/tools/test_register_estimate.py checks it)
PTXAS_EXTRA_REGS = 2
# the smallest `.maxnreg` ptxas honours: it allocates at least 24 registers a thread whatever the directive says
# (measured with ptxas 13.5: `.maxnreg 16` assembles to "Used 24 registers")
MIN_MAXNREG = 24


def example_paths() -> list[Path]:
    """Every top-level example kernel (examples/*.tk; the user-kernel suite under examples/user/ is left out)."""
    return sorted((ROOT / "examples").glob("*.tk"))


def suite_paths() -> list[Path]:
    """Every example kernel and every user-suite kernel (examples/*.tk, then examples/user/*.tk)."""
    return example_paths() + sorted((ROOT / "examples" / "user").glob("*.tk"))


def kernel_name(path: Path) -> str:
    """A kernel's name in the table: its path under examples/ without `.tk` (`softmax`, `user/swiglu`)."""
    return path.relative_to(ROOT / "examples").with_suffix("").as_posix()


def register_row(path: Path, target: str, need: bool = False) -> dict:
    """Compile one kernel at its defaults for `target` and put the estimate beside ptxas's count (and, with
    `need`, beside ptxas_need's: keys need, need_how, need_error)."""
    from tkir.api import compile as compile_kernel
    from tkir.diagnostics import TkirError
    from tkir.tools.report import highest_register, register_comparison

    name = kernel_name(path)
    try:
        k = compile_kernel(str(path), target=target)
    except TkirError as e:  # fp8 kernels have no sm_80 lowering: the row says why
        return {"example": name, "target": target, "unsupported": str(e).splitlines()[0]}
    from tkir.backend.lower import SPILL_FALLBACK_ATTR

    stats = k.asm["ptxas"]
    sass = highest_register(k.asm["sass"])
    from tkir.facts import OccupancyPlan

    fallback = k.module.kernel.attrs.get(SPILL_FALLBACK_ATTR)  # the backend gave up a count of blocks per SM
    plan = OccupancyPlan.of(k.module.kernel)
    cmp = register_comparison(k.module, stats.registers, sass) or {}
    cap = ptxas_cap(k.asm["ptx"])
    estimate = cmp.get("predicted_total") or None
    reference = sass + PTXAS_EXTRA_REGS if cmp.get("setmaxnreg") and sass else stats.registers
    err = None if not estimate else (reference - estimate) / reference
    row_need: dict = {}
    if need:
        n, how = ptxas_need(k.asm["ptx"], target)
        exact = how in ("maxnreg", "setmaxnreg")  # "launch": at most n; "spills": more than any cap gives
        row_need = {"need": n, "need_how": how,
                    "need_error": (n - estimate) / n if exact and estimate else None}
    return {**row_need, "example": name, "target": target, "role": cmp.get("role"), "setmaxnreg": cmp.get("setmaxnreg"),
            "predicted": cmp.get("predicted"), "estimate": estimate, "ptxas": stats.registers, "sass": sass,
            "reference": reference, "error": err, "spill_bytes": max(stats.spill_stores, stats.spill_loads),
            "cap": cap, "capped": stats.registers >= cap - REG_ALLOC_UNIT, "spill_fallback": fallback,
            "planned_blocks": plan.blocks_per_sm if plan is not None else None}


def ptxas_need(ptx: str, target: str) -> tuple[int, str]:
    """(registers, how) for the PTX of one kernel: a register count per thread ptxas assembles it in with no
    spill stores or loads, one less spilling, found by bisection (ptxas is not monotone in the cap: an upper
    bound of the fewest, module docstring). A kernel with setmaxnreg: the consumers' setmaxnreg value (its
    largest), a multiple of REG_ALLOC_UNIT not below the launch allocation (how = "setmaxnreg", or "launch"
    where the launch allocation already holds: the consumers need at most that); otherwise `.maxnreg` (how =
    "maxnreg"; `.minnctapersm` dropped, as it would cap ptxas too). A kernel that spills at the most a thread
    can have gives (that count, "spills")."""
    from tkir.backend.toolchain import assemble

    def spills(text: str, extra: tuple[str, ...] = ()) -> bool:
        r = assemble(text, target, extra)
        return bool(r.spill_stores or r.spill_loads)
    values = [int(v) for v in re.findall(r"setmaxnreg\.\w+\.sync\.aligned\.u32\s+(\d+)", ptx)]
    if values:
        top = max(values)

        def at(n: int) -> str:
            return re.sub(r"(setmaxnreg\.\w+\.sync\.aligned\.u32\s+)(\d+)",
                          lambda m: m.group(1) + str(n if int(m.group(2)) == top else m.group(2)), ptx)
        launch = ptxas_cap(ptx)
        candidates = list(range(-(-launch // REG_ALLOC_UNIT) * REG_ALLOC_UNIT, MAX_REGS_PER_THREAD + 2,
                                REG_ALLOC_UNIT))
        if not spills(at(candidates[0])):
            return candidates[0], "launch"
        lo, hi = 0, len(candidates) - 1
        if spills(at(candidates[hi])):
            return candidates[hi], "spills"
        while hi - lo > 1:  # candidates[lo] spills, candidates[hi] holds
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if spills(at(candidates[mid])) else (lo, mid)
        return candidates[hi], "setmaxnreg"
    bare = re.sub(r"\s*\.(minnctapersm|maxnreg)\s+\d+", "", ptx)

    def spills_at(n: int) -> bool:  # .maxnreg beside .maxntid; a kernel without .maxntid: ptxas's option
        if ".maxntid" not in bare:
            return spills(bare, (f"-maxrregcount={n}",))
        return spills(re.sub(r"(\.maxntid[^\n]*)", lambda m: m.group(1) + f"\n.maxnreg {n}", bare, count=1))
    lo, hi = MIN_MAXNREG - 1, MAX_REGS_PER_THREAD
    if spills_at(hi):
        return hi, "spills"
    while hi - lo > 1:  # lo spills (or is below what ptxas takes), hi holds
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if spills_at(mid) else (lo, mid)
    return hi, "maxnreg"


def ptxas_cap(ptx: str) -> int:
    """The registers per thread ptxas may use: 65536 / (`.minnctapersm` x `.maxntid`) in allocation units, at most
    255 (a PTX without the directives: 255)."""
    from tkir.tools.report import ptx_min_blocks

    threads = re.search(r"\.maxntid (\d+)", ptx)
    if threads is None:
        return MAX_REGS_PER_THREAD
    n = ptx_min_blocks(ptx) or 1
    return min(MAX_REGS_PER_THREAD, REGS_PER_SM // (n * int(threads.group(1))) // REG_ALLOC_UNIT * REG_ALLOC_UNIT)


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'kernel':32} {'target':7} {'predicted':>9} {'estimate':>8} {'ptxas':>5} {'sass':>4} {'ref':>4} "
             f"{'error':>7} {'spill':>5} {'cap':>4}"]
    for r in rows:
        if "unsupported" in r:
            lines.append(f"{r['example']:32} {r['target']:7} (not compiled: {r['unsupported'].split('error: ')[-1]})")
            continue
        err = "-" if r["error"] is None else f"{r['error']:+.0%}"
        note = (" setmaxnreg" if r["setmaxnreg"] else "") + (" at cap" if r["capped"] else "")
        if "need" in r:
            ne = "" if r["need_error"] is None else f" {r['need_error']:+.0%}"
            bound = {"launch": "<= ", "spills": "> "}.get(r["need_how"], "")
            note += f"  need {bound}{r['need']} ({r['need_how']}){ne}"
        lines.append(f"{r['example']:32} {r['target']:7} {r['predicted']!s:>9} {r['estimate']!s:>8} {r['ptxas']:>5} "
                     f"{r['sass']!s:>4} {r['reference']:>4} {err:>7} {r['spill_bytes']:>5} {r['cap']:>4}{note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(argv if argv is not None else sys.argv[1:])
    need = "--need" in args
    names = set(a for a in args if a != "--need")
    rows = [register_row(p, t, need) for p in suite_paths() if not names or kernel_name(p) in names for t in TARGETS]
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
