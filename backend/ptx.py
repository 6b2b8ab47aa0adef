"""LLVM IR text -> PTX through llvmlite's NVPTX back end."""

from __future__ import annotations

from functools import cache

import llvmlite.binding as llvm

from tkir.diagnostics import CompileError

# PTX ISA feature level per target: wgmma/setmaxnreg need PTX 8.0 (HOPPER.md §0, §7.1).
PTX_FEATURES = {"sm_90a": "+ptx80", "sm_80": "+ptx70"}


@cache
def _init() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@cache
def _machine(target: str) -> llvm.TargetMachine:
    _init()
    t = llvm.Target.from_triple("nvptx64-nvidia-cuda")
    return t.create_target_machine(cpu=target, features=PTX_FEATURES[target], opt=3)


def llvm_to_ptx(ir: str, target: str) -> str:
    try:
        mod = llvm.parse_assembly(ir)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(None, f"backend produced invalid LLVM IR: {e}") from None
    return _machine(target).emit_assembly(mod)
