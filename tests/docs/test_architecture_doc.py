"""docs/architecture.md stays true: every repository path and every `tkir.x.y` module it names exists, its
floor table states exactly the arrows tests/repo/test_import_layers.py allows, and README.md and docs/ir.md link it.

A path is a token with a slash, written as the page writes it: a folder (`tkir/tools/`), a file
(`backend/idioms.py`, `frontend/grammar.lark`) or a glob (`backend/rules_*.py`, which must match a file). A
path with a placeholder (`passes/<name>.py`) names no file and is not read. A dotted name is a module, or a
module and then attributes of it (`tkir.compile`). The names the page says were removed (GONE) must not exist.
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest
from test_import_layers import ALLOWED

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"(?<![\w/.<>*-])(?:[\w*.-]+/)+(?:[\w*-]+(?:\.\w+)+)?(?![\w/<>*-])")
MODULE = re.compile(r"(?<![\w/.-])tkir(?:\.\w+)+")
GONE = {"tkir.cuda"}  # the removed alias of tkir.backend.cuda, named on the page as removed
TABLE_HEADING = "## Which floor may import which"
NOTHING = "nothing else"


def missing_paths(text: str) -> list[str]:
    """The paths `text` names that are not in the repository."""
    out = []
    for p in sorted(set(PATH.findall(text))):
        if ("*" in p and not list(ROOT.glob(p))) or ("*" not in p and not (ROOT / p).exists()):
            out.append(p)
    return out


def resolves(name: str) -> bool:
    """Whether `name` is a module, or a module followed by attributes that exist."""
    parts = name.split(".")
    for n in range(len(parts), 0, -1):
        try:
            spec = importlib.util.find_spec(".".join(parts[:n]))
        except ModuleNotFoundError:  # a parent that is a module, not a package
            spec = None
        if spec is None:
            continue
        obj = importlib.import_module(".".join(parts[:n]))
        for attr in parts[n:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def missing_modules(text: str) -> list[str]:
    """The dotted names `text` gives that do not resolve, and those of GONE that do."""
    names = sorted(set(MODULE.findall(text)))
    return [n for n in names if resolves(n) == (n in GONE)]


def floor_table(text: str) -> dict[str, set[str]]:
    """floor -> the floors it may import, its own included, as the page's table states them."""
    section = text.split(TABLE_HEADING, 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] in ALLOWED:
            assert "tests/repo/test_import_layers.py" in cells[3], line  # the test that enforces the row
            allowed = set() if cells[2] == NOTHING else set(cells[2].split(", "))
            out[cells[0]] = allowed | {cells[0]}
    return out


def test_every_path_the_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert len(PATH.findall(text)) > 50  # the page's paths are really read
    assert missing_paths(text) == []


def test_every_module_the_page_names_exists() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert len(set(MODULE.findall(text))) > 10
    assert missing_modules(text) == []


def test_the_floor_table_is_the_layer_tests_table() -> None:
    assert floor_table(DOC.read_text(encoding="utf-8")) == ALLOWED


def test_the_page_is_linked() -> None:
    assert "`docs/architecture.md`" in (ROOT / "README.md").read_text(encoding="utf-8")
    assert "docs/architecture.md" in (ROOT / "docs" / "ir.md").read_text(encoding="utf-8")


def test_the_checks_find_what_is_missing() -> None:
    text = ("`backend/idioms.py`, `backend/no_such.py`, tkir/interp/, tkir/no_such/, `backend/rules_*.py`, "
            "tests/nothing_*.py, `passes/<name>.py`, and/or, tkir.backend.idioms, tkir.compile, tkir.no_such, "
            "tkir.api.no_such, tkir.cuda.")
    assert missing_paths(text) == ["backend/no_such.py", "tests/nothing_*.py", "tkir/no_such/"]
    assert missing_modules(text) == ["tkir.api.no_such", "tkir.no_such"]
    assert missing_modules("tkir.api") == [] and missing_modules("tkir.version") == []


@pytest.mark.parametrize(("old", "new"), [
    ("| interp | tkir/interp/ | core |", "| interp | tkir/interp/ | core, backend |"),
    ("| core, interp, frontend, passes, backend, face |", "| core, interp, frontend, passes, backend |"),
])
def test_a_wrong_table_row_is_found(old: str, new: str) -> None:
    text = DOC.read_text(encoding="utf-8")
    assert old in text
    assert floor_table(text.replace(old, new)) != ALLOWED
