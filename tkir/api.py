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
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tkir import symexpr
from tkir.diagnostics import TkirWarning
from tkir.facts import MULTICAST_FILL_ATTR
from tkir.ir import Module
from tkir.pass_pipeline import PIPELINE_FILE, PassEdit, PassSpec, as_specs, edits_text, parse_pass_edits
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
    """Stage texts, produced on first access: llvm/ptx/launch by the backend, cubin and `ptxas` (its report) by
    ptxas, sass by disassembling the cubin (only when asked for: a spill check needs no SASS)."""

    def __init__(self, kernel: CompiledKernel):
        super().__init__()
        self._kernel = kernel

    def __missing__(self, key: str) -> object:
        k = self._kernel
        if key in ("llvm", "ptx", "launch"):
            k.lower()
        elif key in ("cubin", "ptxas"):  # ptxas alone: a spill check or a register count needs no SASS
            from tkir.backend.lower import assemble_artifacts
            from tkir.backend.toolchain import Assembled

            ptx = self["ptx"]  # lowering may assemble it already: the backend's spill check keeps ptxas's run
            kept = dict.get(self, "ptxas")
            if isinstance(kept, Assembled):
                self["cubin"] = kept.cubin
            else:
                self.update(assemble_artifacts(ptx, k.options.target, sass=False))
        elif key == "sass":
            from tkir.backend.toolchain import disassemble

            self["sass"] = disassemble(self["cubin"])
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
    pass_edits: str = ""  # the caller's pass_edits (compile(pass_edits=), tkc --pass-edits), as edits_text spells them
    cached: bool | None = None  # whether lower() read the backend's output from the disk cache
    snapshots_kept: bool = True  # PipelineConfig.keep_snapshots: whether ir_after can answer
    explicit_pipeline: bool = False  # the pipeline was given (passes=, --passes), not the default or the kernel's
    load_passes: list[str] = field(default_factory=list)  # research pass files the pipeline may name
    _runtime: object = None
    _variants: dict = field(default_factory=dict, repr=False)  # piece -> CompiledKernel (variant)
    _by_size: _AutoBySize | None = field(default=None, repr=False)  # auto consts chosen per size bucket at launch

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
        from tkir.backend.lower import SPILL_FALLBACK_ATTR

        t0 = time.perf_counter()
        key = _cache_key(self) if cache.enabled() else None
        # verified, the launch read back from its JSON; or None (then rebuilt)
        hit = cache.get(key, required=BACKEND_STAGES, read={"launch": LaunchDescription.from_json}) if key else None
        if hit is not None:
            self.asm.update({s: hit[s] for s in BACKEND_STAGES})
            if isinstance(hit.get(SPILL_FALLBACK_ATTR), dict):  # the backend's decision, as it made it
                self.module.kernel.attrs[SPILL_FALLBACK_ATTR] = hit[SPILL_FALLBACK_ATTR]
            self.cached = True
            self.timings.append(("backend (cached)", time.perf_counter() - t0))
            return
        from tkir.backend.lower import compile_module

        artifacts = compile_module(self.module, self.options)
        self.asm.update(artifacts)
        self.cached = False
        if key:  # the launch description is stored as its JSON
            entry = {s: artifacts[s].to_json() if s == "launch" else artifacts[s] for s in BACKEND_STAGES}
            fallback = self.module.kernel.attrs.get(SPILL_FALLBACK_ATTR)
            if isinstance(fallback, dict):
                entry[SPILL_FALLBACK_ATTR] = fallback
            cache.put(key, entry)
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
        if self.explicit_pipeline and self.pipeline_spec != ",".join(default_pipeline()):
            words.append(f"--passes='{self.pipeline_spec}'")
        if self.pass_edits:
            words.append(f"--pass-edits='{self.pass_edits}'")
        return f"from: {' '.join(words)} (tkir {__version__})"

    def __call__(self, *args: object, stream: int | None = None) -> None:
        if self._by_size is not None:  # auto consts: the kernel chosen for these arguments' size bucket
            self._by_size.launcher(self, args)(*args, stream=stream)
            return
        self.launcher()(*args, stream=stream)

    @property
    def chooses_per_size(self) -> bool:
        """Whether calls choose the auto consts per problem-size bucket (compiled with auto consts and no
        `sizes`): `for_sizes(sizes)` is the kernel a call at those sizes launches."""
        return self._by_size is not None

    def for_sizes(self, sizes: dict[str, int], *, spill_check: bool = True) -> CompiledKernel:
        """The kernel a call at these problem sizes runs: this one, or, where its auto consts are chosen per
        size bucket, the one compiled with the cost model's choice for the sizes' bucket (made once).
        `spill_check=False` skips the backend and ptxas (what tkir.interpret asks)."""
        return self._by_size.kernel_for(sizes, spill_check) if self._by_size is not None else self

    def launcher(self):  # noqa: ANN201 - a tkir.backend.runtime.Kernel (the backend loads lazily)
        """The runtime's Kernel of this compile, made on first use (the backend's output first): calling it
        launches exactly as calling this object does, one Python call layer shorter. Rows that do not fit
        its vector pieces are launched by `variant(piece)`, compiled when first needed."""
        if self._runtime is None:
            self.lower()
            from tkir.backend.runtime import Kernel

            variants = "infer-layouts" in self.pipeline  # the pass whose parameter makes them
            self._runtime = Kernel(self.asm["ptx"], self.launch,
                                   variant=(lambda piece: self.variant(piece).launcher()) if variants else None)
        return self._runtime

    def variant(self, piece: int) -> CompiledKernel:
        """This kernel with its register rows copied in pieces of at most `piece` bytes (16, 8, 4, 2, 1; at
        least one element): the same source, consts, options and pipeline, infer-layouts{max_vec_bytes=piece}
        (its PTX is this kernel's where `piece` is 16). What the launch and tkir.interpret run for rows that
        do not start aligned to this kernel's pieces (docs/runtime.md, "Unaligned rows"); made once."""
        if piece not in self._variants:
            specs = as_specs(self.pipeline_spec)
            if "infer-layouts" not in [s.name for s in specs]:
                raise ValueError(f"{self.path}: its pipeline runs no infer-layouts: no variant with other pieces")
            specs = [PassSpec(s.name, {**s.params, "max_vec_bytes": str(piece)}) if s.name == "infer-layouts" else s
                     for s in specs]
            self._variants[piece] = _compile(self.path, specs, "kernel", self.options, self.load_passes,
                                             PipelineConfig(keep_snapshots=False), None, dict(self.consts))
        return self._variants[piece]

    def unaligned_piece(self, *arrays: object) -> int | None:
        """The piece (bytes) of the variant a run on these arrays needs, None when this kernel's own vector
        pieces fit their rows (tkir.requires.unaligned_piece over the numpy arrays' or device tensors'
        base addresses and strides). What tkir.interpret consults; the launch asks the same of its arguments."""
        from tkir.requires import row_piece_tensors, unaligned_piece
        from tkir.types import DTYPE_BYTES, GlobalType

        kernels = self.module.kernels()
        pieces = row_piece_tensors(kernels[0]) if len(kernels) == 1 else {}
        if not pieces:
            return None
        params = [a for a in kernels[0].body.args if isinstance(a.type, GlobalType)]
        tensors = {}
        for p, arr in zip(params, arrays, strict=False):
            if p.name in pieces and hasattr(arr, "__array_interface__"):
                face = arr.__array_interface__
                strides = face["strides"] or _contiguous_strides(arr.shape, arr.itemsize)
                tensors[p.name] = (face["data"][0], tuple(arr.shape), tuple(strides), DTYPE_BYTES[p.type.dtype])
        return unaligned_piece(pieces, tensors)


