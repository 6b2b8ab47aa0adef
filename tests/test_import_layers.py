"""One floor per stage: the IR core, the front end, the passes and the drivers load nothing of the
backend until a backend stage is asked for (DESIGN.md, "Which way imports run").

Each check runs in a fresh interpreter, since this process has long since imported the backend.
Also: the backend's runtime modules import without a GPU and without calling the driver, and the
deprecated alias `tkir.cuda` still works and warns.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# every module of tkir/ (tkir.cuda is the backend's alias, by design), passes/ and frontend/
CORE = sorted(f"tkir.{p.stem}" for p in (ROOT / "tkir").glob("*.py") if p.stem not in ("__init__", "cuda"))
PASSES = sorted(f"tkir.passes.{p.stem}" for p in (ROOT / "passes").glob("*.py") if p.stem != "__init__")
FRONTEND = sorted(f"tkir.frontend.{p.stem}" for p in (ROOT / "frontend").glob("*.py") if p.stem != "__init__")
RUNTIME = ("tkir.backend.cuda", "tkir.backend.launch", "tkir.backend.runtime")


def python(code: str) -> dict:
    """Run `code` in a fresh interpreter; it ends with `print(json.dumps(...))`, which is returned."""
    proc = subprocess.run([sys.executable, "-c", "import json, sys, warnings\n" + code], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


BACKEND_LOADED = "sorted(m for m in sys.modules if m == 'tkir.backend' or m.startswith('tkir.backend.'))"


def test_import_tkir_loads_no_backend() -> None:
    assert python(f"import tkir\nprint(json.dumps({BACKEND_LOADED}))") == []


@pytest.mark.parametrize("modules", [CORE, PASSES, FRONTEND], ids=["tkir", "passes", "frontend"])
def test_modules_load_no_backend(modules: list[str]) -> None:
    """Each module alone (a module that drags the backend in is named), then all of them together."""
    code = (f"import importlib\nout = {{}}\n"
            f"for m in {modules!r}:\n"
            f"    importlib.import_module(m)\n"
            f"    out[m] = {BACKEND_LOADED}\n"
            f"print(json.dumps({{m: b for m, b in out.items() if b}}))")
    assert python(code) == {}
    assert "tkir.interp" in CORE and "tkir.api" in CORE and "tkir.passes.registry" in PASSES  # the list is real


def test_compile_and_interpret_load_no_backend() -> None:
    """The pass pipeline and the interpreter run without the backend; only a backend stage loads it."""
    code = ("import tkir\nfrom tkir.examples import check_interpreted, load_companion\n"
            "k = tkir.compile('examples/softmax.tk')\nc = load_companion('examples/softmax.tk')\n"
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


def test_deprecated_tkir_cuda_alias() -> None:
    """docs/runtime.md and the README once named `tkir.cuda`: it is the same module, with a warning."""
    code = ("warnings.simplefilter('always')\n"
            "with warnings.catch_warnings(record=True) as w:\n"
            "    import tkir.cuda as tc\n"
            "    from tkir.cuda import CudaError, to_device\n"
            "import tkir\nimport tkir.backend.cuda as real\n"
            "print(json.dumps([tc is real, tkir.cuda is real, CudaError is real.CudaError, to_device is real.to_device,"
            " [(c.category.__name__, str(c.message)) for c in w]]))")
    same, attr, err, fn, warned = python(code)
    assert same and attr and err and fn
    assert warned == [["DeprecationWarning", "tkir.cuda is deprecated: import tkir.backend.cuda "
                                             "(to_device, empty, DeviceArray, CudaError)"]]
