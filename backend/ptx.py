"""LLVM IR text -> PTX through llvmlite's NVPTX back end."""

from __future__ import annotations

from functools import cache, lru_cache

import llvmlite.binding as llvm

from tkir.diagnostics import CompileError

# PTX ISA feature level per target: wgmma/setmaxnreg need PTX 8.0 (HOPPER.md §0, §7.1).
PTX_FEATURES = {"sm_90a": "+ptx80", "sm_80": "+ptx70"}
# sm_80 kernels that wait on an mbarrier phase (the cp.async producer of `pipeline`) declare PTX 7.1:
# mbarrier.test_wait.parity needs it (PTX ISA §9.7.13.15.16); the others keep 7.0 (and their PTX).
PARITY_WAIT = "mbarrier.test_wait.parity"
PTX_FEATURES_PARITY_WAIT = "+ptx71"
# sm_80 kernels with L2 cache hints (passes/cache_policy.py: createpolicy and ld.global.L2::cache_hint)
# declare PTX 7.4, where both appear (PTX ISA, createpolicy); 7.4 also has the parity wait.
CACHE_HINT = "L2::cache_hint"
PTX_FEATURES_CACHE_HINT = "+ptx74"
# sm_80 kernels whose cp.async copies zero-fill by predicate (`cp.async ... 16, ignore_src;`,
# backend/rules_sm80.py cp_async_rows) declare PTX 7.5, where the ignore-src operand appears (PTX ISA,
# cp.async); 7.5 also has the parity wait and the cache hints. The predicate register's name marks them.
IGNORE_SRC = "ignore_src"
PTX_FEATURES_IGNORE_SRC = "+ptx75"
# sm_90a kernels that add four f32 at a time (passes/vector_red.py: red.global.add.v4.f32) declare PTX 8.1, where
# red's vector types appear (PTX ISA, "red"); the others keep 8.0 (and their PTX).
VECTOR_RED = "red.global.add.v4.f32"
PTX_FEATURES_VECTOR_RED = "+ptx81"

# The code generator's optimisation level is 3 up to this many lines of LLVM IR, 2 above. At 3 the
# NVPTX code generator runs GVN where 2 runs EarlyCSE, and llvmlite's LLVM is built with assertions:
# after every instruction GVN removes it re-scans its whole leader table (GVNPass::LeaderMap::
# verifyRemoved), which is quadratic in the function's size (400 sequential loops, 127,000 lines:
# 10.7 s at level 3, 3.8 s at 2 with the same PTX; docs/experiments.md, "Compile time"). Every
# example and conformance case is below 5,600 lines, so its PTX is level 3's; a larger kernel may
# get different (EarlyCSE instead of GVN) PTX above the threshold.
O3_MAX_LLVM_LINES = 40_000


def codegen_level(ir: str) -> int:
    """The code generator's optimisation level for the LLVM IR text `ir` (see O3_MAX_LLVM_LINES)."""
    return 3 if ir.count("\n") <= O3_MAX_LLVM_LINES else 2


@cache
def _init() -> None:
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()


@cache
def _machine(target: str, level: int = 3, features: str | None = None) -> llvm.TargetMachine:
    _init()
    t = llvm.Target.from_triple("nvptx64-nvidia-cuda")
    return t.create_target_machine(cpu=target, features=features or PTX_FEATURES[target], opt=level)


# PTX texts `llvm_to_ptx` keeps per process, keyed by the LLVM IR text and the target: the same IR lowered again in one
# process (a kernel whose passes ran again with options the backend does not read, the disk cache off) skips LLVM
PTX_KEPT = 64


@lru_cache(maxsize=PTX_KEPT)
def llvm_to_ptx(ir: str, target: str) -> str:
    """The PTX of the LLVM IR text `ir` for `target` (a CompileError if the IR does not parse or verify; a failure is
    never kept)."""
    try:
        mod = llvm.parse_assembly(ir)
        mod.verify()
    except RuntimeError as e:
        raise CompileError(None, f"backend produced invalid LLVM IR: {e}") from None
    features = None
    if target == "sm_80" and IGNORE_SRC in ir:
        features = PTX_FEATURES_IGNORE_SRC
    elif target == "sm_80" and CACHE_HINT in ir:
        features = PTX_FEATURES_CACHE_HINT
    elif target == "sm_80" and PARITY_WAIT in ir:
        features = PTX_FEATURES_PARITY_WAIT
    elif target == "sm_90a" and VECTOR_RED in ir:
        features = PTX_FEATURES_VECTOR_RED
    return _machine(target, codegen_level(ir), features).emit_assembly(mod)
