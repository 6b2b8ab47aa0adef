"""The backend without a GPU: PTX that ptxas assembles, and SASS with the instructions the design needs."""

from __future__ import annotations

import re

import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.facts import OccupancyPlan
from tkir.passes.registry import DEFAULT_PIPELINE


@pytest.fixture(scope="module")
def gemm() -> tkir.CompiledKernel:
    return tkir.compile("examples/gemm.tk")


def test_gemm_sass_has_hgmma_utmaldg_and_no_local_memory(gemm: tkir.CompiledKernel) -> None:
    sass = gemm.asm["sass"]
    assert sass.count("HGMMA") >= 4       # 4 k-steps of m64n256k16 per stage
    assert "UTMALDG" in sass              # TMA loads
    assert "USETMAXREG" in sass           # setmaxnreg for the roles
    assert not local_memory_ops(sass)     # no spills


def test_gemm_ptxas_clean(gemm: tkir.CompiledKernel) -> None:
    res = gemm.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0
    assert not [w for w in res.warnings if any(c in w for c in ("C7514", "C7515", "C7511"))]  # no serialization


def test_gemm_launch_description(gemm: tkir.CompiledKernel) -> None:
    launch = gemm.launch
    assert [t.swizzle for t in launch.tma] == [128, 128, 128]  # A, B and C (staged epilogue)
    assert "UTMASTG" in gemm.asm["sass"]
    assert launch.block == (384, 1, 1)
    assert launch.dynamic_smem <= 232_448
    assert "NUM_SMS" in launch.grid[0]
    plan = OccupancyPlan.of(gemm.module.kernel)
    assert plan is not None and plan.stages >= 3 and plan.role("consumer").warpgroups >= 2


@pytest.mark.parametrize("consts", [{}, {"CAUSAL": 1}, {"D": 64}])
def test_attention_sass_has_hgmma_utmaldg_and_no_local_memory(consts: dict) -> None:
    k = tkir.compile("examples/attention_fwd.tk", **consts)
    sass = k.asm["sass"]
    assert "HGMMA" in sass and "UTMALDG" in sass
    assert not local_memory_ops(sass)


@pytest.mark.parametrize("name", ["softmax", "layernorm", "rotary"])
@pytest.mark.parametrize("target", ["sm_90a"])
def test_row_kernels_assemble_without_local_memory(name: str, target: str) -> None:
    k = tkir.compile(f"{'examples' if name == 'rotary' else 'tests/data/rows'}/{name}.tk", target=target)
    sass = k.asm["sass"]
    assert "LDG.E.128" in sass and not local_memory_ops(sass)  # 16-byte global loads, no spills


def test_chunk_loop_loads_bf16_in_16_byte_chunks() -> None:
    """rmsnorm's chunk loop declares its f32 accumulator before the bf16 tile it adds: the class's chunk
    width is the bf16 tile's (8 elements, one LDG.E.128), not the accumulator's (at first 4 elements,
    which the backend copies element by element, 8 LDG.E.U16 a thread). Through ld.global.nc
    (readonly-loads) the loads are LDG.E.128.CONSTANT; the pass left out, plain LDG.E.128, no spill.
    (With it, ptxas issues the output loop's loads above its stores and spills 4 bytes at the 40
    registers plan-occupancy allows: tests/passes/test_wide_rows.py's HOISTED_SPILLS.)"""
    from tkir.api import default_pipeline

    sass = tkir.compile("tests/data/rows/rmsnorm.tk", D=8192, DC=2048, ROWS=1, WG=2).asm["sass"]
    assert "LDG.E.128.CONSTANT" in sass and "LDG.E.U16" not in sass and "LDG.E.U16.CONSTANT" not in sass
    plain = [p for p in default_pipeline() if p != "readonly-loads"]
    sass = tkir.compile("tests/data/rows/rmsnorm.tk", passes=plain, D=8192, DC=2048, ROWS=1, WG=2).asm["sass"]
    assert "LDG.E.128" in sass and "LDG.E.U16" not in sass and not local_memory_ops(sass)
    # at D = 4096 (in chunks of DC = 1024) the f32 sum comes first too: its class takes the bf16 tiles'
    # 8-element chunks, not the f32 value's 4 (12 loads a thread where 8 do)
    ir = tkir.compile("tests/data/rows/rmsnorm.tk", D=4096).ir
    assert set(re.findall(r"kind = row, warps = \d+, vec = (\d+)", ir)) == {"8"}


