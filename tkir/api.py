"""The Python API: `tkir.compile(path, **consts)` and `tkir.interpret(kernel, *arrays)`.

A compiled kernel keeps every stage's text, Triton-style: `k.asm["tkir"]` (after the last
pass), and once the backend has run, `k.asm["llvm"]`, `k.asm["ptx"]`, `k.asm["sass"]`;
`k.ir_after("select-swizzle")` gives the IR after any pass of the pipeline.
This module (with the CLI) is the only place that knows the front end, passes and backend.

The backend's output (llvm, ptx, launch) is kept in the disk cache of `tkir.backend.cache`, keyed by
the IR text the backend reads (the tile IR after the last pass), the options, the target, the tool
versions and a digest of the compiler's own sources (tkir/ and backend/), so a second compile of the
same source, constants and options runs the passes (milliseconds) but not LLVM. `k.cached` says
whether the last `lower()` came from the cache; `TKIR_CACHE=0` turns it off, `TKIR_CACHE_DIR` moves it.
"""

from __future__ import annotations

import functools
import hashlib
import io
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tkir.ir import Module
from tkir.pass_pipeline import as_specs
from tkir.passmanager import Options, PassManager, PipelineConfig, load_pass_file
from tkir.printer import print_module

if TYPE_CHECKING:
    from tkir.backend.launch import LaunchDescription

# The spellings of pass parameters that tkir 0.1 deprecated, removed in this release: compile(group_m=,
# pass_options=) and `tkc --group-m`, `--pass-option`. Passing one is an error that spells the pipeline
# that says the same (pass_option_pipeline).
REMOVED_IN = "0.2"
REMOVED_OPTIONS = ("group_m", "pass_options")


class _Stages(dict):
    """Stage texts, produced on first access: llvm/ptx/launch by the backend, cubin/sass by ptxas."""

    def __init__(self, kernel: CompiledKernel):
        super().__init__()
        self._kernel = kernel

    def __missing__(self, key: str) -> object:
        k = self._kernel
        if key in ("llvm", "ptx", "launch"):
            k.lower()
        elif key in ("cubin", "sass", "ptxas"):
            from tkir.backend.lower import assemble_artifacts

            self.update(assemble_artifacts(self["ptx"], k.options.target))
        if key not in self:
            raise KeyError(f"no stage '{key}' (stages: tkir, llvm, ptx, launch, cubin, sass)")
        return dict.__getitem__(self, key)


