"""The import graph of tkir's packages, read with `ast`: the support of tests/repo/test_import_layers.py and
tests/repo/test_import_cycles.py.

Every import statement of every module counts, wherever it stands: at module level, inside a function
(a lazy import still runs, and still ties the two modules together), under `if TYPE_CHECKING:`, in a
`try`. An edge goes from the importing module to the tkir.* module it names: `import tkir.x.y` to
tkir.x.y; `from tkir.x import y` to tkir.x.y where that is a module, else to tkir.x, with `y` recorded
as a name taken from tkir.x (so `from tkir import compile` is an edge to the package `tkir` itself, and
`from tkir import api` one to tkir.api). Parent packages are not counted (`import tkir.ops` runs
tkir/__init__.py too, as every import of a tkir module does).

The floors (tests/repo/test_import_layers.py states the arrows allowed between them):
* face: the package `tkir` (tkir/__init__.py), tkir.api, tkir.cli and tkir.torch;
* core: every other module directly in tkir/ (the IR, its analyses, the pass manager, ...);
* interp, tools: the packages tkir/interp/ and tkir/tools/ (with tkir/tools/fuzz/);
* frontend, passes, backend: frontend/, passes/ and backend/ (tkir.frontend, tkir.passes, tkir.backend).
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import pkgutil
from dataclasses import dataclass
from pathlib import Path

ROOT = "tkir"
PACKAGES = ("tkir", "tkir.interp", "tkir.tools", "tkir.tools.fuzz", "tkir.frontend", "tkir.passes", "tkir.backend")
FACE = ("tkir", "tkir.api", "tkir.cli", "tkir.torch")
SUBFLOORS = ("interp", "tools", "frontend", "passes", "backend")  # tkir.<name>... is that floor
FLOORS = ("core", "interp", "frontend", "passes", "backend", "tools", "face")


@dataclass(frozen=True)
class Edge:
    source: str              # the importing module
    target: str              # the tkir module it imports
    line: int
    names: tuple[str, ...]   # names taken from `target` that are not modules (`from tkir.x import name`)

    def __str__(self) -> str:
        what = f" ({', '.join(self.names)})" if self.names else ""
        return f"{self.source}:{self.line} -> {self.target}{what}"


def floor(module: str) -> str:
    """The floor a tkir module stands on (see the module docstring)."""
    if module in FACE:
        return "face"
    parts = module.split(".")
    if parts[0] == ROOT and len(parts) > 1 and parts[1] in SUBFLOORS:
        return parts[1]
    return "core"


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of PACKAGES (a package as its __init__.py) and its source file. A sub-package that
    PACKAGES does not name is an error: a new package must be added here, not silently left out."""
    out: dict[str, Path] = {}
    for name in PACKAGES:
        pkg = importlib.import_module(name)
        out[name] = Path(pkg.__file__)
        for info in pkgutil.iter_modules(pkg.__path__):
            full = f"{name}.{info.name}"
            if info.ispkg:
                assert full in PACKAGES, f"package {full} is not in tests/import_graph.py PACKAGES"
                continue
            spec = importlib.util.find_spec(full)
            assert spec is not None and spec.origin is not None, full
            out[full] = Path(spec.origin)
    return out


def resolve(module: str, is_pkg: bool, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[tuple[str, str]]:
    """(tkir module, name or "") for each thing one import statement takes from tkir: "" for a module
    itself, else a name of that module."""
    if isinstance(node, ast.Import):
        return [(a.name, "") for a in node.names if a.name.split(".")[0] == ROOT]
    base = node.module or ""
    if node.level:  # relative: from the module's package, up level - 1
        pkg = module.split(".") if is_pkg else module.split(".")[:-1]
        pkg = pkg[: len(pkg) - (node.level - 1)]
        base = ".".join([*pkg, base] if base else pkg)
    if base.split(".")[0] != ROOT:
        return []
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        out.append((sub, "") if sub in known else (base, a.name))
    return out


def edges_of(name: str, source: str, is_pkg: bool, known: set[str]) -> list[Edge]:
    """The edges of one module's source text: every import statement in it, at any depth."""
    found: dict[tuple[str, int], list[str]] = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            for target, taken in resolve(name, is_pkg, node, known):
                if target != name:
                    names = found.setdefault((target, node.lineno), [])
                    if taken:
                        names.append(taken)
    return [Edge(name, t, line, tuple(n)) for (t, line), n in sorted(found.items(), key=lambda kv: kv[0][1])]


@functools.cache
def edges() -> tuple[Edge, ...]:
    """Every edge of every module of PACKAGES."""
    mods = modules()
    known = set(mods)
    out: list[Edge] = []
    for name, path in mods.items():
        es = edges_of(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", known)
        unknown = sorted({e.target for e in es if e.target not in known})
        assert not unknown, f"{name} imports modules that do not exist: {unknown}"
        out += es
    return tuple(out)


def graph(es: tuple[Edge, ...] | list[Edge]) -> dict[str, set[str]]:
    g: dict[str, set[str]] = {}
    for e in es:
        g.setdefault(e.source, set()).add(e.target)
        g.setdefault(e.target, set())
    return g


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, in sorted order:
    every module of one imports, through the others, itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(g.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)