@pytest.mark.parametrize("name, d", [("layernorm", 16384), ("rmsnorm", 8192), ("softmax", 16384)])
def test_chunk_loops_of_2048_over_16_warps_use_8_byte_vector_accesses(name: str, d: int) -> None:
    """A 1 x 2048 bf16 chunk over 16 warps leaves 4 elements a lane: 8-byte chunks, loaded
    and stored as one LDG.E.64 / STG.E.64 each, where the backend once copied them element by element
    (LDG.E.U16). (rmsnorm at D = 16384 spills 40 bytes there: plan-occupancy does not count the eight
    chunk loads that ptxas unrolls and keeps in flight; `tkc tune` times or drops such points.)"""
    k = tkir.compile(f"tests/data/rows/{name}.tk", D=d, DC=2048, ROWS=1, WG=4)
    sass = k.asm["sass"]
    assert "LDG.E.64" in sass and "STG.E.64" in sass
    assert not re.search(r"(LDG|STG)\.E\.(U16|128)", sass) and not local_memory_ops(sass)


def test_class_of_copied_f32_and_bf16_tiles_loads_the_first_in_16_byte_chunks(tmp_path) -> None:
    """A class with an f32 tile loaded from global memory and a bf16 tile stored there: the first copied
    tile (the f32 load) decides the chunk width, so the loads are 16-byte vectors; taking the narrowest
    tile (bf16's 8 elements) would make the f32 loads 32-byte chunks, copied one element at a time."""
    src = tmp_path / "cast.tk"
    src.write_text("kernel cast(X: gl<f32>[N, 64], Y: gl<bf16>[N, 64]) grid(N / 16) {\n"
                   "    reg x: rt<f32, 16, 64> = X[block.x, 0]\n    Y[block.x, 0] = bf16(x + x)\n}\n")
    sass = tkir.compile(str(src)).asm["sass"]
    assert "LDG.E.128" in sass and not re.search(r"LDG\.E\s", sass)


def _ldg_descriptors(sass: str) -> list[str]:
    """For each LDG, in address order, whether its memory descriptor register last held the default
    descriptor (loaded from c[0x0][0x208]: 'default') or one the kernel built ('built'), from a
    straight-line scan of the writes to uniform registers (the kernels checked have no branch between)."""
    state: dict[str, str] = {}
    out = []
    for line in sass.splitlines():
        m = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?(U[A-Z0-9]*)(\.64)?[.\w]*\s+UR(\d+),", line)
        if m:
            n = int(m[3])
            kind = "default" if "c[0x0][0x208]" in line else "built"
            for r in ((n, n + 1) if m[2] else (n,)):
                state[f"UR{r}"] = kind
        d = re.search(r"LDG\.E[.\w]*\s+R\d+, desc\[(UR\d+)\]", line)
        if d:
            out.append(state.get(d[1], "unknown"))
    return out


@pytest.mark.parametrize("path, consts", [("tests/filecheck/passes/cache-policy.tk", {}),
                                          ("tests/data/rows/rmsnorm.tk", {}),
                                          ("tests/data/rows/layernorm.tk", {"D": 16384, "DC": 4096, "WG": 4, "ROWS": 1}),
                                          ("tests/data/rows/softmax.tk", {})])
