"""Summarise Nsight Compute reports exported as CSV (docs/bench/README.md, "Profiling"): for each report stem,
the headline metrics of its details page, the sum of every numeric column of its SASS source page (the
warp stall samples per reason, where ncu exports them) and the SASS lines with the most stall samples.

    python3 scripts/bench/ncu_summary.py DIR/gemm80 DIR/attn80 ...   (reads STEM.details.csv, STEM.source.csv)
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

SECTIONS = ("GPU Speed Of Light Throughput", "Compute Workload Analysis", "Scheduler Statistics",
            "Warp State Statistics", "Occupancy", "Launch Statistics", "Memory Workload Analysis")
TOP_LINES = 25


def _rows(path: Path) -> list[dict]:
    """The CSV table of an ncu page export: from its header line (the source page starts with a
    "Kernel Name" line before it)."""
    text = path.read_text(errors="replace").splitlines()
    start = next((i for i, line in enumerate(text) if line.startswith(('"ID"', '"Address"'))), None)
    return [] if start is None else list(csv.DictReader(text[start:]))


def _num(s: str) -> float | None:
    try:
        return float(s.replace(",", ""))
    except (AttributeError, ValueError):
        return None


def summarise(stem: str) -> None:
    print(f"==== {Path(stem).name}")
    details = _rows(Path(stem + ".details.csv"))
    for r in details:
        if r.get("Section Name") in SECTIONS:
            name, value = r["Metric Name"][:48], r["Metric Value"]
            print(f"  {r['Section Name'][:26]:26} {name:48} {value:>14} {r.get('Metric Unit', '')}")
    src = _rows(Path(stem + ".source.csv"))
    if not src:
        print("  (no source page)")
        return
    cols = list(src[0])
    numeric = [c for c in cols if sum(_num(r[c]) is not None for r in src) > len(src) // 2 and c != "Address"]
    totals = {c: sum(_num(r[c]) or 0.0 for r in src) for c in numeric}
    print("  source columns (sums):")
    for c, v in sorted(totals.items(), key=lambda kv: -kv[1]):
        if v:
            print(f"    {c[:70]:70} {v:14.0f}")
    key = next((c for c in numeric if "Sampling (All" in c), None) or (numeric[0] if numeric else None)
    if key is None:
        return
    reasons = [c for c in numeric if c and (c.lower().startswith("stall") or "stall_" in c.lower())]
    print(f"  top {TOP_LINES} SASS lines by {key!r}:")
    text_col = next((c for c in cols if c.lower() == "source"), cols[1])
    for r in sorted(src, key=lambda r: -(_num(r[key]) or 0.0))[:TOP_LINES]:
        why = ", ".join(f"{c}={r[c]}" for c in reasons if (_num(r[c]) or 0) > 0)[:120]
        print(f"    {r.get('Address', '')[:8]:8} {(_num(r[key]) or 0):8.0f}  {r[text_col][:60]:60} {why}")


def main() -> int:
    for stem in sys.argv[1:]:
        try:
            summarise(stem)
        except Exception as e:  # noqa: BLE001 - a summary of what is there, whatever is missing
            print(f"==== {stem}: {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
