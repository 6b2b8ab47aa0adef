"""No import cycle among the modules of tkir, tkir.interp, tkir.tools, tkir.frontend, tkir.passes and
tkir.backend, counting every import statement: at module level, inside functions (a lazy import only
hides a cycle until the function runs) and under `if TYPE_CHECKING:` (tests/import_graph.py builds the
graph with `ast`). A cycle means the modules cannot be understood, tested or moved one at a time, and
at module level that one module's import order matters (a half-initialised module seen by another).

The check runs once per floor (tests/import_graph.py), so a cycle is reported where it lies.
"""

from __future__ import annotations

import ast
import subprocess
import sys

import import_graph as ig
import pytest


def test_graph_covers_the_packages() -> None:
    g = ig.graph(ig.edges())
    for name in ("tkir", "tkir.ops", "tkir.interp", "tkir.interp.run", "tkir.tools.tune", "tkir.tools.fuzz.oracle",
                 "tkir.frontend.lower", "tkir.passes.canonicalize", "tkir.backend.lower_llvm", "tkir.cli"):
        assert name in g, name
    assert "tkir.types" in g["tkir.ops"]  # edges are really collected
    assert "tkir.tools.tune" in g["tkir"]  # function-level ones too: tkir.autotune imports the tuner lazily
    assert "tkir.interp" in g["tkir.api"]  # (and tkir.api.interpret the interpreter)


def test_cycles_are_found() -> None:
    assert ig.cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert ig.cycles({"a": {"b"}, "b": set()}) == []
    assert ig.cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}) == [["a", "b"], ["c", "d"]]


def test_a_lazy_import_back_is_a_cycle() -> None:
    """The cycle the tuner once made, tkir -> tkir.tools.tune -> tkir (inside a function), is found."""
    known = set(ig.modules())
    back = ig.edges_of("tkir.tools.tune", "def compiled():\n    import tkir\n    return tkir.compile\n", False, known)
    assert ig.cycles(ig.graph([*ig.edges(), *back])) != ig.cycles(ig.graph(ig.edges()))
    assert any({"tkir", "tkir.tools.tune"} <= set(c) for c in ig.cycles(ig.graph([*ig.edges(), *back])))


def test_resolve_from_imports_of_modules_and_names() -> None:
    known = {"tkir", "tkir.ops", "tkir.passes", "tkir.passes.builder", "tkir.interp", "tkir.interp.frame"}
    tree = ast.parse("from tkir.ops import OPS\nfrom tkir.passes import builder\nfrom . import ops\nimport numpy\n"
                     "from .frame import Frame\n")
    got = [ig.resolve("tkir.interp.run", False, n, known) for n in tree.body]
    assert got == [[("tkir.ops", "OPS")], [("tkir.passes.builder", "")], [("tkir.interp", "ops")], [],
                   [("tkir.interp.frame", "Frame")]]


@pytest.mark.parametrize("floor", ig.FLOORS)
def test_no_import_cycle(floor: str) -> None:
    found = [c for c in ig.cycles(ig.graph(ig.edges())) if any(ig.floor(m) == floor for m in c)]
    assert not found, "import cycles (every import counted, lazy ones too):\n" + "\n".join(
        " <-> ".join(c) + "\n    " + "\n    ".join(str(e) for e in ig.edges() if e.source in c and e.target in c)
        for c in found)


def test_entry_modules_are_complete_on_their_own() -> None:
    """In a fresh interpreter, `import tkir.ops` registers every level's ops and `import tkir.interp`
    gives every op that runs a handler (no import order or late hook needed)."""
    code = ("import tkir.interp, tkir.ops\n"
            "print(sorted(set(tkir.ops.OPS) - set(tkir.interp.HANDLERS)))\n"
            "print(all(n in tkir.ops.OPS for n in ('tma.load', 'pipe.wait', 'tk.partial_add', 'arith.cdiv')))")
    for first in ("tkir.ops", "tkir.interp", "tkir.ops_tma", "tkir.interp.pipeline", "tkir.interp.run"):
        out = subprocess.run([sys.executable, "-c", f"import {first}\n{code}"], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        assert out[0] == "['scf.yield', 'tk.kernel', 'tma.desc']", (first, out)  # a terminator, declarations
        assert out[1] == "True", (first, out)
