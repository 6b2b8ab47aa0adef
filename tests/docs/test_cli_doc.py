"""docs/cli.md's `--passes` row names the default pipeline as it is: the same passes in the same order."""

from __future__ import annotations

import re
from pathlib import Path

from tkir.api import default_pipeline

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_the_passes_row_lists_the_default_pipeline() -> None:
    row = next(ln for ln in DOC.read_text(encoding="utf-8").splitlines() if ln.startswith("| `--passes="))
    listed = re.search(r"the default is (.*?) \(`tkc passes`", row)
    assert listed, row
    names = [re.sub(r" \(.*?\)$", "", n.strip()) for n in listed.group(1).split(",")]
    assert names == [p.split("{")[0] for p in default_pipeline()]