BACKEND_STAGES = ("llvm", "ptx", "launch")  # what compile_module produces and the disk cache keeps


# the kernel attrs that record how auto consts were chosen (tkir/tools/auto_consts.py): the backend never reads
# them, so the cache key leaves them out (the point's own compile, which checked it against ptxas, is the same entry)
AUTO_ATTRS = ("auto", "auto_sizes", "auto_predicted", "auto_runner_up", "auto_refused")
PROBLEM_SIZES_ATTR = "problem_sizes"  # tk.kernel: the size bucket a kernel compiled with sizes= was compiled for


def _size_bucket(sizes: dict[str, int]) -> dict[str, int]:
    from tkir.tools.auto_consts import size_bucket

    return size_bucket(sizes)


def _cache_key(k: CompiledKernel) -> str:
    from tkir.backend import cache

    versions = dict(cache.tool_versions(), compiler=compiler_digest())
    ir = k.ir
    kernels = k.module.kernels()
    if len(kernels) == 1 and any(a in kernels[0].attrs for a in AUTO_ATTRS):
        attrs = kernels[0].attrs
        kept = dict(attrs)
        for a in AUTO_ATTRS:
            attrs.pop(a, None)
        ir = print_module(k.module)
        attrs.clear()
        attrs.update(kept)  # the same order as before
    return cache.make_key(ir, k.consts, k.options, k.options.target, versions)


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
    pass_edits: str | None = None,
    swizzle: str | None = None,
    no_tma: bool = False,
    load_passes: list[str] | None = None,
    config: PipelineConfig | None = None,
    out: io.TextIOBase | None = None,
    sizes: dict[str, int] | None = None,
    **consts: int | float,
) -> CompiledKernel:
    """Compile a .tk kernel through the pass pipeline (the backend runs lazily on first use).

    `passes` is the pipeline, as a string (`"canonicalize,persistent{group_m=16}"`) or a list of
    entries; None runs the default one with the kernel's own `@passes(...)` edits applied (an explicit
    `passes` wins over them: they are checked, not applied, and a KernelPassesWarning says so).
    `pass_edits` edits that pipeline in the syntax of `@passes(...)` (`"-coarsen-rows,plan-occupancy{...}"`),
    after the kernel's own edits: what an ablation changes, without spelling the whole pipeline.
    Consts that are `auto` are chosen by the compiler (tkir/tools/auto_consts.py): with `sizes` (problem
    sizes, e.g. `{"M": 64, "N": 4096, "K": 4096}`) by the cost model at their size bucket; without, the
    kernel printed and lowered is the size-free choice and each call chooses for its arguments' bucket
    (`for_sizes`). `group_m=` and `pass_options=` were removed in tkir 0.2: a TypeError says which `passes` does the
    same (the names are not taken as constants)."""
    if any(k in consts for k in REMOVED_OPTIONS):
        raise TypeError(_removed_options_message(consts, passes))
    if isinstance(load_passes, str):  # a string would be read as a list of one-letter file names
        raise TypeError(f"tkir.compile(): load_passes= is a list of files, e.g. load_passes=[{load_passes!r}]")
    pipeline = as_specs(passes if passes is not None else default_pipeline())
    edits = parse_pass_edits(pass_edits) if pass_edits else []  # located in `<passes>`, as --passes is
    if sizes is not None:
        sizes = _check_sizes(sizes)
    return _compile(path, pipeline, "explicit" if passes is not None else "default",
                    Options(target=target, swizzle=swizzle, no_tma=no_tma), load_passes, config, out, consts,
                    edits, sizes)


