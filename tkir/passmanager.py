"""The pass manager: a pipeline of passes looked up in one registry table, each with typed parameters.

A pipeline is written as MLIR and xDSL write it (tkir.pass_pipeline):

    canonicalize,infer-layouts,persistent{group_m=16},stream-k{min_iters=8 max_tail=50}

A pass's parameters are the typed fields of its class (a dataclass; `param()` gives a default and a
help line), checked when the pipeline is built: an unknown pass, an unknown parameter or a value of
the wrong type is a located error (`<passes>:1:COL: error: ...`) that lists what is known.

The verifier runs after every pass. Dumps, stop-after and timing follow LLVM's flags:

    --print-after-all   --print-after=a,b   --stop-after=NAME   --passes=a,b,c   --time-passes

Each dump starts with `// -----// IR Dump After <name> //----- //`.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import time
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, TextIO

from tkir.diagnostics import CompileError, TkirError
from tkir.ir import Module
from tkir.pass_pipeline import PassSpec, as_specs
from tkir.printer import print_module
from tkir.scalar import I32_MAX, I32_MIN
from tkir.target import TARGETS
from tkir.verifier import VerifyError, verify


@dataclass
class Options:
    """Switches every pass may read, set from the CLI or tkir.compile keyword arguments. A setting that
    belongs to one pass is a parameter of that pass, not an option here."""

    target: str = "sm_90a"
    swizzle: str | None = None  # "none" forces unswizzled shared layouts everywhere
    no_tma: bool = False

    def __post_init__(self) -> None:
        """A value no pass would honour is an error here, not a silent default."""
        if self.target not in TARGETS:
            raise OptionError(f"target={self.target!r}: the targets are {', '.join(map(repr, TARGETS))}")
        if self.swizzle not in SWIZZLE_SWITCHES:
            raise OptionError(f"swizzle={self.swizzle!r}: the only switch is swizzle='none' (unswizzled shared "
                              "layouts everywhere); leave it out for the passes' choice")
        if self.no_tma not in (True, False):
            raise OptionError(f"no_tma={self.no_tma!r}: True or False")


SWIZZLE_SWITCHES = (None, "none")  # Options.swizzle: the passes choose (None), or unswizzled everywhere


class OptionError(TkirError, ValueError):
    """An Options value (tkir.compile's target=, swizzle=, no_tma=) that no pass would honour."""


def param(default: Any, help: str) -> Any:
    """A pass parameter: a dataclass field with its default and one line of help (`tkc passes`)."""
    return dataclasses.field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class ParamInfo:
    name: str
    type: type
    default: Any
    help: str

    @property
    def type_name(self) -> str:
        return self.type.__name__

    def describe(self) -> str:
        default = _format_value(self.default) if self.default is not None else "unset"
        return f"{self.name} ({self.type_name}, default {default})" + (f": {self.help}" if self.help else "")


_PARAM_TYPES = (bool, int, float, str)


class Pass:
    """Base class: subclasses set `name` (kebab-case) and implement `run`. Annotated class attributes
    are the pass's parameters (the subclass is made a dataclass): `group_m: int = param(8, "...")`."""

    name: ClassVar[str] = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__dataclass_fields__" not in cls.__dict__:
            dataclass(cls)

    def run(self, module: Module, options: Options) -> None:
        raise NotImplementedError

    @classmethod
    def params(cls) -> list[ParamInfo]:
        """The pass's parameters, in declaration order."""
        hints = typing.get_type_hints(cls)
        out = []
        for f in dataclasses.fields(cls):
            out.append(ParamInfo(f.name, _param_type(cls, f.name, hints[f.name]), f.default,
                                 str(f.metadata.get("help", ""))))
        return out

    @classmethod
    def from_spec(cls, spec: PassSpec) -> Pass:
        """An instance with the parameters a pipeline entry gives, converted to their declared types."""
        known = {p.name: p for p in cls.params()}
        values: dict[str, Any] = {}
        for key, text in spec.params.items():
            info = known.get(key)
            if info is None:
                hint = (f"known parameters of '{cls.name}': " + "; ".join(p.describe() for p in known.values())
                        if known else f"'{cls.name}' has no parameters")
                raise PassError(spec.loc(key), f"unknown parameter '{key}' of pass '{cls.name}'",
                                source=spec.source or None, hint=hint)
            values[key] = _convert(info, text, spec)
        try:
            return cls(**values)
        except ParamError as e:  # a value of the right type that the pass cannot use
            raise PassError(spec.loc(e.param), e.message, source=spec.source or None,
                            hint=known[e.param].describe() if e.param in known else None) from None

    def spec(self) -> str:
        """This pass as a pipeline entry: its name and the parameters that differ from their defaults."""
        changed = [f"{p.name}={_format_value(getattr(self, p.name))}" for p in self.params()
                   if getattr(self, p.name) != p.default]
        return self.name + ("{" + " ".join(changed) + "}" if changed else "")


class ParamError(CompileError):
    """A pass parameter's value that its pass cannot use (raised from the pass's __post_init__);
    from_spec locates it at the parameter in the pipeline text."""

    def __init__(self, param: str, message: str):
        super().__init__(None, message)
        self.param = param


def _param_type(cls: type, name: str, hint: Any) -> type:
    """The scalar type of a parameter annotated `T` or `T | None` (T one of bool, int, float, str)."""
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    if len(args) != 1 or args[0] not in _PARAM_TYPES:
        raise TypeError(f"pass '{getattr(cls, 'name', cls.__name__)}': parameter '{name}' must be bool, int, "
                        f"float or str (optionally | None), not {hint}")
    return args[0]


def _format_value(v: Any) -> str:
    return ("true" if v else "false") if isinstance(v, bool) else str(v)


_BOOL_WORDS = {"true": True, "1": True, "false": False, "0": False}


def _convert(info: ParamInfo, text: str, spec: PassSpec) -> Any:
    try:
        if info.type is bool:
            return _BOOL_WORDS[text.lower()]
        if info.type is int:
            value = int(text, 0)
            if not I32_MIN <= value <= I32_MAX:  # every int parameter becomes an i32 (or smaller) in the kernel
                raise PassError(spec.loc(info.name), f"parameter '{info.name}' of pass '{spec.name}' is {value}: "
                                                     f"out of the range of i32 ({I32_MIN} .. {I32_MAX})",
                                source=spec.source or None, hint=info.describe())
            return value
        return info.type(text)
    except (KeyError, ValueError):
        article = "an" if info.type_name[0] in "aeiou" else "a"
        raise PassError(spec.loc(info.name), f"parameter '{info.name}' of pass '{spec.name}' is {article} "
                                             f"{info.type_name}, not '{text}'", source=spec.source or None,
                        hint=info.describe()) from None


class PassError(CompileError):
    pass


def dump_header(name: str) -> str:
    return f"// -----// IR Dump After {name} //----- //"


@dataclass
class PipelineConfig:
    print_after_all: bool = False
    print_after: tuple[str, ...] = ()
    stop_after: str | None = None
    time_passes: bool = False
    # keep the IR text after every pass (PassManager.snapshots, CompiledKernel.ir_after); printing it is
    # a quarter of a long kernel's pass time, so `tkc` (which never reads it back) turns it off
    keep_snapshots: bool = True


class PassManager:
    """Builds the pipeline's passes (checking names and parameters) and runs them, verifying after each."""

    def __init__(self, registry: dict[str, type[Pass]], pipeline: str | list[str] | list[PassSpec]):
        self.registry = registry
        specs = as_specs(pipeline)
        for spec in specs:
            if spec.name not in registry:
                raise PassError(spec.loc(), f"unknown pass '{spec.name}'", source=spec.source or None,
                                hint="known passes: " + ", ".join(sorted(registry)))
        self.passes: list[Pass] = [registry[s.name].from_spec(s) for s in specs]
        self.pipeline = [p.name for p in self.passes]
        self.snapshots: dict[str, str] = {}
        self.timings: list[tuple[str, float]] = []

    def spec(self) -> str:
        """The pipeline as text, parameters included (what `--passes=` takes back)."""
        return ",".join(p.spec() for p in self.passes)

    def run(self, module: Module, options: Options, config: PipelineConfig | None = None,
            out: TextIO | None = None) -> Module:
        config = config or PipelineConfig()
        out = out or sys.stdout
        for bad in [n for n in (*config.print_after, config.stop_after) if n and n not in self.registry]:
            raise PassError(None, f"unknown pass '{bad}'", hint="known: " + ", ".join(sorted(self.registry)))
        for p in self.passes:
            name = p.name
            t0 = time.perf_counter()
            try:
                p.run(module, options)
            except CompileError as e:  # raised without a place (a malformed attribute): at the kernel
                kernels = module.kernels()
                if e.loc is None and kernels:
                    e.loc = kernels[0].loc
                raise
            except TkirError:
                raise
            except Exception as e:  # a researcher's pass (--load-pass) that crashes: say which, no traceback
                if type(p).__module__.startswith("tkir."):
                    raise  # a crash in a built-in pass is a compiler bug: keep the traceback
                raise PassError(None, f"pass '{name}' ({type(p).__module__}) raised {type(e).__name__}: {e}",
                                hint="the pass was loaded with --load-pass; tkir.compile(..., load_passes=[FILE]) "
                                     "raises this error with the pass's exception as its cause") from e
            self.timings.append((name, time.perf_counter() - t0))
            try:
                verify(module)
            except VerifyError as e:
                e.message = f"after pass '{name}': {e.message}"
                raise
            dump = config.print_after_all or name in config.print_after
            if config.keep_snapshots or dump:
                text = print_module(module)
                if config.keep_snapshots:
                    self.snapshots[name] = text
                if dump:
                    out.write(dump_header(name) + "\n" + text + "\n")
            if name == config.stop_after:
                break
        return module

    def timing_report(self) -> str:
        total = sum(t for _, t in self.timings) or 1e-12
        lines = ["===-------------------------------------------------------------------------===",
                 "                          ... Pass execution timing report ...",
                 "===-------------------------------------------------------------------------===",
                 f"  Total Execution Time: {total:.4f} seconds", "",
                 "   ---Wall Time---  --- Name ---"]
        for name, t in self.timings:
            lines.append(f"   {t:.4f} ({100 * t / total:5.1f}%)  {name}")
        lines.append(f"   {total:.4f} (100.0%)  Total")
        return "\n".join(lines)


def load_pass_file(path: str, registry: dict[str, type[Pass]]) -> list[str]:
    """Import a researcher's Python file and register every Pass subclass it defines."""
    p = Path(path)
    if not p.is_file():
        raise PassError(None, f"--load-pass: no such file '{path}'")
    spec = importlib.util.spec_from_file_location(f"tkir_user_pass_{p.stem}", p)
    if spec is None or spec.loader is None:  # Python imports only its own suffixes
        raise PassError(None, f"--load-pass: '{path}' is not a Python file (name it FILE.py)")
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # a user's file: report, don't crash
        raise PassError(None, f"--load-pass: importing '{path}' failed: {type(e).__name__}: {e}") from None
    added = []
    for obj in vars(mod).values():
        if isinstance(obj, type) and issubclass(obj, Pass) and obj is not Pass and obj.name:
            registry[obj.name] = obj
            added.append(obj.name)
    if not added:
        raise PassError(None, f"--load-pass: '{path}' defines no Pass subclass with a name")
    return added


PassFactory = Callable[[], Pass]