def test_cache_policy_reaches_the_loads_memory_descriptor(path: str, consts: dict) -> None:
    """cache-policy: ptxas folds the createpolicy into the memory descriptor of the hinted
    loads, so every LDG uses a descriptor the kernel builds, none the default one from the constant bank;
    with the pass left out every LDG uses the default (and the kernel builds none)."""
    from tkir.api import default_pipeline

    kinds = _ldg_descriptors(tkir.compile(path, **consts).asm["sass"])
    assert kinds and set(kinds) == {"built"}, kinds
    ablated = [p for p in default_pipeline() if p != "cache-policy"]
    kinds = _ldg_descriptors(tkir.compile(path, passes=ablated, **consts).asm["sass"])
    assert kinds and set(kinds) == {"default"}, kinds


def test_cache_hints_assemble_for_sm80_with_ptx_74() -> None:
    """createpolicy and ld.global.L2::cache_hint need PTX 7.4: an sm_80 kernel with hints declares it and
    ptxas assembles it (sm_80 kernels without hints keep 7.0, and their PTX)."""
    from tkir.api import default_pipeline

    k = tkir.compile("tests/filecheck/passes/cache-policy.tk", target="sm_80")
    assert ".version 7.4" in k.asm["ptx"] and "ld.global.nc.L2::cache_hint" in k.asm["ptx"]
    assert "LDG" in k.asm["sass"] and not local_memory_ops(k.asm["sass"])
    plain = tkir.compile("tests/filecheck/passes/cache-policy.tk", target="sm_80",
                         passes=[p for p in default_pipeline() if p != "cache-policy"])
    assert ".version 7.0" in plain.asm["ptx"] and "cache_hint" not in plain.asm["ptx"]


@pytest.mark.parametrize("path, consts", [("examples/gemm.tk", {}), ("examples/attention_fwd.tk", {}),
                                          ("examples/attention_fwd.tk", {"D": 64, "CAUSAL": 1})])
def test_swizzle_none_uses_interleaved_operands(path: str, consts: dict) -> None:
    """--swizzle=none: wgmma operands in the interleaved layout (16-byte panels), filled by
    unswizzled TMA boxes 16 bytes wide; descriptors carry layout code 0 (no swizzle)."""
    k = tkir.compile(path, swizzle="none", **consts)
    for t in k.launch.tma:
        assert t.swizzle == 0
        if t.tensor in ("A", "B", "Q", "K", "V"):
            assert t.box[0] * 2 == 16, t
    sass = k.asm["sass"]
    assert "HGMMA" in sass and "UTMALDG" in sass and not local_memory_ops(sass)
    res = k.asm["ptxas"]
    assert not [w for w in res.warnings if any(c in w for c in ("C7514", "C7515", "C7511"))]
    shared = [op.result.type for op in k.module.kernel.walk() if op.name == "tk.alloc"]
    assert {int(t.get("swizzle") or 0) for t in shared} <= {0, 16}
    assert any(int(t.get("swizzle") or 0) == 16 for t in shared)


# ptxas's "wgmma.mma_async instructions are serialized due to ..." notes (C7510-C7519: non-wgmma
# instructions writing a wgmma's registers mid-pipeline, too few registers, ...): each one makes
# ptxas wait for every wgmma before the next, which undoes the overlap of the attention schedule.
_SERIALIZED = re.compile(r"\(C751\d\)")


@pytest.mark.parametrize("consts", [dict(D=128, BQ=128, BKV=128, STAGES=2), dict(D=64, BQ=192, BKV=128, STAGES=2),
                                    dict(D=256, BQ=128, BKV=64, STAGES=2)], ids=["d128", "d64", "d256"])
@pytest.mark.parametrize("causal", [0, 1])
def test_attention_bench_configs_keep_wgmma_async(consts: dict, causal: int) -> None:
    """The bench configurations of examples/attention_fwd.py under the default pipeline (overlap-mma
    and pingpong): ptxas neither serializes the wgmmas nor spills. Found while tuning the attention schedule: the carried
    bf16 P was unpacked and repacked (copies ptxas counts as writes to the in-flight p @ v's A
    registers, C7513), and 152 registers per consumer at head dim 64 were too few (C7512)."""
    k = tkir.compile("examples/attention_fwd.tk", CAUSAL=causal, **consts)
    res = k.asm["ptxas"]
    assert not [w for w in res.warnings if _SERIALIZED.search(w)], res.warnings
    assert res.spill_stores == 0 and res.spill_loads == 0
    names = {op.name for op in k.module.kernel.walk()}
    assert {"tk.mma_wait", "pipe.turn_pass"} <= names  # the schedule this guards is in place


