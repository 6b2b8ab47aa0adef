"""Where a wgmma operand's descriptor points, for each shared layout select-swizzle can choose.

Pure arithmetic, no LLVM: backend.rules_wgmma turns these numbers into 64-bit matrix descriptors
(HOPPER.md §2.1), and tests/backend/test_wgmma_desc.py checks them against PTX's canonical layouts
(HOPPER.md §2.3, from PTX ISA §9.7.15.5.1.2 and CuTe's make_gmma_desc) element by element.

A shared tile is stored as column panels of `span` bytes (tkir/layout.py SharedLayout): rows at
`span` pitch inside a panel, panels one after another. A K-major operand (A, or B stored N x K) has
the M/N dimension as tile rows; an MN-major operand (B stored K x N) has K as tile rows.

LBO and SBO by layout (bytes):

| operand  | swizzled (32/64/128 B)                     | interleaved (span 16, no swizzle)        |
|----------|--------------------------------------------|------------------------------------------|
| K-major  | LBO unused (16); SBO = 8 rows = 8 * span   | LBO = next K core matrix = one panel     |
|          |                                            | (rows * 16); SBO = next 8 rows = 128     |
| MN-major | LBO = next M/N panel (rows * span);        | LBO = next 8 K-rows = 128;               |
|          | SBO = next 8 K-rows = 8 * span             | SBO = next M/N panel (rows * 16)         |

In the interleaved layout LBO always steps along K and SBO along M/N; in the swizzled MN-major
layout the two swap (HOPPER.md §2.4).
"""

from __future__ import annotations

from tkir.layout import INTERLEAVED

CORE_ROWS = 8             # a core matrix is 8 rows x 16 bytes (HOPPER.md §2.2)
K_STEP_BYTES = 32         # one k16 step of 16-bit data: 32 bytes of K
UNUSED_LBO = 16           # swizzled K-major: "assumed 1" (encoded field 1 = 16 bytes), as CuTe writes
LAYOUT_CODE = {INTERLEAVED: 0, 128: 1, 64: 2, 32: 3}  # descriptor bits 63-62 (HOPPER.md §2.1)


def k_major(span: int, rows: int, row0: int, kstep: int) -> tuple[int, int, int]:
    """(byte offset from the tile base, LBO, SBO) of the k16 step `kstep` of the 8-aligned rows
    starting at `row0` of a K-major operand tile with `rows` rows."""
    kbyte = kstep * K_STEP_BYTES
    offset = (kbyte // span) * rows * span + row0 * span + kbyte % span
    if span == INTERLEAVED:
        return offset, rows * span, CORE_ROWS * span
    return offset, UNUSED_LBO, CORE_ROWS * span


def mn_major(span: int, elem_bytes: int, rows: int, col0: int, kstep: int) -> tuple[int, int, int]:
    """(byte offset, LBO, SBO) of the k16 step `kstep` (tile rows kstep*16 ...) of the columns
    starting at `col0` of an MN-major operand tile (K rows x M/N columns) with `rows` rows."""
    panel_cols = span // elem_bytes
    if col0 % panel_cols:
        raise ValueError(f"column {col0} does not start a {span}-byte panel")
    k_rows = K_STEP_BYTES // elem_bytes
    panel_bytes = rows * span
    offset = kstep * k_rows * span + (col0 // panel_cols) * panel_bytes
    if span == INTERLEAVED:
        return offset, CORE_ROWS * span, panel_bytes
    return offset, panel_bytes, CORE_ROWS * span
