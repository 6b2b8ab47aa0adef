"""The backend driver: tile IR (after the pass pipeline) -> LLVM IR -> PTX, plus the launch description.

`compile_module` returns the text of every stage it produced: `llvm`, `ptx`, and `launch` (the
tkir.backend.launch.LaunchDescription, built after the lowering, with the shared memory it used).
ptxas (cubin, SASS) runs only when asked for (`assemble_artifacts`), with one exception: a kernel that asks
ptxas for more than one resident block per SM (`.minnctapersm` > 1, which caps its registers) is assembled
once to see whether ptxas spills at that cap (`avoid_spills`): spilling at B > 1 blocks chosen by the compiler
(plan-occupancy's count or the backend's two-block floor, tkir/launch_bounds.py), it is lowered again for
B - 1 blocks and that result kept (spill-free in every case measured), the decision recorded as the kernel attr
`spill_fallback = {blocks_per_sm = B, to = B - 1, spill_bytes = N}` (`tkc report` prints it). A user's
`@blocks_per_sm(B)` is kept, with a located SpillWarning, and so is code that spills at 255 registers (fewer
blocks cannot give it more; a SpillWarning says so). The kernel attr `spill_retry = false`
(plan-occupancy{spill_retry=false}, the ablation) turns the check off.
"""

from __future__ import annotations

import warnings

from tkir.backend.launch import build_launch, kernel_params
from tkir.backend.lower_llvm import lower_kernel
from tkir.backend.ptx import llvm_to_ptx
from tkir.diagnostics import TkirWarning
from tkir.facts import requested_blocks_per_sm
from tkir.ir import Module, Operation
from tkir.passmanager import Options
from tkir.target import MAX_REGS_PER_THREAD

SPILL_FALLBACK_ATTR = "spill_fallback"   # kernel attr: the blocks per SM given up because ptxas spilled
SPILL_RETRY_ATTR = "spill_retry"         # kernel attr: false turns the spill check off (the ablation)


class SpillWarning(TkirWarning):
    """ptxas spills at the blocks per SM the user asked for (`@blocks_per_sm(B)`), or at 255 registers per
    thread: the code is kept, but the spill is said."""


def compile_module(module: Module, options: Options) -> dict[str, object]:
    artifacts = _compile_once(module, options)
    return avoid_spills(module, options, artifacts)


def avoid_spills(module: Module, options: Options, artifacts: dict[str, object]) -> dict[str, object]:
    """The module docstring's spill check: `artifacts` as they are, or those of the kernel lowered again
    for one fewer block per SM when ptxas spills at the compiler's own `.minnctapersm` > 1."""
    from tkir.backend.toolchain import ToolchainError

    kernel = module.kernel
    blocks = _min_blocks(kernel, artifacts)
    if blocks <= 1 or kernel.attrs.get(SPILL_RETRY_ATTR) is False or SPILL_FALLBACK_ATTR in kernel.attrs:
        return artifacts
    try:
        stats = assemble_artifacts(artifacts["ptx"], options.target, sass=False)["ptxas"]
    except ToolchainError:  # no ptxas here (or it failed: `asm["ptxas"]` will say so when asked)
        return artifacts
    spilled = max(stats.spill_stores, stats.spill_loads)
    if not spilled:  # `asm["ptxas"]` reads this run's report (SASS, when asked for, assembles again)
        return {**artifacts, "ptxas": stats}
    if stats.registers >= MAX_REGS_PER_THREAD:  # spilling at the most a thread can have: fewer blocks cannot help
        warnings.warn(SpillWarning(f"{kernel.loc}: warning: kernel '{kernel.symbol}': ptxas spills {spilled} B per "
                                   f"thread at {stats.registers} registers, the most a thread can have: fewer "
                                   f"blocks per SM than {blocks} would not help; use smaller tiles"), stacklevel=2)
        return artifacts
    requested = requested_blocks_per_sm(kernel)
    if requested is not None and requested >= blocks:
        warnings.warn(SpillWarning(f"{kernel.loc}: warning: @blocks_per_sm({requested}) on kernel '{kernel.symbol}': "
                                   f"ptxas spills {spilled} B per thread at {stats.registers} registers "
                                   f"({blocks} blocks per SM); kept as asked (use @blocks_per_sm({blocks - 1}) "
                                   "or 0 to let the compiler choose)"), stacklevel=2)
        return artifacts
    kernel.attrs[SPILL_FALLBACK_ATTR] = {"blocks_per_sm": blocks, "to": blocks - 1, "spill_bytes": spilled,
                                         "registers": stats.registers}
    return _compile_once(module, options)


def _min_blocks(kernel: Operation, artifacts: dict[str, object]) -> int:
    """The `.minnctapersm` the lowering wrote (1 when none)."""
    from tkir.backend.lower_llvm import min_blocks_per_sm

    return min_blocks_per_sm(kernel, artifacts["launch"].block[0])


def _compile_once(module: Module, options: Options) -> dict[str, object]:
    params = kernel_params(module)  # checks the TMA descriptors first, as the launch passes them
    llvm_ir, smem = lower_kernel(module, params, options.target)
    launch = build_launch(module, options.target, dynamic_smem=smem, params=params)
    ptx = llvm_to_ptx(llvm_ir, options.target)
    return {"llvm": llvm_ir, "ptx": ptx, "launch": launch}


def assemble_artifacts(ptx: str, target: str, sass: bool = True) -> dict[str, object]:
    """cubin bytes, SASS text (unless `sass` is false) and ptxas's resource report for a PTX module."""
    from tkir.backend.toolchain import assemble, disassemble

    res = assemble(ptx, target)
    out: dict[str, object] = {"cubin": res.cubin, "ptxas": res}
    if sass:
        out["sass"] = disassemble(res.cubin)
    return out