def test_carried_bf16_fragment_reaches_wgmma_without_copies() -> None:
    """overlap-mma carries bf16(p) across the back edge as 32-bit words; the backend hands those
    words to the next p @ v as they are (LLVMWriter.pack_pair of unpack_pair's halves), instead of
    unpacking them into halves and packing them again: 64 copies per iteration at head dim 128."""
    k = tkir.compile("examples/attention_fwd.tk", D=128, BQ=128, BKV=128, STAGES=2)
    unpacks = re.findall(r"mov\.b32\s+\{%rs\d+, %rs\d+\}, %r\d+;", k.asm["ptx"])
    assert unpacks == []


@pytest.mark.parametrize("consts", [{}, {"BM": 256, "BN": 128, "BK": 64, "STAGES": 4}])
def test_sm80_gemm_producer_warps_sass(consts: dict) -> None:
    """The producer-warp schedule (plan-occupancy{producer_warps=4}, the sm_80 gemm's default before the rotated one-role loop):
    4 cp.async producer warps and 8 mma warps, 384 threads at ptxas's
    168-register cap without spills; the copies are LDGSTS with mbarrier arrivals (ARRIVES.LDGSTSBAR; the
    phase tests are shared loads in sm_80 SASS, SYNCS.PHASECHK once the driver builds it for sm_90), and the
    only block barrier follows the mbarrier init."""
    passes = ",".join("plan-occupancy{producer_warps=4}" if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE)
    k = tkir.compile("examples/gemm.tk", target="sm_80", passes=passes, **consts)
    sass = k.asm["sass"]
    assert k.launch.block == (384, 1, 1)
    assert "HMMA.16816.F32.BF16" in sass and "LDGSTS" in sass and "LDSM" in sass
    assert "ARRIVES.LDGSTSBAR" in sass
    assert "USETMAXREG" not in sass and "HGMMA" not in sass
    assert len(re.findall(r"\bBAR\.SYNC", sass)) == 1
    assert not local_memory_ops(sass)
    assert k.asm["ptxas"].registers <= 168


@pytest.mark.parametrize("wg", [2, 4])
def test_readonly_loads_are_issued_above_the_chunk_loops_stores(wg: int) -> None:
    """readonly-loads: layernorm at D = 8192 in chunks of 2048 re-reads X, W and Bias in its
    output loop, which stores Y. Through ld.global.nc ptxas issues every chunk's loads before the first
    store (the re-reads of X as LDG.E.NA...CONSTANT: .L1::no_allocate keeps them loads), with no spill;
    with plain ld.global (the pass left out) 9 loads wait behind stores, one chunk after another."""
    import re

    from tkir.api import default_pipeline

    def order(passes: list[str] | None) -> tuple[list[str], str]:
        k = tkir.compile("tests/data/rows/layernorm.tk", passes=passes, D=8192, DC=2048, ROWS=1, WG=wg, OCC=4)
        assert not local_memory_ops(k.asm["sass"])
        return re.findall(r"\b(LDG\S*|STG\S*)", k.asm["sass"]), k.asm["ptx"]

    ops, ptx = order(None)
    first_store = next(i for i, o in enumerate(ops) if o.startswith("STG"))
    assert ops[:first_store] and all(o.startswith("LDG") and o.endswith(".CONSTANT") for o in ops[:first_store])
    assert not any(o.startswith("LDG") for o in ops[first_store:])
    assert any(".NA." in o for o in ops) and "ld.global.nc.L1::no_allocate" in ptx
    ops, ptx = order([p for p in default_pipeline() if p != "readonly-loads"])
    first_store = next(i for i, o in enumerate(ops) if o.startswith("STG"))
    assert sum(o.startswith("LDG") for o in ops[first_store:]) == 9 and "ld.global.nc" not in ptx
