"""coarsen-rows on the user-kernel suite's LayerNorm backward (examples/user/layernorm_bwd.tk, one row a block,
DW and DB added into by every block): the default pipeline rewrites it into a grid-stride loop over
min(N, NUM_SMS * K) blocks whose DW and DB sums are carried in registers; DX, DW and DB stay correct in the
interpreter at N smaller and larger than that grid, in any block order; the ablation switches (the
pipeline without the pass, `@passes(-coarsen-rows)`, `coarsen-rows{blocks_per_sm=K}`) work; ptxas does not
spill the rewritten kernel; and the reasons it declines that FileCheck cannot reach from a .tk source
(hand-written IR) are given."""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir
from tkir import symexpr
from tkir.interp import NUM_SMS, interpret
from tkir.ir import Operation
from tkir.launch_bounds import streaming_blocks_per_sm
from tkir.passes.coarsen_rows import DONE_ATTR, SKIPPED_ATTR, CoarsenRows
from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.passmanager import Options
from tkir.tools.examples import check_interpreted, compare, load_companion
from tkir.types import I32

ROOT = Path(__file__).resolve().parents[2]
KERNEL = ROOT / "examples" / "user" / "layernorm_bwd.tk"
FEW_SMS = 2  # a small NUM_SMS: at N = 300 every block walks many rows


@pytest.fixture(scope="module")
def coarsened() -> tkir.CompiledKernel:
    return tkir.compile(str(KERNEL))


def _blocks(kernel: Operation, n: int, num_sms: int) -> int:
    return symexpr.evaluate(kernel.attrs["grid"][0], {"N": n, "NUM_SMS": num_sms})


def test_the_default_pipeline_coarsens_the_layernorm_backward(coarsened) -> None:
    kernel = coarsened.module.kernel
    k = kernel.attrs[DONE_ATTR]["blocks_per_sm"]
    assert kernel.attrs["grid"] == [f"min(N, NUM_SMS * {k})"], kernel.attrs["grid"]
    assert kernel.attrs[DONE_ATTR]["carried"] == 2, "DW and DB: two sums carried"
    occupancy = kernel.attrs["occupancy"]
    assert k == streaming_blocks_per_sm(kernel, occupancy["threads"]) >= occupancy["blocks_per_sm"], \
        "K is the blocks per SM the backend asks ptxas to keep resident (at least the planned count)"
    top = [op for op in kernel.body.ops if op.name == "tk.store"]
    assert [op.operands[0].name for op in top] == ["DW", "DB"], "DW and DB added once, after the loop"
    assert all(op.attrs.get("reduce") == "add" for op in top)
    loop = next(op for op in kernel.body.ops if op.name == "scf.for")
    inner = [op for op in loop.walk() if op.name == "tk.store"]
    assert [op.operands[0].name for op in inner] == ["DX"], "only DX is stored per row"


@pytest.mark.parametrize("n", [1, 7, 300])
@pytest.mark.parametrize("num_sms", [NUM_SMS, FEW_SMS])
def test_layernorm_backward_stays_correct(coarsened, n: int, num_sms: int) -> None:
    comp = load_companion(str(KERNEL))
    blocks = _blocks(coarsened.module.kernel, n, num_sms)
    assert 1 <= blocks <= n
    if num_sms == FEW_SMS and n == 300:
        assert blocks < n, "the bounded grid: blocks walk several rows"
    results = check_interpreted(coarsened.module, comp, {"N": n}, {}, seed=n, num_sms=num_sms)
    assert {r.output for r in results} == {"DX", "DW", "DB"}
    for r in results:
        assert r.ok, f"N = {n}, NUM_SMS = {num_sms} ({blocks} blocks): {r}"


def test_any_block_order(coarsened) -> None:
    """The blocks' partial sums added in a random order (as the GPU may add them) give DW and DB within the
    companion's tolerance."""
    import numpy as np

    comp = load_companion(str(KERNEL))
    inputs = comp.make_inputs(np.random.default_rng(3), {"N": 300}, {})
    expected = comp.reference(inputs, {"N": 300}, {})
    interpret(coarsened.module, *inputs, sizes={"N": 300}, num_sms=FEW_SMS, block_seed=5)
    for name in comp.OUTPUTS:
        r = compare(comp, name, inputs[comp.PARAMS.index(name)], expected[name])
        assert r.ok, str(r)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_coarsened_kernel_does_not_spill(target: str) -> None:
    k = tkir.compile(str(KERNEL), target=target)
    assert DONE_ATTR in k.module.kernel.attrs, f"coarsen-rows did not fire on {target}"
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0, (
        f"{KERNEL.name} coarsened on {target}: ptxas spills {res.spill_stores} bytes stored, {res.spill_loads} loaded")


def test_pipeline_without_the_pass_keeps_one_row_a_block() -> None:
    passes = ",".join(p for p in DEFAULT_PIPELINE if p != "coarsen-rows")
    kernel = tkir.compile(str(KERNEL), passes=passes).module.kernel
    assert kernel.attrs["grid"] == ["N"] and DONE_ATTR not in kernel.attrs
    assert not any(op.name == "scf.for" for op in kernel.body.ops)


def _with_annotation(tmp_path: Path, line: str) -> Path:
    src = tmp_path / "layernorm_bwd.tk"
    text = KERNEL.read_text()
    src.write_text(text.replace("kernel layernorm_bwd", f"{line}\nkernel layernorm_bwd", 1))
    return src


def test_passes_annotation_removes_it(tmp_path: Path) -> None:
    kernel = tkir.compile(str(_with_annotation(tmp_path, "@passes(-coarsen-rows)"))).module.kernel
    assert kernel.attrs["grid"] == ["N"] and DONE_ATTR not in kernel.attrs


def test_blocks_per_sm_parameter(tmp_path: Path) -> None:
    kernel = tkir.compile(str(_with_annotation(tmp_path, "@passes(coarsen-rows{blocks_per_sm=3})"))).module.kernel
    assert kernel.attrs["grid"] == ["min(N, NUM_SMS * 3)"]
    off = tkir.compile(str(_with_annotation(tmp_path, "@passes(coarsen-rows{blocks_per_sm=0})"))).module.kernel
    assert off.attrs["grid"] == ["N"] and DONE_ATTR not in off.attrs and SKIPPED_ATTR not in off.attrs


def test_negative_blocks_per_sm_is_refused() -> None:
    with pytest.raises(Exception, match="blocks_per_sm=-1 must be >= 0"):
        tkir.compile(str(KERNEL), passes="canonicalize,infer-layouts,coarsen-rows{blocks_per_sm=-1}")


def _before_the_pass():
    return tkir.compile(str(KERNEL), passes="canonicalize,infer-layouts").module


def test_declines_a_kernel_that_reads_the_grid_size() -> None:
    module = _before_the_pass()
    kernel = module.kernel
    kernel.body.insert(0, Operation("tk.grid_dim", [], [I32], {"dim": 0}, result_names=["nb"]))
    CoarsenRows().run(module, Options())
    assert kernel.attrs["grid"] == ["N"]
    assert "reads the grid size" in kernel.attrs[SKIPPED_ATTR]


def test_declines_a_sum_not_in_f32() -> None:
    module = _before_the_pass()
    kernel = module.kernel
    for op in kernel.walk():
        if op.name == "tk.store" and op.attrs.get("reduce") == "add":
            v = op.operands[1]
            v.type = v.type.with_dtype("bf16")
    CoarsenRows().run(module, Options())
    assert kernel.attrs["grid"] == ["N"]
    assert "adds bf16 (only f32 sums are carried" in kernel.attrs[SKIPPED_ATTR]
