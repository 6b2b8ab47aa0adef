"""The pass manager: a pipeline is a list of pass names looked up in one registry table.

The verifier runs after every pass. Dumps, stop-after and timing follow LLVM's flags:

    --print-after-all   --print-after=a,b   --stop-after=NAME   --passes=a,b,c   --time-passes

Each dump starts with `// -----// IR Dump After <name> //----- //`.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from tkir.diagnostics import CompileError
from tkir.ir import Module
from tkir.printer import print_module
from tkir.verifier import VerifyError, verify


@dataclass
class Options:
    """Switches that passes read (set from the CLI or tkir.compile keyword arguments)."""

    target: str = "sm_90a"
    swizzle: str | None = None  # "none" forces unswizzled shared layouts everywhere
    no_tma: bool = False
    extra: dict[str, object] = field(default_factory=dict)


class Pass:
    """Base class: subclasses set `name` (kebab-case) and implement `run`."""

    name: str = ""

    def run(self, module: Module, options: Options) -> None:
        raise NotImplementedError


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


class PassManager:
    def __init__(self, registry: dict[str, type[Pass]], pipeline: list[str]):
        self.registry = registry
        unknown = [p for p in pipeline if p not in registry]
        if unknown:
            raise PassError(None, f"unknown pass '{unknown[0]}'",
                            hint="known passes: " + ", ".join(sorted(registry)))
        self.pipeline = list(pipeline)
        self.snapshots: dict[str, str] = {}
        self.timings: list[tuple[str, float]] = []

    def run(self, module: Module, options: Options, config: PipelineConfig | None = None,
            out: TextIO | None = None) -> Module:
        config = config or PipelineConfig()
        out = out or sys.stdout
        for bad in [n for n in (*config.print_after, config.stop_after) if n and n not in self.registry]:
            raise PassError(None, f"unknown pass '{bad}'", hint="known: " + ", ".join(sorted(self.registry)))
        for name in self.pipeline:
            t0 = time.perf_counter()
            self.registry[name]().run(module, options)
            self.timings.append((name, time.perf_counter() - t0))
            try:
                verify(module)
            except VerifyError as e:
                e.message = f"after pass '{name}': {e.message}"
                raise
            text = print_module(module)
            self.snapshots[name] = text
            if config.print_after_all or name in config.print_after:
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
    assert spec and spec.loader
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
