"""The backend driver: tile IR (after the pass pipeline) -> LLVM IR -> PTX, plus the launch description.

`compile_module` returns the text of every stage it produced: `llvm`, `ptx`, and `launch` (the
tkir.backend.launch.LaunchDescription, built after the lowering, with the shared memory it used).
ptxas (cubin, SASS) runs only when asked for (`assemble_artifacts`), with one exception: a kernel that asks
ptxas for more than one resident block per SM (`.minnctapersm` > 1, which caps its registers) is assembled
once to see whether ptxas spills at that cap (`avoid_spills`). Spilling at B > 1 blocks chosen by the compiler
(plan-occupancy's count or the backend's two-block floor, tkir/launch_bounds.py), it searches the lower counts
for the highest one at which ptxas does not spill (`retry_counts`, `avoid_spills`: at most
2 + ceil(log2(len(retry_counts))) ptxas runs in all, 7 for any block size), keeps that lowering and records the
decision as the kernel attr `spill_fallback = {blocks_per_sm = B, to = M, spill_bytes = N, registers = R,
spill_bytes_to = 0, ptxas_runs = K}` (`tkc report` prints it). Where every count down to 1 (or down to a
user's `@blocks_per_sm`) spills, the least-spilling point is kept, `spill_bytes_to` says what it still spills
and a located SpillWarning says so. A user's `@blocks_per_sm(B)` is kept, with a located SpillWarning, and so
is code that spills at 255 registers (fewer blocks cannot give it more; a SpillWarning says so). The kernel
attr `spill_retry = false` (plan-occupancy{spill_retry=false}, the ablation) turns the check off.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from tkir.backend.launch import build_launch, kernel_params
from tkir.backend.lower_llvm import lower_kernel
from tkir.backend.ptx import llvm_to_ptx
from tkir.diagnostics import TkirWarning
from tkir.facts import requested_blocks_per_sm
from tkir.ir import Module, Operation
from tkir.passmanager import Options
from tkir.target import MAX_REGS_PER_THREAD, REG_ALLOC_UNIT, REGS_PER_SM

SPILL_FALLBACK_ATTR = "spill_fallback"   # kernel attr: the blocks per SM given up because ptxas spilled
SPILL_RETRY_ATTR = "spill_retry"         # kernel attr: false turns the spill check off (the ablation)


class SpillWarning(TkirWarning):
    """ptxas spills at the blocks per SM the user asked for (`@blocks_per_sm(B)`), or at 255 registers per
    thread: the code is kept, but the spill is said."""


def compile_module(module: Module, options: Options) -> dict[str, object]:
    artifacts = _compile_once(module, options)
    return avoid_spills(module, options, artifacts)


def retry_counts(blocks: int, threads: int, floor: int = 1) -> list[int]:
    """The blocks per SM below `blocks` (down to `floor`) worth assembling after ptxas spilled at `blocks`, highest
    first: one count per register cap (65536 / (count * threads) in allocation units, at most 255) above the cap
    at `blocks`, the highest count that gives it (a lower count with the same cap gives ptxas nothing more)."""
    out: list[int] = []
    seen = {reg_cap(blocks, threads)}
    for b in range(blocks - 1, floor - 1, -1):
        cap = reg_cap(b, threads)
        if cap not in seen:
            seen.add(cap)
            out.append(b)
    return out


def reg_cap(blocks: int, threads: int) -> int:
    """The registers per thread ptxas may use at `.minnctapersm blocks` and `.maxntid threads`."""
    return min(MAX_REGS_PER_THREAD, REGS_PER_SM // (blocks * threads) // REG_ALLOC_UNIT * REG_ALLOC_UNIT)


def avoid_spills(module: Module, options: Options, artifacts: dict[str, object]) -> dict[str, object]:
    """The module docstring's spill check: `artifacts` as they are, or those of the kernel lowered again for
    the highest blocks per SM below the compiler's own `.minnctapersm` > 1 at which ptxas does not spill.

    The search assumes what ptxas does, that more registers per thread never spill more: it assembles the
    highest-cap candidate of `retry_counts` first (none spill-free below it), then bisects between the count
    known to spill and the lowest known spill-free one; every count it keeps has been assembled. ptxas runs:
    1 at B, 1 at the last candidate, ceil(log2(len(candidates))) to bisect."""
    from tkir.backend.toolchain import ToolchainError

    kernel = module.kernel
    blocks = _min_blocks(kernel, artifacts)
    if blocks <= 1 or kernel.attrs.get(SPILL_RETRY_ATTR) is False or SPILL_FALLBACK_ATTR in kernel.attrs:
        return artifacts
    try:
        stats = _ptxas(artifacts, options, kernel)
    except ToolchainError:  # no ptxas here (or it failed: `asm["ptxas"]` will say so when asked)
        return artifacts
    spilled = _spill_bytes(stats)
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
    candidates = retry_counts(blocks, artifacts["launch"].block[0], requested or 1)
    if not candidates:
        return artifacts
    tried: dict[int, tuple[dict[str, object], object]] = {blocks: (artifacts, stats)}

    def attempt(count: int) -> int:
        kernel.attrs[SPILL_FALLBACK_ATTR] = {"to": count}  # what tkir/launch_bounds.py reads while lowering
        arts = _compile_once(module, options)
        tried[count] = (arts, _ptxas(arts, options, kernel))
        return _spill_bytes(tried[count][1])

    try:
        if attempt(candidates[-1]) == 0:
            lo, hi = -1, len(candidates) - 1  # candidates[lo] spills (-1: `blocks`), candidates[hi] does not
            while hi - lo > 1:
                mid = (lo + hi) // 2
                if attempt(candidates[mid]) == 0:
                    hi = mid
                else:
                    lo = mid
            chosen = candidates[hi]
        else:  # the least-spilling count tried (the higher count on a tie)
            chosen = min(tried, key=lambda b: (_spill_bytes(tried[b][1]), -b))
    except ToolchainError:
        del kernel.attrs[SPILL_FALLBACK_ATTR]
        return artifacts
    except BaseException:  # a lowering error the first lowering did not hit: leave the kernel as it came
        del kernel.attrs[SPILL_FALLBACK_ATTR]
        raise
    arts, chosen_stats = tried[chosen]
    left = _spill_bytes(chosen_stats)
    # to == blocks_per_sm where no lower count spilled less: the attr still tells `tkc report` what was tried
    kernel.attrs[SPILL_FALLBACK_ATTR] = {"blocks_per_sm": blocks, "to": chosen, "spill_bytes": spilled,
                                         "registers": stats.registers, "spill_bytes_to": left,
                                         "ptxas_runs": len(tried)}
    if left:
        floor = requested or 1
        warnings.warn(SpillWarning(f"{kernel.loc}: warning: kernel '{kernel.symbol}': ptxas spills at every count of "
                                   f"blocks per SM from {blocks} down to {floor} ({spilled} B per thread at {blocks}, "
                                   f"{_spill_bytes(tried[candidates[-1]][1])} B at {candidates[-1]}); kept "
                                   f"{chosen}, the least spilling ({left} B at {chosen_stats.registers} registers); "
                                   "use smaller tiles"), stacklevel=2)
    return {**arts, "ptxas": chosen_stats}


def _ptxas(artifacts: dict[str, object], options: Options, kernel: Operation) -> object:
    """ptxas's report on the artifacts' PTX (the artifacts the check keeps carry it as `ptxas`, so the compiled
    kernel's `asm["ptxas"]` and `asm["cubin"]` do not assemble them again: tkir/api.py _Stages). ptxas refusing the
    register cap outright ("Insufficient registers (56) to compile instruction ...", C7602: one instruction
    needs more registers than `.minnctapersm` leaves) is reported as a spill too large to keep, so the search
    goes on to the lower counts as it does for a spill."""
    from tkir.backend.toolchain import ToolchainError

    try:
        return assemble_artifacts(artifacts["ptx"], options.target, sass=False)["ptxas"]
    except ToolchainError as e:
        if INSUFFICIENT_REGISTERS not in str(e):
            raise
        return _CapTooLow(registers=reg_cap(_min_blocks(kernel, artifacts), artifacts["launch"].block[0]))


INSUFFICIENT_REGISTERS = "Insufficient registers"  # ptxas C7602 (ptxas 12.x/13.x wording)
CAP_TOO_LOW_SPILL = 1 << 20  # what a refused cap counts as in the search: more than any real spill


@dataclass
class _CapTooLow:
    """ptxas's report where it refused the register cap: treated as the worst possible spill."""

    registers: int
    spill_stores: int = CAP_TOO_LOW_SPILL
    spill_loads: int = CAP_TOO_LOW_SPILL


def _spill_bytes(stats: object) -> int:
    """Bytes per thread ptxas spills (the larger of its spill stores and loads)."""
    return max(stats.spill_stores, stats.spill_loads)


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
