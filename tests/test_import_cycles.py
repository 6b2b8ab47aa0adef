"""The package's module-level imports form no cycle (issue 11).

Every module of tkir, tkir.frontend, tkir.passes and tkir.backend is read with `ast`; its
module-level imports (not those inside functions, nor under `if TYPE_CHECKING:`) are edges to tkir.*
modules: `from tkir.x import y` goes to tkir.x.y where that is a module, else to tkir.x. A cycle
means one module's import order matters (a half-initialised module seen by another).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = ("tkir", "tkir.frontend", "tkir.passes", "tkir.backend")
ROOT = "tkir"


def _modules() -> dict[str, Path]:
    """Every module of PACKAGES (the packages themselves as their __init__.py) and its source file."""
    out: dict[str, Path] = {}
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        out[name] = Path(pkg.__file__)
        for info in pkgutil.iter_modules(pkg.__path__):
            full = f"{name}.{info.name}"
            if info.ispkg:
                continue  # the sub-packages are in PACKAGES themselves
            spec = importlib.util.find_spec(full)
            assert spec is not None and spec.origin is not None, full
            out[full] = Path(spec.origin)
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _module_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports run when the module is imported: the body and its if/try/with/class blocks, not functions."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(stmts: list[ast.stmt]) -> None:
        for s in stmts:
            if isinstance(s, (ast.Import, ast.ImportFrom)):
                found.append(s)
            elif isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            elif isinstance(s, ast.If):
                if not _is_type_checking(s.test):
                    visit(s.body)
                visit(s.orelse)
            elif isinstance(s, ast.Try):
                visit(s.body)
                for h in s.handlers:
                    visit(h.body)
                visit(s.orelse)
                visit(s.finalbody)
            elif isinstance(s, (ast.With, ast.For, ast.While, ast.ClassDef)):
                visit(s.body)
                visit(getattr(s, "orelse", []))

    visit(tree.body)
    return found


def _resolve(module: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> set[str]:
    """The tkir.* modules one import statement loads (by name; parent packages are not counted)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name.split(".")[0] == ROOT}
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1
        pkg = module.split(".") if is_pkg else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, base] if base else pkg)
    if base.split(".")[0] != ROOT:
        return set()
    out = set()
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.add(sub if sub in known else base)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    known = set(mods)
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        is_pkg = path.name == "__init__.py"
        edges: set[str] = set()
        for node in _module_level_imports(tree):
            edges |= {m for m in _resolve(name, is_pkg, node, known) if m != name}
        unknown = {m for m in edges if m not in known}
        assert not unknown, f"{name} imports modules that do not exist: {sorted(unknown)}"
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as [a, b, ..., a], or None (depth-first search, deterministic order)."""
    state: dict[str, int] = {}  # 1: on the stack, 2: done
    stack: list[str] = []

    def dfs(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if state.get(m) == 1:
                return [*stack[stack.index(m):], m]
            if m not in state:
                c = dfs(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = dfs(n)
            if c:
                return c
    return None


def test_graph_covers_the_packages():
    g = import_graph()
    for name in ("tkir.ops", "tkir.interp", "tkir.frontend.lower", "tkir.passes.canonicalize",
                 "tkir.backend.lower_llvm"):
        assert name in g
    assert "tkir.types" in g["tkir.ops"]  # edges are really collected


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_resolve_from_imports_of_modules_and_names():
    known = {"tkir", "tkir.ops", "tkir.passes", "tkir.passes.builder"}
    tree = ast.parse("from tkir.ops import OPS\nfrom tkir.passes import builder\nfrom . import ops\nimport numpy\n")
    got = [_resolve("tkir.interp", False, n, known) for n in tree.body]
    assert got == [{"tkir.ops"}, {"tkir.passes.builder"}, {"tkir.ops"}, set()]


def test_type_checking_and_function_imports_are_ignored():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tkir.a\n"
                     "def f():\n    import tkir.b\ntry:\n    import tkir.c\nexcept ImportError:\n    pass\n")
    names = [a.name for n in _module_level_imports(tree) for a in n.names]
    assert names == ["TYPE_CHECKING", "tkir.c"]


def test_no_import_cycle():
    cycle = find_cycle(import_graph())
    if cycle:
        pytest.fail("module-level import cycle: " + " -> ".join(cycle))


def test_entry_modules_are_complete_on_their_own():
    """In a fresh interpreter, `import tkir.ops` registers every level's ops and `import tkir.interp`
    gives every op that runs a handler (no import order or late hook needed)."""
    code = ("import tkir.interp, tkir.ops\n"
            "print(sorted(set(tkir.ops.OPS) - set(tkir.interp.HANDLERS)))\n"
            "print(all(n in tkir.ops.OPS for n in ('tma.load', 'pipe.wait', 'tk.partial_add', 'arith.cdiv')))")
    for first in ("tkir.ops", "tkir.interp", "tkir.ops_tma", "tkir.interp_pipeline"):
        out = subprocess.run([sys.executable, "-c", f"import {first}\n{code}"], capture_output=True, text=True,
                             check=True).stdout.split("\n")
        assert out[0] == "['scf.yield', 'tk.kernel', 'tma.desc']", (first, out)  # a terminator, declarations
        assert out[1] == "True", (first, out)
