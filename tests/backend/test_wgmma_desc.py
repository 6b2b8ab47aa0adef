"""backend.wgmma_desc against PTX's canonical wgmma operand layouts, element by element.

The model below is HOPPER.md §2.3's table (PTX ISA §9.7.15.5.1.2; CuTe's make_gmma_desc), in bytes:
for element (i along M/N, j along K) of one k16 step, the address the tensor core reads is the
descriptor's start plus the canonical offset, then the swizzle XOR on the whole address. It must
equal where tkir.layout.SharedLayout put that element. The swizzled rows were checked on the H200
(examples/gemm.tk, attention_fwd.tk); the interleaved (span 16) rows are the `--swizzle=none` path.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkir.backend import wgmma_desc
from tkir.layout import INTERLEAVED, SharedLayout, swizzle

EB = 2            # bf16
T = 16 // EB      # elements per 16-byte core-matrix row
K16 = 16          # elements of K per wgmma k-step


def canonical_k_major(span: int, lbo: int, sbo: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """((8,m),(T,2)):((xT,SBO),(1,LBO)) for none (x = 1), ((8,m),(T,2)):((xT,SBO),(1,T)) swizzled."""
    i0, i1 = i % 8, i // 8
    j0, j1 = j % T, j // T
    if span == INTERLEAVED:
        return (i0 * T + j0) * EB + i1 * sbo + j1 * lbo
    return i0 * span + (j0 + T * j1) * EB + i1 * sbo


def canonical_mn_major(span: int, lbo: int, sbo: int, i: np.ndarray, j: np.ndarray) -> np.ndarray:
    """((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)) for none; ((T,x,m),(8,k)):((1,T,LBO),(xT,SBO)) swizzled."""
    j0, j1 = j % 8, j // 8
    if span == INTERLEAVED:
        i0, i1 = i % T, i // T
        return (i0 + j0 * T) * EB + i1 * sbo + j1 * lbo
    x = span // 16
    i0, ia, ib = i % T, (i // T) % x, i // (T * x)
    return (i0 + T * ia + j0 * x * T) * EB + ib * lbo + j1 * sbo


def hardware_address(start: int, canonical: np.ndarray, span: int) -> np.ndarray:
    return swizzle(start + canonical, span)


@pytest.mark.parametrize("span", [INTERLEAVED, 32, 64, 128])
@pytest.mark.parametrize("rows", [64, 128, 256])
def test_k_major_operand_reads_the_tile(span, rows):
    cols = 64  # K = 64 bf16 = 128 bytes: every span divides it
    lay = SharedLayout("bf16", rows, cols, span)
    i, j = np.meshgrid(np.arange(64), np.arange(K16), indexing="ij")
    for row0 in range(0, rows, 64):
        for kk in range(cols // K16):
            off, lbo, sbo = wgmma_desc.k_major(span, rows, row0, kk)
            got = hardware_address(off, canonical_k_major(span, lbo, sbo, i, j), span)
            want = lay.offset(row0 + i, (kk * K16 + j) * EB)
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("span", [INTERLEAVED, 32, 64, 128])
@pytest.mark.parametrize("cols,n", [(64, 64), (256, 256), (256, 128), (128, 64)])
def test_mn_major_operand_reads_the_tile(span, cols, n):
    rows = 64  # K = 64
    lay = SharedLayout("bf16", rows, cols, span)
    i, j = np.meshgrid(np.arange(n), np.arange(K16), indexing="ij")
    for col0 in range(0, cols, n):
        for kk in range(rows // K16):
            off, lbo, sbo = wgmma_desc.mn_major(span, EB, rows, col0, kk)
            got = hardware_address(off, canonical_mn_major(span, lbo, sbo, i, j), span)
            want = lay.offset(kk * K16 + j, (col0 + i) * EB)
            np.testing.assert_array_equal(got, want)


@given(st.sampled_from([INTERLEAVED, 32, 64, 128]), st.integers(1, 8), st.integers(1, 4))
def test_interleaved_core_matrices_are_contiguous(span, row_groups, kchunks):
    """Every 8-row x 16-byte core matrix of a tile is 128 contiguous bytes in the interleaved layout
    (what makes it readable without a swizzle), and 8 distinct 16-byte slots of 128-byte lines
    when swizzled."""
    rows, cols = 8 * row_groups, 64 * kchunks
    lay = SharedLayout("bf16", rows, cols, span)
    for g in range(row_groups):
        for c in range(0, cols * EB, 16):
            starts = lay.offset(np.arange(8 * g, 8 * g + 8), np.full(8, c))
            if span == INTERLEAVED:
                assert list(np.diff(starts)) == [16] * 7
            else:
                assert len({(s % 128) // 16 for s in starts}) == 8


def test_descriptor_fields_fit():
    """LBO and SBO are 14-bit fields in 16-byte units (HOPPER.md §2.1): the largest gemm/attention
    tiles stay inside them."""
    for span in (INTERLEAVED, 128):
        _, lbo, sbo = wgmma_desc.k_major(span, 256, 0, 0)
        _, lbo2, sbo2 = wgmma_desc.mn_major(span, EB, 64, 0, 0)
        for v in (lbo, sbo, lbo2, sbo2):
            assert v % 16 == 0 and v >> 4 < 1 << 14
    with pytest.raises(ValueError):
        wgmma_desc.mn_major(128, EB, 64, 8, 0)


# PTX ISA §9.7.15.5.1.2.2, "Matrix Descriptor Format" (HOPPER.md §2.1): bits 63-62 are the layout type,
# 0 = no swizzle (the interleaved canonical layout), 1 = 128B, 2 = 64B, 3 = 32B swizzle.
ISA_LAYOUT_TYPE = {INTERLEAVED: 0, 128: 1, 64: 2, 32: 3}


def test_layout_type_codes_are_the_isa_table() -> None:
    assert wgmma_desc.LAYOUT_CODE == ISA_LAYOUT_TYPE


def isa_descriptor(addr: int, lbo: int, sbo: int, span: int) -> int:
    """HOPPER.md §2.1's encoder: 14-bit fields of 16-byte units at bits 0, 16 and 32; base offset 0."""
    enc = lambda x: (x & 0x3FFFF) >> 4  # noqa: E731
    return enc(addr) | enc(lbo) << 16 | enc(sbo) << 32 | ISA_LAYOUT_TYPE[span] << 62


@given(st.integers(0, (1 << 18) - 16).map(lambda a: a & ~15), st.sampled_from([INTERLEAVED, 32, 64, 128]),
       st.integers(1, (1 << 14) - 1), st.integers(1, (1 << 14) - 1))
def test_descriptor_bits_are_the_isa_encoding(addr: int, span: int, lbo16: int, sbo16: int) -> None:
    """backend.rules_wgmma._desc, the LLVM it writes evaluated, equals the ISA's encoding for any shared
    address (16-byte aligned, < 256 KB), LBO, SBO and layout."""
    from llvm_eval_test_support import LLVMText

    from tkir.backend.llvm_text import LLVMWriter
    from tkir.backend.rules_wgmma import _desc

    class Cx:
        w = LLVMWriter()

    name = _desc(Cx, str(addr), lbo16 * 16, sbo16 * 16, span)
    got = LLVMText("\n".join(Cx.w.lines)).value(name, 0)
    assert got % (1 << 64) == isa_descriptor(addr, lbo16 * 16, sbo16 * 16, span)