@dataclass
class CompiledKernel:
    path: str
    consts: dict[str, int | float]
    options: Options
    module: Module
    pipeline: list[str]
    snapshots: dict[str, str]
    timings: list[tuple[str, float]]
    asm: dict[str, object] = field(default_factory=dict)
    pipeline_spec: str = ""  # the pipeline that ran, parameters included (PassManager.spec)
    cached: bool | None = None  # whether lower() read the backend's output from the disk cache
    snapshots_kept: bool = True  # PipelineConfig.keep_snapshots: whether ir_after can answer
    _runtime: object = None

    def __post_init__(self) -> None:
        stages = _Stages(self)
        stages.update(self.asm)
        self.asm = stages

    @property
    def ir(self) -> str:
        return self.asm["tkir"]  # type: ignore[return-value]

    def ir_after(self, name: str) -> str:
        if name not in self.snapshots:
            if not self.snapshots_kept and name in self.pipeline:
                raise KeyError(f"the IR after each pass was not kept (PipelineConfig(keep_snapshots=False)); "
                               f"compile without that config to read the IR after '{name}'")
            raise KeyError(f"pass '{name}' did not run; pipeline: {', '.join(self.pipeline)}")
        return self.snapshots[name]

    # Backend stages are produced on first use, so interpreter-only users never need LLVM.
    def lower(self) -> None:
        """Run the backend (or read its output from the disk cache); adds a 'backend' timing row."""
        if dict.__contains__(self.asm, "ptx"):
            return
        n = len(self.module.kernels())
        if n != 1:  # hand-written IR with only descriptors, or two kernels: PTX holds one entry
            from tkir.diagnostics import CompileError
            from tkir.ir import Loc

            raise CompileError(Loc(self.path, 1, 1), f"the backend compiles a module with exactly one tk.kernel; "
                                                     f"this one has {n}",
                               hint="tkc opt runs passes on any module; --emit tkir stops before the backend")
        from tkir.backend import cache
        from tkir.backend.launch import LaunchDescription

        t0 = time.perf_counter()
        key = _cache_key(self) if cache.enabled() else None
        # verified, the launch read back from its JSON; or None (then rebuilt)
        hit = cache.get(key, required=BACKEND_STAGES, read={"launch": LaunchDescription.from_json}) if key else None
        if hit is not None:
            self.asm.update({s: hit[s] for s in BACKEND_STAGES})
            self.cached = True
            self.timings.append(("backend (cached)", time.perf_counter() - t0))
            return
        from tkir.backend.lower import compile_module

        artifacts = compile_module(self.module, self.options)
        self.asm.update(artifacts)
        self.cached = False
        if key:  # the launch description is stored as its JSON
            cache.put(key, {s: artifacts[s].to_json() if s == "launch" else artifacts[s] for s in BACKEND_STAGES})
        self.timings.append(("backend (llvm, ptx)", time.perf_counter() - t0))

    @property
    def launch(self) -> LaunchDescription:
        """The launch description (runs the backend first); `.to_json()` is what `--emit launch` prints."""
        self.lower()
        return self.asm["launch"]

    def emit_c(self, name: str | None = None, header: str | None = None):  # -> tkir.backend.emit_c.CSources
        """A self-contained C source and header that load this kernel's PTX (embedded) and launch it
        through the CUDA driver API (`tkc compile --emit c`; docs/runtime.md, "C"). `name` makes the
        C prefix `tkir_<name>` (default: the kernel's name), `header` the file name the .c includes
        (default `<name>.h`)."""
        from tkir.backend.emit_c import emit_c

        return emit_c(self.asm["ptx"], self.launch, name, header, provenance=self._provenance())

    def _provenance(self) -> str:
        """How this kernel was compiled, as a tkc command line (for generated files' banners)."""
        from tkir.version import __version__

        words = [f"tkc compile {self.path}"] + [f"-D {k}={v}" for k, v in self.consts.items()]
        if self.options.target != "sm_90a":
            words.append(f"--target={self.options.target}")
        if self.options.swizzle:
            words.append(f"--swizzle={self.options.swizzle}")
        if self.options.no_tma:
            words.append("--no-tma")
        if self.pipeline_spec and self.pipeline_spec != ",".join(default_pipeline()):
            words.append(f"--passes='{self.pipeline_spec}'")
        return f"from: {' '.join(words)} (tkir {__version__})"

    def __call__(self, *args: object, stream: int | None = None) -> None:
        self.launcher()(*args, stream=stream)

    def launcher(self):  # noqa: ANN201 - a tkir.backend.runtime.Kernel (the backend loads lazily)
        """The runtime's Kernel of this compile, made on first use (the backend's output first): calling it
        launches exactly as calling this object does, one Python call layer shorter."""
        if self._runtime is None:
            self.lower()
            from tkir.backend.runtime import Kernel

            self._runtime = Kernel(self.asm["ptx"], self.launch)
        return self._runtime


BACKEND_STAGES = ("llvm", "ptx", "launch")  # what compile_module produces and the disk cache keeps


def _cache_key(k: CompiledKernel) -> str:
    from tkir.backend import cache

    versions = dict(cache.tool_versions(), compiler=compiler_digest())
    return cache.make_key(k.ir, k.consts, k.options, k.options.target, versions)


@functools.cache
def compiler_digest() -> str:
    """sha256 of the sources of tkir/ (the core and the face, the interpreter, the tools) and backend/: a
    changed lowering rule never reads a stale entry of the compile cache, nor a changed tuner one of the tune
    cache (tkir.__version__ does not move between commits)."""
    import tkir.backend

    here = Path(__file__).parent
    h = hashlib.sha256()
    for root in (here, here / "interp", here / "tools", Path(tkir.backend.__file__).parent):
        for f in sorted(root.glob("*.py")):
            h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()


def default_pipeline() -> list[str]:
    from tkir.passes.registry import DEFAULT_PIPELINE

    return list(DEFAULT_PIPELINE)


def build_module(path: str, consts: dict[str, int | float] | None = None) -> Module:
    """Parse a .tk file (or read a .tkir file) into a module."""
    if str(path).endswith(".tkir"):
        from tkir.parser import parse_module
        from tkir.source_text import read_source
        from tkir.verifier import verify

        text = read_source(path)
        module = parse_module(text, str(path))
        verify(module)  # as `tkc opt` does: passes run on verified IR only
        return module
    from tkir.frontend import compile_file

    return compile_file(str(path), consts or {})


