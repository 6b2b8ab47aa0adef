"""Turn the JSON files of `tkc bench` (docs/bench/results/*.json, scripts/bench/ablations.sh's ablation_*.json) into
markdown tables.

    python3 scripts/bench/tables.py docs/bench/results   > table.md
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows(folder: Path, pattern: str) -> list[dict]:
    out = []
    for f in sorted(folder.glob(pattern)):
        out.extend(json.loads(f.read_text()))
    return out


def main() -> None:
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/bench/results")
    abl = rows(folder, "ablation_*.json")
    if abl:
        full = next((r for r in abl if r["variant"] == "full"), None)
        print("| variant | TFLOP/s | ratio to full | cuBLAS TFLOP/s (same run) | rel err |")
        print("| --- | --- | --- | --- | --- |")
        for r in abl:
            ratio = r["tflops"] / full["tflops"] if full else float("nan")
            print(f"| {r['variant']} | {r['tflops']:.1f} | {ratio:.3f} | {r['peer_tflops']:.1f} | {r['rel_err']:.1e} |")
    for f in sorted(folder.glob("*.json")):
        rs = json.loads(f.read_text())
        if f.name.startswith("ablation_") or not (isinstance(rs, list) and rs and "kernel" in rs[0]):
            continue  # the ablations above; other tools' JSON (claims, sm80_gemm) has its own shape
        name = f.stem
        mem = rs[0].get("copy_gbps") is not None
        unit = "GB/s" if mem else "TFLOP/s"
        print(f"\n**{name}** ({unit}, peer: {rs[0]['peer']})\n")
        print(f"| sizes | tkir {unit} | peer {unit} | tkir / peer |" + (" % of copy |" if mem else "") + " rel err |")
        print("| --- | --- | --- | --- |" + (" --- |" if mem else "") + " --- |")
        for r in rs:
            size = " ".join(f"{k}={v}" for k, v in {**r["sizes"], **r["consts"]}.items())
            mine = r["gbps"] if mem else r["tflops"]
            peer = (r["bytes"] / r["peer_ms"] / 1e6) if mem else r["peer_tflops"]
            extra = f" {100 * r['gbps'] / r['copy_gbps']:.0f}% |" if mem else ""
            ratio = f"{r['ratio']:.3f}" if r.get("ratio") else "-"
            print(f"| {size} | {mine:.1f} | {peer:.1f} | {ratio} |{extra} {r['rel_err']:.1e} |")


if __name__ == "__main__":
    main()
