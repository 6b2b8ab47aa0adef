"""The backend without a GPU: PTX that ptxas assembles, and SASS with the instructions the design needs."""

from __future__ import annotations

import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.facts import OccupancyPlan


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
    assert [t["swizzle"] for t in launch["tma"]] == [128, 128, 128]  # A, B and C (staged epilogue)
    assert "UTMASTG" in gemm.asm["sass"]
    assert launch["block"] == [384, 1, 1]
    assert launch["dynamic_smem"] <= 232_448
    assert "NUM_SMS" in launch["grid"][0]
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
    k = tkir.compile(f"examples/{name}.tk", target=target)
    sass = k.asm["sass"]
    assert "LDG.E.128" in sass and not local_memory_ops(sass)  # 16-byte global loads, no spills


@pytest.mark.parametrize("path, consts", [("examples/gemm.tk", {}), ("examples/attention_fwd.tk", {}),
                                          ("examples/attention_fwd.tk", {"D": 64, "CAUSAL": 1})])
def test_swizzle_none_uses_interleaved_operands(path: str, consts: dict) -> None:
    """--swizzle=none: wgmma operands in the interleaved layout (16-byte panels), filled by
    unswizzled TMA boxes 16 bytes wide; descriptors carry layout code 0 (no swizzle)."""
    k = tkir.compile(path, swizzle="none", **consts)
    for t in k.launch["tma"]:
        assert t["swizzle"] == 0
        if t["tensor"] in ("A", "B", "Q", "K", "V"):
            assert t["box"][0] * 2 == 16, t
    sass = k.asm["sass"]
    assert "HGMMA" in sass and "UTMALDG" in sass and not local_memory_ops(sass)
    res = k.asm["ptxas"]
    assert not [w for w in res.warnings if any(c in w for c in ("C7514", "C7515", "C7511"))]
    shared = [op.result.type for op in k.module.kernel.walk() if op.name == "tk.alloc"]
    assert {int(t.get("swizzle") or 0) for t in shared} <= {0, 16}
    assert any(int(t.get("swizzle") or 0) == 16 for t in shared)
