"""Draw the plot of a `tkc bench --json` file again, as `tkc bench --plot` draws it (tkir.tools.bench.plot_rows).

    python3 scripts/bench/plot.py docs/bench/results/based.json docs/bench/results/based.png

For a table whose run did not write a plot, or to redraw one after a change to plot_rows; needs matplotlib.
Memory-bound tables (rows with the copy bandwidth of their run, `copy_gbps`) are drawn in GB/s, the others in
TFLOP/s.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    from tkir.tools.bench import Row, plot_rows

    fields = {f.name for f in dataclasses.fields(Row)}
    rows = [Row(**{k: v for k, v in r.items() if k in fields}) for r in json.loads(Path(argv[0]).read_text())]
    plot_rows(rows, argv[1], memory_bound=any(r.copy_gbps is not None for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
