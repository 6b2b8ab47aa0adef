"""A pass does not import another pass (STYLE.md: "A pass should not import another pass").

Every module of passes/ is read with `ast` and every import in it counts, those inside functions too: a
lazy import is a dependency all the same (plan-occupancy once imported pipeline-cp-async inside a function
while pipeline-cp-async imported plan-occupancy at the top: a cycle that only the function hid). The rules:

* a pass module (one that defines a Pass, or one passes/registry.py's PASS_TABLE names) imports, of passes/,
  only tkir.passes.builder and tkir.passes.analysis;
* the helper modules of passes/ (builder, analysis) import no pass module and not the registry;
* nothing in passes/ imports a floor above the passes: tkir.backend, tkir.frontend, tkir.tools, tkir.api,
  tkir.cli, the interpreter (tkir.interp*), or the `tkir` package itself (it is the face: it imports tkir.api).

Why: a pass that borrows another pass's helpers depends on that pass's code and, where the other runs later
in the pipeline, on a pass that has not run yet; the two cannot be read, tested, reordered or left out on
their own. What several passes read (copy classification, cp.async loops, rotatability, shared accesses,
occupancy counts, attribute names) lives in passes/analysis.py, which imports no pass; only the registry
imports the passes (by name, through importlib). Relative imports are resolved like absolute ones.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tkir.passes.registry import PASS_TABLE

ROOT = Path(__file__).resolve().parents[2]
PASSES = "tkir.passes"
# where each package's sources are (setuptools package-dir: the passes, front end and backend live at the top)
PACKAGE_DIRS = {"tkir": ROOT / "tkir", PASSES: ROOT / "passes", "tkir.frontend": ROOT / "frontend",
                "tkir.backend": ROOT / "backend"}
HELPERS = {f"{PASSES}.builder", f"{PASSES}.analysis"}  # what a pass may import of passes/
REGISTRY = f"{PASSES}.registry"
UPPER = ("tkir.backend", "tkir.frontend", "tkir.tools", "tkir.api", "tkir.cli", "tkir.interp")


def _module_file(name: str) -> Path | None:
    """The source of module (or package) `name` under PACKAGE_DIRS, None when it is not one."""
    base = max((p for p in PACKAGE_DIRS if name == p or name.startswith(p + ".")), key=len, default=None)
    if base is None:
        return None
    path = PACKAGE_DIRS[base].joinpath(*name[len(base):].split(".")[1:])
    for f in (path.with_suffix(".py"), path / "__init__.py"):
        if f.is_file():
            return f
    return None


def _modules() -> dict[str, Path]:
    """Every module of passes/ (sub-packages included) and its file."""
    out = {}
    for f in sorted((ROOT / "passes").rglob("*.py")):
        parts = f.relative_to(ROOT / "passes").with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join((PASSES, *parts))] = f
    return out


def imports(module: str, source: str, is_package: bool = False) -> list[tuple[int, str]]:
    """(line, tkir module) for every import in `source`, at any depth: `from tkir.x import y` is tkir.x.y
    where that is a module, else tkir.x; relative imports are resolved against `module`."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name == "tkir" or a.name.startswith("tkir.")]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module.split(".") if is_package else module.split(".")[:-1]
                pkg = pkg[:len(pkg) - (node.level - 1)]
                base = ".".join([*pkg, *([base] if base else [])])
            if base != "tkir" and not base.startswith("tkir."):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.append((node.lineno, sub if _module_file(sub) is not None else base))
    return out


def _defines_a_pass(source: str) -> bool:
    tree = ast.parse(source)
    return any(isinstance(n, ast.ClassDef) and any(isinstance(b, ast.Name) and b.id == "Pass" for b in n.bases)
               for n in ast.walk(tree))


REGISTERED = {f"{PASSES}.{target.split(':')[0]}" for target in PASS_TABLE.values()}


def pass_modules(modules: dict[str, Path]) -> set[str]:
    """The pass modules of passes/: those the registry names and those that define a Pass."""
    return REGISTERED | {m for m, f in modules.items() if _defines_a_pass(f.read_text(encoding="utf-8"))}


def violations(module: str, source: str, passes: set[str], is_package: bool = False) -> list[str]:
    """What `module` (a module of passes/ with `source`) imports against the rules, as 'module:line -> name'."""
    bad = []
    for line, name in imports(module, source, is_package):
        if name == module:
            continue
        of_passes = name.startswith(PASSES + ".")
        if module in passes:
            wrong = of_passes and name not in HELPERS
        elif module in HELPERS:
            wrong = name in passes or name == REGISTRY
        else:
            wrong = False
        wrong = wrong or name == "tkir" or any(name == u or name.startswith(u + ".") for u in UPPER)
        if wrong:
            bad.append(f"{module}:{line} -> {name}")
    return bad


def test_passes_import_only_the_core_the_builder_and_the_analyses() -> None:
    modules = _modules()
    passes = pass_modules(modules)
    # the classification is real: every registered pass module is here and defines a Pass; the helpers are not passes
    assert len(REGISTERED) >= 20 and REGISTERED <= set(modules)
    assert all(_defines_a_pass(modules[m].read_text(encoding="utf-8")) for m in REGISTERED)
    assert not passes & (HELPERS | {REGISTRY}) and HELPERS <= set(modules)
    bad, seen = [], 0
    for name, f in modules.items():
        source = f.read_text(encoding="utf-8")
        seen += len(imports(name, source, f.name == "__init__.py"))
        bad += violations(name, source, passes, f.name == "__init__.py")
    assert seen > 100  # every module was read
    assert not bad, "\n".join(bad)


def test_the_check_sees_lazy_relative_and_upward_imports() -> None:
    """Each kind of violation is found (so the test above can fail), and what is allowed is not flagged."""
    passes = {f"{PASSES}.stream_k", f"{PASSES}.persistent"}
    lazy = "def f():\n    from tkir.passes.persistent import one_block_per_sm\n"
    assert violations(f"{PASSES}.stream_k", lazy, passes) == [f"{PASSES}.stream_k:2 -> {PASSES}.persistent"]
    assert violations(f"{PASSES}.stream_k", "from . import persistent\n", passes) == [
        f"{PASSES}.stream_k:1 -> {PASSES}.persistent"]
    assert violations(f"{PASSES}.analysis", "from .persistent import x\n", passes) == [
        f"{PASSES}.analysis:1 -> {PASSES}.persistent"]
    assert violations(f"{PASSES}.builder", "import tkir.passes.registry\n", passes) == [
        f"{PASSES}.builder:1 -> {REGISTRY}"]
    assert violations(f"{PASSES}.registry", "def f():\n    import tkir.backend.cuda\n", passes) == [
        f"{PASSES}.registry:2 -> tkir.backend.cuda"]
    assert violations(f"{PASSES}.analysis", "from tkir import compile\nfrom tkir import api\n", passes) == [
        f"{PASSES}.analysis:1 -> tkir", f"{PASSES}.analysis:2 -> tkir.api"]
    allowed = ("from tkir import scalar\nfrom tkir.passes import builder\nfrom .analysis import classify_copy\n"
               "from tkir.passmanager import Pass\nimport numpy\n")
    assert violations(f"{PASSES}.stream_k", allowed, passes) == []
    assert [n for _, n in imports(f"{PASSES}.stream_k", allowed)] == [
        "tkir.scalar", f"{PASSES}.builder", f"{PASSES}.analysis", "tkir.passmanager"]
