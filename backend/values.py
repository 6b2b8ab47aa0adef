"""Constants and lowered-value classes shared by the backend's lowering rules."""

from __future__ import annotations

from dataclasses import dataclass

from tkir.diagnostics import CompileError
from tkir.layout import RegisterLayout, layout_of
from tkir.target import REGS_PER_SM, WGMMA_M, WGMMA_MAX_N  # noqa: F401  (re-exported for the rules)
from tkir.target import WARPGROUP as THREADS_PER_WARPGROUP  # noqa: F401
from tkir.types import GlobalType, TileType, VectorType

SMEM_ALIGN = 1024           # 128B-swizzle atoms need 1024-B aligned bases (HOPPER.md §3.2)
WGMMA_K_BYTES = 32          # one wgmma k-step reads 32 bytes of K per row (HOPPER.md §0)

LLVM_TYPE = {"f32": "float", "bf16": "bfloat", "f16": "half", "i32": "i32", "u32": "i32", "i64": "i64", "i1": "i1",
             "e4m3": "i8", "e5m2": "i8"}  # fp8 elements are bytes: LLVM has no fp8 type (backend/f32.py converts)
HEADER = """target triple = "nvptx64-nvidia-cuda"
target datalayout = "e-p3:32:32-i64:64-i128:128-v16:16-v32:32-n16:32:64"
@smem = external addrspace(3) global [0 x i8], align 1024
"""


class LoweringError(CompileError):
    pass


def register_layout(t: object) -> RegisterLayout:
    """The layout infer-layouts gave a register tile or vector type; a LoweringError without one."""
    lay = layout_of(t)
    if lay is None:
        raise LoweringError(None, f"backend: {t} has no layout (run infer-layouts)")
    return lay


def slot_layout(t: TileType | VectorType) -> RegisterLayout:
    """register_layout for reading each slot's element (backend.fragments.slot_coords): an 8-bit tile in the
    wgmma A fragment is refused, since slot_coords knows the 16-bit A order only; wgmma reads that tile's
    bytes itself (rules_wgmma packs them), nothing else may."""
    lay = register_layout(t)
    if lay.kind == "wgmma_a" and t.dtype in ("e4m3", "e5m2"):
        raise LoweringError(None, f"backend: {t} in the 8-bit wgmma A fragment is read only by wgmma")
    return lay


# ---------------------------------------------------------------------------------------------
# Lowered values


@dataclass
class Smem:
    """A shared tile, stage view or barrier array: its shared-window address (i32 LLVM value)."""

    addr: str
    type: TileType | VectorType


@dataclass
class Global:
    """A global tensor parameter: its pointer (an LLVM `ptr addrspace(1)` value) and its type."""

    ptr: str
    type: GlobalType


@dataclass
class Frag:
    """A register tile or vector distributed over a role's threads: this thread's values, one per
    slot of its layout (backend.fragments.slot_coords gives each slot's element)."""

    type: TileType | VectorType
    values: list[str]
    pending: bool = False  # produced by an async mma whose wgmma group may still be in flight
    group: int | None = None  # which wgmma group (LoweringContext.groups numbering); None: wait for all

    @property
    def layout(self) -> RegisterLayout:
        return register_layout(self.type)

    @property
    def kind(self) -> str:
        return self.layout.kind


