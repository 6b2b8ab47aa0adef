"""The layout passes on every example: the IR still round-trips and still computes the reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from tkir.access_report import AccessReport, reports_of
from tkir.api import build_module
from tkir.ir import Module, Operation
from tkir.layout import SharedLayout
from tkir.parser import parse_module
from tkir.passes.analysis import STAGED_SWIZZLE, choose_swizzle, swizzle_problem, tile_uses
from tkir.passes.registry import load_registry
from tkir.passmanager import Options, PassManager
from tkir.printer import print_module
from tkir.tools.examples import check_interpreted, load_companion

TESTS = Path(__file__).resolve().parents[1]  # tests/

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROW_KERNELS = TESTS / "data" / "rows"  # the row kernels with every schedule knob
LAYOUT_PASSES = ["canonicalize", "infer-layouts", "select-swizzle", "bank-conflicts"]
GEMM_CONSTS = load_companion(str(EXAMPLES / "gemm.tk")).DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
ATTENTION_TILE = {"BQ": 64, "BKV": 64}  # attention_fwd.tk's auto tile at the header's old values
FRONT_END_CONSTS = {"gemm.tk": GEMM_CONSTS, "attention_fwd.tk": ATTENTION_TILE}


def _front(path: str) -> Module:
    """The front end's module: gemm.tk's and attention_fwd.tk's auto consts given (it cannot choose them)."""
    return build_module(path, FRONT_END_CONSTS.get(Path(path).name))


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", ["gemm", "attention_fwd", "layernorm", "softmax", "rotary"])
def test_layouts_round_trip_and_keep_semantics(name: str, target: str) -> None:
    path = str((ROW_KERNELS if name in ("layernorm", "softmax") else EXAMPLES) / f"{name}.tk")
    module = _front(path)
    PassManager(load_registry(), LAYOUT_PASSES).run(module, Options(target=target))
    text = print_module(module)
    assert print_module(parse_module(text)) == text
    assert "layout={kind = " in text and "swizzle=" in text or name not in ("gemm", "attention_fwd")
    companion = load_companion(path)
    results = check_interpreted(module, companion, dict(companion.CHECK_SIZES[0]), {}, seed=0)
    assert results and all(r.ok for r in results), [(r.output, r.rel_err) for r in results]


def test_passes_are_idempotent() -> None:
    module = _front(str(EXAMPLES / "attention_fwd.tk"))
    pm = PassManager(load_registry(), LAYOUT_PASSES)
    pm.run(module, Options())
    once = print_module(module)
    PassManager(load_registry(), LAYOUT_PASSES[1:]).run(module, Options())
    assert print_module(module).count("tk.convert_layout") == once.count("tk.convert_layout")


# --- the epilogue staging tile: select-swizzle's rule and bank-conflicts' report ------------------

THROUGH_TMA = ["canonicalize", "legalize-mma", "infer-layouts", "select-swizzle", "bank-conflicts", "create-tma"]


def _through_tma(name: str) -> Module:
    module = _front(str(EXAMPLES / f"{name}.tk"))
    PassManager(load_registry(), THROUGH_TMA).run(module, Options())
    return module


def _staged(module: Module) -> Operation:
    return next(op for op in module.kernel.walk() if op.name == "tk.store_staged")


@pytest.mark.parametrize("name", ["gemm", "attention_fwd"])
def test_layout_passes_rerun_after_create_tma_change_nothing(name: str) -> None:
    """The staging tile create-tma adds has the swizzle select-swizzle would choose and the access
    entries bank-conflicts would write: rerunning both leaves the IR text as it is."""
    module = _through_tma(name)
    once = print_module(module)
    assert "tk.store_staged" in once
    PassManager(load_registry(), ["select-swizzle", "bank-conflicts"]).run(module, Options())
    assert print_module(module) == once


def test_staging_tile_swizzle_and_report_come_from_the_layout_analysis() -> None:
    module = _through_tma("gemm")
    op = _staged(module)
    stage = op.operands[2]
    uses = tile_uses(module.kernel, stage, Options())
    assert [(u.access.op, u.consumer) for u in uses] == [("st.shared.b32", "staged"), ("tma", "tma")]
    t = stage.type
    assert choose_swizzle(stage.owner, t.bare(), uses, Options()) == STAGED_SWIZZLE == t.get("swizzle")
    # the staged store writes 128B-swizzled panels only; the plain layout is 8-way for its bf16 pairs
    for span in (0, 32, 64):
        assert "128B-swizzled" in swizzle_problem(SharedLayout("bf16", t.rows, t.cols, span), uses)
    assert reports_of(op.attrs) == [AccessReport("st.shared.b32", "C_stage", 1, 8),
                                    AccessReport("tma", "C_stage", 1, 1, hardware=True)]


def test_bank_conflicts_rerun_keeps_the_staging_tile_entries() -> None:
    module = _through_tma("gemm")
    op = _staged(module)
    before = reports_of(op.attrs)
    op.attrs.pop("access")
    PassManager(load_registry(), ["bank-conflicts"]).run(module, Options())
    assert reports_of(op.attrs) == before and len(before) == 2


def test_layout_passes_share_an_analysis_not_each_other() -> None:
    """select-swizzle and bank-conflicts import passes/analysis.py, never one another."""
    import ast

    passes = Path(__file__).resolve().parents[2] / "passes"
    for name, other in (("select_swizzle", "bank_conflicts"), ("bank_conflicts", "select_swizzle")):
        tree = ast.parse((passes / f"{name}.py").read_text(encoding="utf-8"))
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert "tkir.passes.analysis" in modules and f"tkir.passes.{other}" not in modules


WIDE_ROWS = """kernel wide<R=2, D=4096>(X: gl<bf16>[N, D], Y: gl<bf16>[N, D])
    grid(cdiv(N, R))
{
    reg x: rt<bf16, R, D> = X[block.x, 0]
    let xf = f32(x)
    Y[block.x, 0] = bf16(xf * row(rsqrt(row_sum(xf * xf) / D)))
}
"""


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("rows, width, parts", [(1, 4096, 4), (2, 4096, 2), (16, 1024, None), (4, 1024, None)])
def test_wide_short_rows_are_split_over_warps(tmp_path, target: str, rows: int, width: int, parts: int | None) -> None:
    """A row tile with fewer rows than warps and wide rows is spread over `parts` warps per row; the
    row reduction's vector follows it. Rows that fit (32 or 64 elements per thread) are not split."""
    import tkir
    from tkir.layout import layout_of

    src = tmp_path / "wide.tk"
    src.write_text(WIDE_ROWS, encoding="utf-8")
    k = tkir.compile(str(src), target=target, R=rows, D=width)
    tiles = [op.result.type for op in k.module.kernel.walk() if op.name == "tk.cast"]
    lay = layout_of(tiles[0])
    assert lay is not None and lay.kind == "row" and lay.parts == parts
    reduce = next(op for op in k.module.kernel.walk() if op.name == "tk.reduce")
    assert layout_of(reduce.result.type).parts == parts
    # the cross-warp combine: each row's parts read back as one vector (backend/exchange.py)
    assert (f"ld.shared.v{min(parts, 4)}.f32" in k.asm["ptx"]) if parts else True


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_short_tile_mma_is_a_located_refusal(target: str) -> None:
    import tkir
    from tkir.diagnostics import CompileError

    path = str(TESTS / "data" / "short_tile_mma.tk")
    with pytest.raises(CompileError) as e:
        tkir.compile(path, target=target)
    assert e.value.format().startswith(f"{path}:7:12: error: accumulator rt<f32, 8, 64> cannot be split")