def _check_sizes(sizes: dict) -> dict[str, int]:
    bad = [f"{k}={v!r}" for k, v in sizes.items() if not isinstance(v, int) or isinstance(v, bool) or v < 1]
    if bad:
        raise TypeError(f"tkir.compile(): sizes= are positive integers; got {', '.join(bad)}")
    return {str(k): int(v) for k, v in sizes.items()}


def _compile(path: str, pipeline: list, given: str, options: Options, load_passes: list[str] | None,
             config: PipelineConfig | None, out: io.TextIOBase | None, consts: dict,
             edits: list[PassEdit] | None = None, sizes: dict[str, int] | None = None,
             spill_check: bool = True) -> CompiledKernel:
    """compile() for a pipeline `given` as "default" (the kernel's @passes edits apply), "explicit" (they
    do not) or "kernel" (the kernel's own, edits included: CompiledKernel.variant); `edits` (the caller's
    pass_edits) apply last."""
    from tkir.passes.registry import apply_pass_edits, load_registry

    registry = load_registry()
    for f in load_passes or []:
        load_pass_file(f, registry)
    pm = PassManager(registry, pipeline)  # names and parameters are checked before any work

    def kernel_pipeline(module: Module) -> list:
        specs = pipeline if given == "kernel" else _kernel_pipeline(module, pipeline, registry, given == "explicit")
        return apply_pass_edits(specs, edits, registry) if edits else specs

    if edits:
        apply_pass_edits(pipeline, edits, registry)  # a bad edit is an error before any work

    choice: dict | None = None
    asked = dict(consts)  # before the auto ones are chosen: what a per-size choice starts from
    if not str(path).endswith(".tkir"):
        # a pipeline that plans nothing (an explicit `canonicalize,my-pass`) cannot choose a tile: the auto consts
        # are then chosen as the default pipeline would choose them
        plans = any(spec.name == "plan-occupancy" for spec in pipeline)
        choose_with, choose_given = (pipeline, given) if plans else (as_specs(default_pipeline()), "default")

        def choice_pipeline(m: Module) -> list:
            return kernel_pipeline(m) if plans else _kernel_pipeline(m, choose_with, registry, False)

        accept = None
        if spill_check:
            def accept(point: dict, limit: int | None = None) -> str | None:
                return _spill_reason(_compile(path, choose_with, choose_given, options, load_passes,
                                              PipelineConfig(keep_snapshots=False), None, point,
                                              edits if plans else None, sizes), limit)
        consts, choice = _resolve_auto(str(path), dict(consts), registry, choice_pipeline, options, sizes, accept)
    module = build_module(path, consts)
    if sizes is not None:  # compiled for a size bucket: passes may decide from it (infer-layouts' row warps)
        for kern in module.kernels():
            kern.attrs[PROBLEM_SIZES_ATTR] = _size_bucket(sizes)
    edited = kernel_pipeline(module)
    if edited is not pipeline:
        pm = PassManager(registry, edited)
    kernels = module.kernels()
    if len(kernels) == 1 and PASSES_ATTR in kernels[0].attrs:  # the pipeline it runs, in the IR from the start
        kernels[0].attrs[PIPELINE_ATTR] = pm.spec()
    pm.run(module, options, config, out)
    if choice is not None:  # the decision, visible in the IR (tkir/tools/auto_consts.py)
        module.kernel.attrs["auto"] = choice["auto"]
        for key in ("sizes", "predicted", "runner_up"):  # made at problem sizes: the model's reasons
            if key in choice:
                module.kernel.attrs[f"auto_{key}"] = choice[key]
        if choice["refused"]:
            module.kernel.attrs["auto_refused"] = choice["refused"]
    k = CompiledKernel(str(path), dict(consts), options, module, pm.pipeline, pm.snapshots, pm.timings,
                       pipeline_spec=pm.spec(), snapshots_kept=config is None or config.keep_snapshots,
                       explicit_pipeline=given == "explicit", load_passes=list(load_passes or []),
                       pass_edits=edits_text(edits) if edits else "")
    k.asm["tkir"] = print_module(module)
    if choice is not None and sizes is None:  # calls choose per size bucket
        def at_sizes(at: dict[str, int], spill_check: bool, fixed: dict | None = None,
                     more: list[PassEdit] | None = None) -> CompiledKernel:
            return _compile(path, pipeline, given, options, load_passes, config, None, {**asked, **(fixed or {})},
                            [*(edits or []), *(more or [])], at, spill_check)

        k._by_size = _AutoBySize(at_sizes)
    return k


