"""Reducing stores in the backend, without a GPU: `G[i, j] += t` assembles with ptxas on both targets, as a TMA
reduce-add (PTX cp.reduce.async.bulk.tensor, SASS UTMAREDG) on sm_90a, as per-element red.global.add.f32
(SASS RED/REDG ... ADD.F32) on sm_80, and without TMA on sm_90a four f32 a red.global.add.v4.f32 (vector-red;
SASS REDG.E.ADD.F32x4); never a plain global store of the reduced tensor."""

from __future__ import annotations

import re

import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops

SPLITK = "tests/data/splitk_add.tk"
ROWS = "tests/data/rows_add.tk"
COLSUM = "tests/data/colsum_add.tk"  # a vector: red.global.add on sm_90a too (TMA adds tiles)
TMA_ADD = re.compile(r"cp\.reduce\.async\.bulk\.tensor\.2d\.global\.shared::cta\.add\.tile\.bulk_group")
RED_ADD = re.compile(r"@p red\.global\.add\.f32 \[")
SASS_RED = re.compile(r"\bREDG?\.E\.ADD\.F32\b")
RED_V4 = re.compile(r"@p red\.global\.add\.v4\.f32 \[")  # vector-red (sm_90a): four f32 an instruction
SASS_RED_V4 = re.compile(r"\bREDG\.E\.ADD\.F32x4\b")


def _kernel(path: str, target: str, no_tma: bool = False) -> tkir.CompiledKernel:
    return tkir.compile(path, target=target, no_tma=no_tma)


@pytest.mark.parametrize("path", [SPLITK, ROWS])
def test_sm90a_adds_with_tma(path: str) -> None:
    k = _kernel(path, "sm_90a")
    ptx, sass = k.asm["ptx"], k.asm["sass"]
    assert TMA_ADD.search(ptx) and not RED_ADD.search(ptx)
    assert "UTMAREDG" in sass and "UTMASTG" not in sass      # the copy engine adds; nothing overwrites Y
    assert not re.search(r"\bSTG\.E", sass)                  # no plain global store at all in these kernels
    assert not local_memory_ops(sass)
    assert [t.dtype for t in k.launch.tma if t.tensor == "Y"] == ["f32"]


@pytest.mark.parametrize("path", [SPLITK, ROWS, COLSUM])
@pytest.mark.parametrize(("target", "no_tma"), [("sm_80", False), ("sm_90a", True)], ids=["sm_80", "sm_90a-no-tma"])
def test_fallback_adds_per_element(path: str, target: str, no_tma: bool) -> None:
    k = _kernel(path, target, no_tma)
    ptx, sass = k.asm["ptx"], k.asm["sass"]
    # vector-red on sm_90a: lane chunks of four f32 (rows_add, colsum_add) four at a time, accumulators per element
    v4 = target == "sm_90a" and path != SPLITK
    red, sass_red = (RED_V4, SASS_RED_V4) if v4 else (RED_ADD, SASS_RED)
    assert red.search(ptx) and not TMA_ADD.search(ptx)
    assert not re.search(r"st\.global", ptx)                  # Y is never overwritten
    assert sass_red.search(sass) and not re.search(r"\bSTG\.E", sass)
    assert "UTMAREDG" not in sass
    assert not local_memory_ops(sass)


def test_sm90a_adds_a_vector_four_at_a_time() -> None:
    """vector-red (passes/vector_red.py): the column sums' lane chunks of four f32 each added with one
    red.global.add.v4.f32 (SASS REDG.E.ADD.F32x4), in PTX 8.1; without the pass one red per element, PTX 8.0."""
    k = _kernel(COLSUM, "sm_90a")
    ptx, sass = k.asm["ptx"], k.asm["sass"]
    assert RED_V4.search(ptx) and not RED_ADD.search(ptx) and not TMA_ADD.search(ptx)
    assert ".version 8.1" in ptx
    assert SASS_RED_V4.search(sass) and not SASS_RED.search(sass) and not re.search(r"\bSTG\.E", sass)
    assert not local_memory_ops(sass)
    off = tkir.compile(COLSUM, target="sm_90a", pass_edits="-vector-red")
    assert RED_ADD.search(off.asm["ptx"]) and not RED_V4.search(off.asm["ptx"]) and ".version 8.0" in off.asm["ptx"]
    assert SASS_RED.search(off.asm["sass"])


LOOP_ADD = "tests/data/loop_add.tk"  # Y[i, j] += a @ b inside a pipelined loop


def _ptx_lines(ptx: str) -> list[str]:
    return [ln.split("//")[0].strip() for ln in ptx.splitlines() if ln.split("//")[0].strip()]


def test_reduce_add_in_a_loop_stays_in_flight() -> None:
    """In a loop, the issuing thread does not wait for the TMA reduce-add right after issuing it (that wait
    and the barrier after it were on the consumers' path every iteration): it waits for the copy engine's
    read of the staging tile right before the tile's next write, after the next iteration's mma, and once
    after the loop; the role meets only at the write's own barriers."""
    lines = _ptx_lines(tkir.compile(LOOP_ADD, target="sm_90a").asm["ptx"])
    at = [i for i, ln in enumerate(lines) if TMA_ADD.search(ln)]
    assert len(at) == 2, lines  # one box per 32-column f32 panel of the 64 x 64 tile
    after = lines[at[-1] + 1]
    assert after == "cp.async.bulk.commit_group;", after
    waits = [i for i, ln in enumerate(lines) if ln.startswith("cp.async.bulk.wait_group")]
    assert waits and all(lines[i] == "cp.async.bulk.wait_group.read 0;" for i in waits)
    end = next(i for i in range(at[-1], len(lines)) if lines[i].endswith(":") or lines[i].startswith("bra"))
    assert not any(at[-1] < i < end for i in waits), "the reduce is waited for right after its issue"
    stage_writes = [i for i, ln in enumerate(lines) if ln.startswith("st.shared.v2.b32")]
    mma_wait = max(i for i, ln in enumerate(lines) if ln.startswith("wgmma.wait_group") and i < stage_writes[0])
    assert any(mma_wait < i < stage_writes[0] for i in waits), "no read-wait before the staging tile's write"
    assert len(waits) == 2, f"expected the in-loop wait and the one after the loop, got {len(waits)}"


def test_reduce_add_in_a_loop_assembles_without_spills() -> None:
    sass = tkir.compile(LOOP_ADD, target="sm_90a").asm["sass"]
    assert "UTMAREDG" in sass and not local_memory_ops(sass)


def test_vector_red_needs_16_byte_bases_and_its_variant_adds_at_any() -> None:
    """A tensor added into four f32 at a time is listed as 16-byte aligned and among the tensors the narrower-piece
    variant copies (`unaligned`): that variant's chunks hold fewer than four f32, so it adds one element a red."""
    k = tkir.compile("examples/user/layernorm_bwd.tk", target="sm_90a", sizes={"N": 64})
    assert RED_V4.search(k.asm["ptx"])
    assert {"DW", "DB"} <= set(k.launch.unaligned)
    assert {a.tensor: a.bytes for a in k.launch.aligned}["DW"] == 16
    v = k.variant(4)
    assert RED_ADD.search(v.asm["ptx"]) and not RED_V4.search(v.asm["ptx"])