def compile(
    path: str,
    *,
    target: str = "sm_90a",
    passes: str | list[str] | None = None,
    swizzle: str | None = None,
    no_tma: bool = False,
    load_passes: list[str] | None = None,
    config: PipelineConfig | None = None,
    out: io.TextIOBase | None = None,
    **consts: int | float,
) -> CompiledKernel:
    """Compile a .tk kernel through the pass pipeline (the backend runs lazily on first use).

    `passes` is the pipeline, as a string (`"canonicalize,persistent{group_m=16}"`) or a list of
    entries; None runs the default one. `group_m=` and `pass_options=` were removed in tkir 0.2: a
    TypeError says which `passes` does the same (the names are not taken as constants)."""
    from tkir.passes.registry import load_registry

    if any(k in consts for k in REMOVED_OPTIONS):
        raise TypeError(_removed_options_message(consts, passes))
    if isinstance(load_passes, str):  # a string would be read as a list of one-letter file names
        raise TypeError(f"tkir.compile(): load_passes= is a list of files, e.g. load_passes=[{load_passes!r}]")
    registry = load_registry()
    for f in load_passes or []:
        load_pass_file(f, registry)
    pipeline = as_specs(passes if passes is not None else default_pipeline())
    options = Options(target=target, swizzle=swizzle, no_tma=no_tma)
    pm = PassManager(registry, pipeline)  # names and parameters are checked before any work
    choice: dict | None = None
    if not str(path).endswith(".tkir"):
        consts, choice = _resolve_auto(str(path), dict(consts), registry, pipeline, options)
    module = build_module(path, consts)
    pm.run(module, options, config, out)
    if choice is not None:  # the decision, visible in the IR (tkir/tools/auto_consts.py)
        module.kernel.attrs["auto"] = choice["auto"]
        if choice["refused"]:
            module.kernel.attrs["auto_refused"] = choice["refused"]
    k = CompiledKernel(str(path), dict(consts), options, module, pm.pipeline, pm.snapshots, pm.timings,
                       pipeline_spec=pm.spec(), snapshots_kept=config is None or config.keep_snapshots)
    k.asm["tkir"] = print_module(module)
    return k


def pass_option_pipeline(options: dict[str, object], passes: str | list[str] | None) -> str | None:
    """The pipeline text (`passes=` / `--passes`) that does what the removed pass options `options`
    did (passes/registry.py LEGACY_OPTIONS: group_m, balanced_grid, epilogue_chunk, stream_k, ...) on
    `passes` (None: the default pipeline); None when one of them never was an option, or has a value
    its pass refuses (pass_option_problem says which)."""
    return _legacy_spec(options, passes)[0]


def pass_option_problem(options: dict[str, object], passes: str | list[str] | None) -> str | None:
    """Why the removed pass options `options` spell no pipeline: the error of the pass parameter they
    become (`group_m=0`: the pass's own message), or None when they do spell one."""
    return _legacy_spec(options, passes)[1]


def _legacy_spec(options: dict[str, object], passes: str | list[str] | None) -> tuple[str | None, str | None]:
    from tkir.diagnostics import CompileError
    from tkir.passes.registry import legacy_pipeline, load_registry

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            specs = legacy_pipeline(as_specs(passes if passes is not None else default_pipeline()), options,
                                    explicit=passes is not None)
        return PassManager(load_registry(), specs).spec(), None  # parameters at their defaults left out
    except CompileError as e:
        return None, e.message


def _removed_options_message(consts: dict, passes: str | list[str] | None) -> str:
    names = [k for k in REMOVED_OPTIONS if k in consts]
    given = consts.get("pass_options") or {}
    options = dict(given) if isinstance(given, dict) else {}
    if consts.get("group_m") is not None:
        options["group_m"] = consts["group_m"]
    text, problem = _legacy_spec(options, passes) if options and isinstance(given, dict) else (None, None)
    said = " and ".join(f"{n}=" for n in names)
    instead = (f"pass the pipeline with the pass parameters instead: passes='{text}'" if text else
               "write the pass parameters in passes=, e.g. passes='...,persistent{group_m=4},...' "
               "(`tkc passes` lists every pass and its parameters)")
    if problem:  # the value itself is one no pass takes: say so, rather than drop it from the advice
        instead += f"; and the value given is refused: {problem}"
    return f"tkir.compile(): {said} {'was' if len(names) == 1 else 'were'} removed in tkir {REMOVED_IN}: {instead}"


def _resolve_auto(path: str, consts: dict, registry: dict, pipeline: list,
                  options: Options) -> tuple[dict, dict | None]:
    """Consts set to `auto` chosen by tkir.tools.auto_consts (the pipeline up to plan-occupancy decides)."""
    from tkir.tools import auto_consts

    names = auto_consts.auto_names(path, consts)
    if not names:
        return consts, None
    cut = next((i for i, s in enumerate(pipeline) if s.name == auto_consts.STOP_AFTER), len(pipeline) - 1)
    prefix = PassManager(registry, pipeline[:cut + 1])

    def trial(point: dict) -> Module:
        m = build_module(path, point)
        prefix.run(m, options, PipelineConfig(), io.StringIO())
        return m

    resolved, chosen, refused = auto_consts.resolve(path, consts, names, trial)
    return {**consts, **{n: resolved[n] for n in names}}, {"auto": chosen, "refused": refused}


def interpret(kernel: CompiledKernel | Module, *arrays: object, **sizes: int) -> None:
    """Run a kernel in the numpy interpreter; outputs are written into `arrays` in place."""
    from tkir.interp import interpret as run

    module = kernel.module if isinstance(kernel, CompiledKernel) else kernel
    run(module, *arrays, sizes=sizes or None)