def _spill_reason(k: CompiledKernel, limit: int | None = None) -> str | None:
    """Why a point the compiler chose is turned down: ptxas spills more than the tuner allows (`limit` bytes, else
    SPILL_LIMIT_BYTES), or at all at the most registers a thread can have."""
    from tkir.diagnostics import TkirError
    from tkir.target import MAX_REGS_PER_THREAD
    from tkir.tools.auto_consts import SPILL_LIMIT_BYTES

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the backend's SpillWarning: the choice moves on instead
        try:
            stats = k.asm["ptxas"]
        except (TkirError, NotImplementedError):
            return None  # the backend cannot lower it here: the kernel's own lowering reports that where it runs
    spilled = max(stats.spill_stores, stats.spill_loads)
    limit = SPILL_LIMIT_BYTES if limit is None else limit
    if spilled > limit or (spilled and stats.registers >= MAX_REGS_PER_THREAD):
        # a few spilled words under a register cap (setmaxnreg) cost little; at the most a thread can have, the
        # tile does not fit
        return f"ptxas spills {spilled} B at {stats.registers} registers"
    return None


SINGLE_CTA_EDIT = "multicast{ctas=1}"  # the pass edit of a bucket's kernel for sizes its multicast fill rule rejects


class _AutoBySize:
    """The kernels a CompiledKernel with auto consts launches, one per problem-size bucket (each size
    rounded up to a power of two), compiled with the cost model's choice when the bucket is first called.
    A kernel whose `requires` (tile divisibility) the call's exact sizes break is chosen again for those
    sizes; one whose multicast fill rule (`multicast_fill`, passes/multicast.py) the exact sizes do not meet
    runs the same consts compiled with `multicast{ctas=1}`. Calls with argument shapes seen before go straight
    to their launcher. The interpreter asks without the spill check (`spill_check=False`: no backend, no
    ptxas), so it can run another point than a launch only where the model's winner spills."""

    SHAPES = 256  # argument shapes remembered (as tkir.tools.tune.TunedKernel does)

    def __init__(self, at_sizes: Callable[[dict[str, int], bool], CompiledKernel]):
        self.at_sizes = at_sizes
        self.kernels: dict[tuple, CompiledKernel] = {}
        self.by_shapes: dict[tuple, object] = {}

    def kernel_for(self, sizes: dict[str, int], spill_check: bool = True) -> CompiledKernel:
        from tkir.requires import module_requires, requirement_failure
        from tkir.tools.auto_consts import size_bucket

        bucket = size_bucket(sizes)
        key = (spill_check, *sorted(bucket.items()))
        if key not in self.kernels:
            self.kernels[key] = self.at_sizes(bucket, spill_check)
        k = self.kernels[key]
        kernel = k.module.kernel
        if any(requirement_failure(kernel.symbol, r, sizes) for r in module_requires(k.module)):
            key = (spill_check, "exact", *sorted(sizes.items()))
            if key not in self.kernels:
                self.kernels[key] = self.at_sizes(dict(sizes), spill_check)
            k = self.kernels[key]
        fill = k.module.kernel.attrs.get(MULTICAST_FILL_ATTR)
        if isinstance(fill, dict) and symexpr.evaluate(str(fill["blocks"]), sizes) < int(fill["at_least"]):
            # the bucket's multicast pays only for a wave that fills the SMs (passes/multicast.py): these sizes
            # launch fewer blocks, so they run the same consts without it
            key = (*key, SINGLE_CTA_EDIT)
            if key not in self.kernels:
                self.kernels[key] = self.at_sizes(bucket, spill_check, dict(k.consts),
                                                  parse_pass_edits(SINGLE_CTA_EDIT))
            k = self.kernels[key]
        return k

    def launcher(self, owner: CompiledKernel, args: tuple):  # -> tkir.backend.runtime.Kernel
        shapes = tuple(tuple(a.shape) for a in args if hasattr(a, "shape"))
        hit = self.by_shapes.get(shapes)
        if hit is None:
            hit = self.kernel_for(call_sizes(owner.module, args)).launcher()
            if len(self.by_shapes) >= self.SHAPES:
                self.by_shapes.pop(next(iter(self.by_shapes)))
            self.by_shapes[shapes] = hit
        return hit


