"""Which way imports run between tkir's floors (DESIGN.md, "Which way imports run"), checked two ways.

1. Statically, over every import statement of every module, lazy ones inside functions included
   (tests/import_graph.py reads them with `ast`). The floors: the face (the package `tkir`, tkir.api,
   tkir.cli, tkir.torch), the core (every other module directly in tkir/), tkir/interp/, tkir/tools/ (with
   tools/fuzz/), frontend/, passes/ and backend/. The arrows allowed, from the row's floor to the
   column's (an import between two modules of one floor is always allowed):

   | from \\ to | core | interp | frontend | passes | backend | tools | face     | the `tkir` package |
   |-----------|------|--------|----------|--------|---------|-------|----------|--------------------|
   | core      | yes  | -      | -        | -      | -       | -     | -        | -                  |
   | interp    | yes  | yes    | -        | -      | -       | -     | -        | -                  |
   | frontend  | yes  | -      | yes      | -      | -       | -     | -        | -                  |
   | passes    | yes  | -      | -        | yes    | -       | -     | -        | -                  |
   | backend   | yes  | -      | -        | -      | yes     | -     | -        | -                  |
   | tools     | yes  | yes    | yes      | yes    | yes     | yes   | yes      | -                  |
   | face      | yes  | yes    | yes      | yes    | yes     | yes   | yes      | -                  |

   "face" is tkir.api, tkir.cli and tkir.torch; "the `tkir` package" is tkir/__init__.py's own names
   (`import tkir`, `from tkir import compile`); `from tkir import scalar` names a module and is an arrow
   to tkir.scalar. Nothing imports the package: it is the user's entry point, and it imports the API and
   (lazily) the tuner, so an arrow back to it from anything it loads is a cycle. And no module of tkir/
   imports another tkir/ module's private (`_x`) name: what a sibling needs is public (bench and tune
   share tkir/tools/timing.py's public names).
2. In a fresh interpreter: the IR core, the interpreter, the tools, the front end, the passes and
   the drivers load nothing of the backend until a backend stage is asked for; the backend's runtime
   modules import without a GPU and without calling the driver; the removed alias `tkir.cuda` (now
   tkir.backend.cuda) does not import.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from importlib.machinery import PathFinder
from pathlib import Path

import import_graph as ig
import pytest
from limits import HANG_S  # tests/ is on sys.path under pytest

import tkir

ROOT = Path(__file__).resolve().parents[2]

# floor -> the floors it may import (besides its own); the table of the module docstring
ALLOWED = {
    "core": {"core"},
    "interp": {"core", "interp"},
    "frontend": {"core", "frontend"},
    "passes": {"core", "passes"},
    "backend": {"core", "backend"},
    "tools": {"core", "interp", "frontend", "passes", "backend", "tools", "face"},
    "face": set(ig.FLOORS),
}
TKIR_FLOORS = ("core", "interp", "tools", "face")  # the floors of tkir/ itself (the private-name rule)


def violations(edges: list[ig.Edge] | tuple[ig.Edge, ...]) -> list[str]:
    """Every edge the rules of the module docstring forbid, as 'module:line -> target (names): why'."""
    out = []
    for e in edges:
        src, dst = ig.floor(e.source), ig.floor(e.target)
        if e.target == ig.ROOT:
            out.append(f"{e}: imports the `tkir` package itself (import tkir.api or the module it needs)")
        elif dst not in ALLOWED[src]:
            out.append(f"{e}: {src} may not import {dst}")
        private = [n for n in e.names if n.startswith("_") and not (n.startswith("__") and n.endswith("__"))]
        if private and src in TKIR_FLOORS and dst in TKIR_FLOORS:
            out.append(f"{e}: private name(s) {', '.join(private)} of another module")
    return out


def test_the_floors_import_only_down_the_allowed_arrows() -> None:
    found = violations(ig.edges())
    assert not found, "imports against the floors' arrows:\n" + "\n".join(found)


def test_the_floors_are_real() -> None:
    """The graph has every floor, and the arrows this file allows are there (the check reads real edges)."""
    floors = {ig.floor(m) for m in ig.modules()}
    assert floors == set(ig.FLOORS)
    pairs = {(e.source, e.target) for e in ig.edges()}
    for pair in [("tkir.tools.tune", "tkir.api"), ("tkir.tools.tune", "tkir.tools.timing"),
                 ("tkir.tools.bench", "tkir.tools.timing"), ("tkir.api", "tkir.interp"),
                 ("tkir.interp.run", "tkir.interp.frame"), ("tkir.tools.check", "tkir.backend.cuda"),
                 ("tkir", "tkir.tools.tune"), ("tkir.backend.cache", "tkir.version")]:
        assert pair in pairs, pair
    assert ig.floor("tkir.ops") == "core" and ig.floor("tkir.interp") == "interp" and ig.floor("tkir") == "face"
    assert ig.floor("tkir.tools.fuzz.oracle") == "tools" and ig.floor("tkir.passes.canonicalize") == "passes"


def _edges(module: str, source: str) -> list[ig.Edge]:
    known = set(ig.modules())
    return ig.edges_of(module, source, module in ig.PACKAGES, known)


@pytest.mark.parametrize(("module", "source", "why"), [
    ("tkir.ops", "import tkir.interp\n", "core may not import interp"),
    ("tkir.ops", "def f():\n    from tkir.tools import bench\n", "core may not import tools"),
    ("tkir.requires", "def f():\n    from tkir.api import compile\n", "core may not import face"),
    ("tkir.layout", "def f():\n    import tkir.backend.cuda\n", "core may not import backend"),
    ("tkir.types", "from tkir.frontend import parse\n", "core may not import frontend"),
    ("tkir.verifier", "def f():\n    from tkir.passes import registry\n", "core may not import passes"),
    ("tkir.interp.run", "def f():\n    from tkir.backend import launch\n", "interp may not import backend"),
    ("tkir.interp.ops", "def f():\n    from tkir.tools.examples import load_companion\n", "interp may not import tools"),
    ("tkir.backend.cache", "def f():\n    import tkir\n", "imports the `tkir` package itself"),
    ("tkir.backend.runtime", "from tkir import compile\n", "imports the `tkir` package itself"),
    ("tkir.passes.canonicalize", "def f():\n    from tkir.tools import tune\n", "passes may not import tools"),
    ("tkir.frontend.lower", "def f():\n    from tkir.api import build_module\n", "frontend may not import face"),
    ("tkir.backend.lower", "def f():\n    from tkir.cli import main\n", "backend may not import face"),
    ("tkir.backend.lower", "def f():\n    from tkir.interp import interpret\n", "backend may not import interp"),
    ("tkir.passes.canonicalize", "from tkir.backend import fragments\n", "passes may not import backend"),
    ("tkir.tools.bench", "def f():\n    import tkir\n    tkir.compile('x')\n", "imports the `tkir` package itself"),
    ("tkir.tools.tune", "def f():\n    from tkir.tools.bench import _INDUCTOR\n", "private name(s) _INDUCTOR"),
    ("tkir.cli", "from tkir import autotune\n", "imports the `tkir` package itself"),
])
def test_each_rule_can_fail(module: str, source: str, why: str) -> None:
    """Each rule, given one import that breaks it (lazy ones too), reports it; the same module's real
    imports do not."""
    assert not violations(_edges(module, ig.modules()[module].read_text()))
    found = violations(_edges(module, source))
    assert len(found) == 1 and why in found[0], found


def test_allowed_imports_pass() -> None:
    ok = [("tkir.backend.runtime", "from tkir import symexpr\n"), ("tkir.tools.tune", "from tkir import api\n"),
          ("tkir.tools.fuzz.oracle", "from tkir.cli import main\n"), ("tkir.interp.run", "from tkir import scalar\n"),
          ("tkir.api", "from tkir.tools import auto_consts\n"), ("tkir", "from tkir.version import __version__\n"),
          ("tkir.tools.bench", "from tkir.tools.timing import time_pair_ms\n"),
          ("tkir.backend.cache", "from tkir.backend.runtime import _x\n")]  # private names: tkir/'s own floors
    for module, source in ok:
        assert not violations(_edges(module, source)), (module, source)


def test_function_level_and_type_checking_imports_are_edges() -> None:
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tkir.ir\n"
              "def f():\n    from tkir import ops, compile\nclass C:\n    def g(self):\n        import tkir.api as a\n")
    got = {(e.target, e.names) for e in _edges("tkir.facts", source)}
    assert got == {("tkir.ir", ()), ("tkir.ops", ()), ("tkir", ("compile",)), ("tkir.api", ())}


# --- 2. in a fresh interpreter ------------------------------------------------------------------------

TKIR_MODULES = {f: sorted(m for m in ig.modules() if ig.floor(m) == f) for f in ("core", "interp", "tools", "face")}
PASSES = sorted(m for m in ig.modules() if ig.floor(m) == "passes")
FRONTEND = sorted(m for m in ig.modules() if ig.floor(m) == "frontend")
RUNTIME = ("tkir.backend.cuda", "tkir.backend.launch", "tkir.backend.runtime")


def python(code: str) -> object:
    """Run `code` in a fresh interpreter; it ends with `print(json.dumps(...))`, which is returned."""
    proc = subprocess.run([sys.executable, "-c", "import json, sys, warnings\n" + code], capture_output=True,
                          text=True, cwd=ROOT, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


BACKEND_LOADED = "sorted(m for m in sys.modules if m == 'tkir.backend' or m.startswith('tkir.backend.'))"


def test_import_tkir_loads_no_backend() -> None:
    assert python(f"import tkir\nprint(json.dumps({BACKEND_LOADED}))") == []


@pytest.mark.parametrize("modules", [*TKIR_MODULES.values(), PASSES, FRONTEND],
                         ids=[*TKIR_MODULES, "passes", "frontend"])
def test_modules_load_no_backend(modules: list[str]) -> None:
    """Each module alone (a module that drags the backend in is named), then all of them together."""
    code = (f"import importlib\nout = {{}}\n"
            f"for m in {modules!r}:\n"
            f"    importlib.import_module(m)\n"
            f"    out[m] = {BACKEND_LOADED}\n"
            f"print(json.dumps({{m: b for m, b in out.items() if b}}))")
    assert python(code) == {}
    assert "tkir.ops" in TKIR_MODULES["core"] and "tkir.api" in TKIR_MODULES["face"]  # the lists are real
    assert "tkir.interp.run" in TKIR_MODULES["interp"] and "tkir.tools.tune" in TKIR_MODULES["tools"]
    assert "tkir.passes.registry" in PASSES and "tkir.frontend.lower" in FRONTEND


def test_compile_and_interpret_load_no_backend() -> None:
    """The pass pipeline and the interpreter run without the backend; only a backend stage loads it."""
    code = ("import tkir\nfrom tkir.tools.examples import check_interpreted, load_companion\n"
            "k = tkir.compile('tests/data/rows/softmax.tk')\nc = load_companion('tests/data/rows/softmax.tk')\n"
            "ok = all(r.ok for r in check_interpreted(k.module, c, dict(c.CHECK_SIZES[0]), {}, seed=0))\n"
            f"before = {BACKEND_LOADED}\nk.launch\n"
            f"print(json.dumps([ok, before, bool({BACKEND_LOADED})]))")
    assert python(code) == [True, [], True]


def test_runtime_imports_without_calling_the_driver() -> None:
    """Importing the runtime is side-effect free: no CUDA driver call (a machine without a GPU imports it)."""
    code = ("from cuda.bindings import driver as cu\ncalls = []\n"
            "def spy(name, f):\n"
            "    return lambda *a, **k: (calls.append(name), f(*a, **k))[1]\n"
            "for name in dir(cu):\n"
            "    if name.startswith('cu') and callable(getattr(cu, name)):\n"
            "        setattr(cu, name, spy(name, getattr(cu, name)))\n"
            f"for m in {list(RUNTIME)!r}:\n"
            "    __import__(m)\n"
            "print(json.dumps(calls))")
    assert python(code) == []


def test_removed_tkir_cuda_alias_does_not_import() -> None:
    """`tkir.cuda` was a deprecated alias of tkir.backend.cuda (its name before the runtime moved into
    backend/); it is gone: no such module in the package, and `import tkir.cuda` fails, while the real
    module imports. (Where it does import, the second item names the file it came from: e.g. an older
    checkout's, reached through an editable install of that checkout.)"""
    assert PathFinder.find_spec("tkir.cuda", tkir.__path__) is None
    code = ("import importlib.util\nspec = importlib.util.find_spec('tkir.cuda')\n"
            "try:\n    import tkir.cuda\nexcept ModuleNotFoundError as e:\n    gone = e.name\nelse:\n    gone = None\n"
            "import tkir.backend.cuda as real\n"
            "print(json.dumps([gone, spec and spec.origin, hasattr(real, 'to_device'), 'tkir.cuda' in sys.modules]))")
    assert python(code) == ["tkir.cuda", None, True, False]


def test_version_has_one_home() -> None:
    """tkir.__version__ and pyproject.toml's version both come from tkir/version.py."""
    from tkir.version import __version__

    assert tkir.__version__ == __version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in pyproject and 'attr = "tkir.version.__version__"' in pyproject
    tree = ast.parse((ROOT / "tkir" / "version.py").read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]  # a leaf of the graph
