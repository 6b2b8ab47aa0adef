"""Predicted registers per thread beside ptxas's for every example: the error of plan-occupancy's register
estimate (docs/passes.md, "plan-occupancy"), measured with the local ptxas (no GPU).

    python3 -m tkir.tools.register_table          # every examples/*.tk at its defaults, sm_90a and sm_80

Each row: example, target, predicted (the computing role's `regs`, tkir.tools.report.register_comparison),
estimate (plan-occupancy's live-range estimate before rounding, the occupancy budget's total), ptxas
("Used N registers"), the relative error of the estimate against ptxas, and spills (bytes stored to local
memory). A kernel with setmaxnreg reports ptxas's launch allocation, not the consumer's count: its rows
say `setmaxnreg` and are left out of the bound (the consumer's setmaxnreg value is a choice, not a guess).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from tkir.target import MAX_REGS_PER_THREAD, REG_ALLOC_UNIT, REGS_PER_SM

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("sm_90a", "sm_80")


def example_paths() -> list[Path]:
    """Every top-level example kernel (examples/*.tk; the user-kernel suite under examples/user/ is left out)."""
    return sorted((ROOT / "examples").glob("*.tk"))


def register_row(path: Path, target: str) -> dict:
    """Compile one example at its defaults for `target` and put the estimate beside ptxas's count."""
    from tkir.api import compile as compile_kernel
    from tkir.diagnostics import TkirError
    from tkir.tools.report import register_comparison

    try:
        k = compile_kernel(str(path), target=target)
    except TkirError as e:  # fp8 kernels have no sm_80 lowering: the row says why
        return {"example": path.name, "target": target, "unsupported": str(e).splitlines()[0]}
    stats = k.asm["ptxas"]
    cmp = register_comparison(k.module, stats.registers) or {}
    cap = ptxas_cap(k.asm["ptx"])
    estimate = cmp.get("predicted_total") or None
    err = None if not estimate else (stats.registers - estimate) / stats.registers
    return {"example": path.name, "target": target, "role": cmp.get("role"), "setmaxnreg": cmp.get("setmaxnreg"),
            "predicted": cmp.get("predicted"), "estimate": estimate, "ptxas": stats.registers,
            "error": err, "spill_bytes": max(stats.spill_stores, stats.spill_loads), "cap": cap,
            "capped": stats.registers >= cap - REG_ALLOC_UNIT}


def ptxas_cap(ptx: str) -> int:
    """The registers per thread ptxas may use: 65536 / (`.minnctapersm` x `.maxntid`) in allocation units, at most
    255 (a PTX without the directives: 255)."""
    threads = re.search(r"\.maxntid (\d+)", ptx)
    blocks = re.search(r"\.minnctapersm (\d+)", ptx)
    if threads is None:
        return MAX_REGS_PER_THREAD
    n = int(blocks.group(1)) if blocks else 1
    return min(MAX_REGS_PER_THREAD, REGS_PER_SM // (n * int(threads.group(1))) // REG_ALLOC_UNIT * REG_ALLOC_UNIT)


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'example':28} {'target':7} {'predicted':>9} {'estimate':>8} {'ptxas':>5} {'error':>7} {'spill':>5} "
             f"{'cap':>4}"]
    for r in rows:
        if "unsupported" in r:
            lines.append(f"{r['example']:28} {r['target']:7} (not compiled: {r['unsupported'].split('error: ')[-1]})")
            continue
        err = "-" if r["error"] is None else f"{r['error']:+.0%}"
        note = (" setmaxnreg" if r["setmaxnreg"] else "") + (" at cap" if r["capped"] else "")
        lines.append(f"{r['example']:28} {r['target']:7} {r['predicted']!s:>9} {r['estimate']!s:>8} {r['ptxas']:>5} "
                     f"{err:>7} {r['spill_bytes']:>5} {r['cap']:>4}{note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    names = set(argv if argv is not None else sys.argv[1:])
    rows = [register_row(p, t) for p in example_paths() if not names or p.stem in names for t in TARGETS]
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