def call_sizes(module: Module, args: tuple) -> dict[str, int]:
    """The problem sizes a call's tensor arguments bind (the plain-name dims of the kernel's tensor params,
    read from each argument's `.shape`); the launch or the interpreter checks everything else."""
    from tkir.types import GlobalType

    params = [a for a in module.kernel.body.args if isinstance(a.type, GlobalType)]
    sizes: dict[str, int] = {}
    for p, a in zip(params, args, strict=False):
        shape = getattr(a, "shape", None)
        if shape is None or len(shape) != len(p.type.dims):
            continue
        for d, n in zip(p.type.dims, shape, strict=True):
            if isinstance(d, str) and d.isidentifier():
                sizes.setdefault(d, int(n))
    return sizes


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


def _resolve_auto(path: str, consts: dict, registry: dict, pipeline_of: Callable[[Module], list],
                  options: Options, sizes: dict[str, int] | None = None,
                  accept: Callable[[dict], str | None] | None = None) -> tuple[dict, dict | None]:
    """Consts set to `auto` chosen by tkir.tools.auto_consts (the pipeline up to plan-occupancy decides;
    `pipeline_of(module)` is the pipeline the module's kernel runs, its @passes edits applied)."""
    from tkir.tools import auto_consts

    names = auto_consts.auto_names(path, consts)
    if not names:
        return consts, None

    def trial(point: dict) -> Module:
        m = build_module(path, point)
        if sizes is not None:
            for kern in m.kernels():
                kern.attrs[PROBLEM_SIZES_ATTR] = _size_bucket(sizes)
        pipeline = pipeline_of(m)
        cut = next((i for i, s in enumerate(pipeline) if s.name == auto_consts.STOP_AFTER), len(pipeline) - 1)
        PassManager(registry, pipeline[:cut + 1]).run(m, options, PipelineConfig(), io.StringIO())
        return m

    if sizes is None:
        resolved, chosen, refused = auto_consts.resolve(path, consts, names, trial, accept=accept)
        return {**consts, **{n: resolved[n] for n in names}}, {"auto": chosen, "refused": refused}
    resolved, choice, refused = auto_consts.resolve(path, consts, names, trial, sizes=sizes,
                                                    front=lambda point: build_module(path, point),
                                                    target=options.target, accept=accept)
    return {**consts, **{n: resolved[n] for n in names}}, {**choice, "refused": refused}


# --- a kernel's own pipeline: @passes(...) ----------------------------------------------------------

PASSES_ATTR = "passes"  # tk.kernel: the kernel's @passes edits (frontend/annotations.py writes it)
PIPELINE_ATTR = "pass_pipeline"  # tk.kernel: the pipeline a kernel with edits runs, as --passes spells it


class KernelPassesWarning(TkirWarning):
    """A kernel's @passes edits that an explicit pipeline (--passes, passes=) leaves unapplied."""


def kernel_pass_edits(module: Module) -> list[PassEdit]:
    """The @passes edits of the module's kernel: located in its .tk source where the front end made it,
    else read from its `passes` attribute (IR text); [] without one."""
    kernels = module.kernels()
    if len(kernels) != 1 or PASSES_ATTR not in kernels[0].attrs:
        return []
    kernel = kernels[0]
    located = kernel.requested.get(PASSES_ATTR)
    if located:
        return located
    text = kernel.attrs[PASSES_ATTR]
    if not isinstance(text, str):
        from tkir.diagnostics import CompileError

        raise CompileError(kernel.loc, f"the kernel's '{PASSES_ATTR}' attribute is a string of pass edits "
                                       f"(\"-overlap-mma\"), not {text!r}")
    return parse_pass_edits(text)


def _kernel_pipeline(module: Module, pipeline: list, registry: dict, explicit: bool) -> list:
    """The pipeline the module's kernel runs: `pipeline` itself when the kernel has no @passes or the
    pipeline was given explicitly (the command line wins: a warning says the edits are not applied),
    else the default pipeline with the kernel's edits applied. The edits are checked either way."""
    from tkir.passes.registry import apply_pass_edits

    edits = kernel_pass_edits(module)
    if not edits:
        return pipeline
    edited = apply_pass_edits(as_specs(default_pipeline()), edits, registry)
    if not explicit:
        return edited
    where = f"{edits[0].spec.loc()}: " if edits[0].spec.file != PIPELINE_FILE else ""
    warnings.warn(f"{where}the kernel's @passes({edits_text(edits)}) is not applied: an explicit pipeline "
                  "(--passes, passes=) replaces the whole pipeline, the kernel's edits included",
                  KernelPassesWarning, stacklevel=4)
    return pipeline


def kernel_pipeline(path: str, *, load_passes: list[str] | None = None) -> tuple[str, str]:
    """(the kernel's @passes edits, the pipeline tkir.compile(path) runs for it) as text, the pipeline
    as --passes spells it; ("", the default pipeline) for a kernel without @passes. What `tkc passes
    --kernel FILE` prints; reads the source only (no consts, no passes run)."""
    from tkir.passes.registry import apply_pass_edits, load_registry

    registry = load_registry()
    for f in load_passes or []:
        load_pass_file(f, registry)
    if str(path).endswith(".tkir"):
        edits = kernel_pass_edits(build_module(path))
    else:
        from tkir.frontend import read_pass_edits

        edits = read_pass_edits(str(path))
    specs = apply_pass_edits(as_specs(default_pipeline()), edits, registry) if edits else default_pipeline()
    return edits_text(edits), PassManager(registry, specs).spec()


def _contiguous_strides(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    out, step = [], itemsize
    for extent in reversed(shape):
        out.append(step)
        step *= extent
    return tuple(reversed(out))


def interpret(kernel: CompiledKernel | Module, *arrays: object, **sizes: int) -> None:
    """Run a kernel in the numpy interpreter; outputs are written into `arrays` in place. A compiled kernel
    whose vector pieces do not fit the arrays' rows runs its variant with narrower pieces, as the launch
    does (CompiledKernel.variant); a Module runs as it is."""
    from tkir.interp import interpret as run

    if isinstance(kernel, CompiledKernel):
        if kernel.chooses_per_size:  # what a launch on these arrays runs
            kernel = kernel.for_sizes({**call_sizes(kernel.module, arrays), **sizes}, spill_check=False)
        piece = kernel.unaligned_piece(*arrays)
        module = (kernel if piece is None else kernel.variant(piece)).module
    else:
        module = kernel
    run(module, *arrays, sizes=sizes or None)
