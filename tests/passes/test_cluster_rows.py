"""`@cluster(C)` and the cluster-rows pass: the front end's and the pass's refusals, the plan
and launch description per CTA, the interpreter (a cluster kernel is the same program as its one-CTA
block), the backend's guard, the tune model, and on the GPU the row examples run as clusters of two CTAs
against their references (ragged N, the one-read and the chunked paths)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.tools.check import check_example
from tkir.tools.examples import load_companion

ROOT = Path(__file__).resolve().parents[2]
ROW_KERNELS = ROOT / "tests" / "data" / "rows"  # the row kernels with every knob (@cluster(CL) among them)
ROW = """@warpgroups(consumers=WG)
@cluster(CL)
kernel ln<ROWS=1, D=4096, WG=2, CL=2>(X: gl<bf16>[N, D], Y: gl<bf16>[N, D])
    grid(cdiv(N, ROWS))
{
    reg x: rt<bf16, ROWS, D> = X[block.x, 0]
    let xf = f32(x)
    Y[block.x, 0] = bf16(xf - row_sum(xf) / D)
}
"""


def _compile_text(tmp_path: Path, text: str, **kw: object) -> tkir.CompiledKernel:
    p = tmp_path / "k.tk"
    p.write_text(text)
    return tkir.compile(str(p), **kw)


@pytest.mark.parametrize("value, message", [("3", "expected a compile-time 1, 2, 4 or 8"),
                                            ("16", "expected a compile-time 1, 2, 4 or 8"),
                                            ("0", "expected a compile-time 1, 2, 4 or 8")])
def test_cluster_sizes_are_refused_at_the_argument(tmp_path: Path, value: str, message: str) -> None:
    with pytest.raises(CompileError, match=message) as e:
        _compile_text(tmp_path, ROW.replace("@cluster(CL)", f"@cluster({value})"))
    assert e.value.loc is not None and e.value.loc.line == 2


def test_warps_that_do_not_split_into_the_ctas_are_refused(tmp_path: Path) -> None:
    with pytest.raises(CompileError, match="4 warps to split into 8 CTAs") as e:
        _compile_text(tmp_path, ROW, WG=1, CL=8)
    assert e.value.loc is not None


def test_a_shared_tile_is_refused_at_its_op(tmp_path: Path) -> None:
    text = ROW.replace("    reg x: rt<bf16, ROWS, D> = X[block.x, 0]\n",
                       "    shared s: st<bf16, ROWS, D>\n    s = X[block.x, 0]\n    reg x: rt<bf16, ROWS, D> = s\n")
    with pytest.raises(CompileError, match="cluster-rows: @cluster\\(2\\) with a shared") as e:
        _compile_text(tmp_path, text, ROWS=16)
    assert e.value.loc is not None and e.value.loc.line >= 6


def test_a_column_reduction_is_refused(tmp_path: Path) -> None:
    text = ROW.replace("kernel ln<ROWS=1,", "kernel ln<ROWS=4,").replace(
        "    Y[block.x, 0] = bf16(xf - row_sum(xf) / D)\n", "    Y[block.x, 0] = bf16(xf - row(col_sum(xf)))\n")
    with pytest.raises(CompileError, match="a column reduction"):
        _compile_text(tmp_path, text.replace("row(col_sum(xf))", "col(col_sum(xf))"))


def test_plan_and_launch_are_per_cta(tmp_path: Path) -> None:
    k = _compile_text(tmp_path, ROW)
    launch = k.launch
    assert launch.block == (128, 1, 1) and launch.cluster == (2, 1, 1)
    assert launch.grid[0] == "2 * (cdiv(N, 1))"
    assert "threads = 128" in k.ir and "cluster = 2" in k.ir
    one = _compile_text(tmp_path, ROW, CL=1)
    assert one.launch.block == (256, 1, 1) and one.launch.cluster is None and "cluster" not in one.launch.to_json()
    assert ".reqnctapercluster" not in one.asm["ptx"] and ".reqnctapercluster 2, 1, 1" in k.asm["ptx"]


def test_sm80_runs_the_block_as_one_cta(tmp_path: Path) -> None:
    k = _compile_text(tmp_path, ROW, target="sm_80")
    assert k.launch.block == (256, 1, 1) and k.launch.cluster is None
    assert "cluster_skipped" in k.ir and "cluster" not in k.asm["ptx"]


@pytest.mark.parametrize("name, consts", [
    ("layernorm", dict(D=8192, DC=8192, ROWS=1, WG=2)),
    ("layernorm", dict(D=8192, DC=2048, ROWS=1, WG=2)),      # the chunk loops
    ("rmsnorm", dict(D=8192, DC=8192, ROWS=1, WG=4)),
    ("softmax", dict(D=8192, DC=4096, ROWS=1, WG=2)),
])
def test_the_interpreter_gives_the_one_cta_bits(name: str, consts: dict) -> None:
    path = str(ROW_KERNELS / f"{name}.tk")
    comp = load_companion(path)
    host = comp.make_inputs(np.random.default_rng(7), {"N": 3}, consts)
    outs = []
    for cl in (1, 2):
        a = [x.copy() for x in host]
        tkir.interpret(tkir.compile(path, **consts, CL=cl), *a)
        outs.append(a[-1])
    np.testing.assert_array_equal(outs[0].view(np.uint16), outs[1].view(np.uint16))
    ref = comp.reference(host, {"N": 3}, consts)["Y"]
    assert np.linalg.norm(outs[1].astype(np.float64) - ref) / np.linalg.norm(ref) < comp.TOLERANCE


def test_the_backend_refuses_other_shared_exchanges_in_a_cluster_kernel(tmp_path: Path) -> None:
    """IR text that bypassed the pass: a column reduction (its exchange goes through one CTA's scratch)
    in a kernel marked `cluster = 2`."""
    text = ROW.replace("kernel ln<ROWS=1,", "kernel ln<ROWS=4,").replace(
        "bf16(xf - row_sum(xf) / D)", "bf16(xf - col(col_sum(xf)))").replace("@cluster(CL)\n", "")
    ir = _compile_text(tmp_path, text, passes="canonicalize,infer-layouts").ir
    assert "tk.reduce" in ir and "axis = col" in ir
    marked = ir.replace("warpgroups = {consumers = 2}", "warpgroups = {consumers = 2}, cluster = 2", 1)
    assert marked != ir
    p = tmp_path / "k.tkir"
    p.write_text(marked)
    with pytest.raises(CompileError, match="cluster = 2: an exchange through one CTA's shared memory"):
        tkir.compile(str(p), passes="plan-occupancy").asm["ptx"]  # noqa: B018


def test_the_tune_model_counts_ctas(tmp_path: Path) -> None:
    from tkir.api import build_module
    from tkir.tools.tune_model import predict

    p = tmp_path / "k.tk"
    p.write_text(ROW)
    front = build_module(str(p), {"CL": 2})
    one, two = predict(front, {"N": 4096}, 4, 1), predict(front, {"N": 4096}, 4, 1, cluster=2)
    assert two.blocks == 2 * one.blocks
    assert two.bytes_per_block == pytest.approx(one.bytes_per_block / 2)


GPU_CASES = [
    ("layernorm", dict(N=1001), dict(D=16384, DC=16384, ROWS=1, WG=2, OCC=4)),
    ("layernorm", dict(N=333), dict(D=16384, DC=4096, ROWS=1, WG=2, OCC=4)),     # the chunk loops
    ("layernorm", dict(N=77), dict(D=8192, DC=8192, ROWS=1, WG=1, HOIST=1)),      # CTAs of 2 warps
    ("layernorm", dict(N=130), dict(D=8192, DC=8192, ROWS=2, WG=4)),              # 2 rows a block
    ("rmsnorm", dict(N=1001), dict(D=16384, DC=16384, ROWS=1, WG=4, OCC=4)),
    ("rmsnorm", dict(N=129), dict(D=8192, DC=4096, ROWS=1, WG=2, REREAD=1)),
    ("softmax", dict(N=999), dict(D=16384, DC=16384, ROWS=1, WG=2)),
    ("softmax", dict(N=33), dict(D=16384, DC=2048, ROWS=1, WG=4, OCC=4)),       # the online chunk loop
]


@pytest.mark.gpu
@pytest.mark.parametrize("name, sizes, consts", GPU_CASES,
                         ids=[f"{n}-" + "-".join(f"{k}{v}" for k, v in {**s, **c}.items()) for n, s, c in GPU_CASES])
def test_row_examples_as_clusters_of_two_match_reference_on_gpu(name: str, sizes: dict, consts: dict) -> None:
    result = check_example(str(ROW_KERNELS / f"{name}.tk"), sizes, {**consts, "CL": 2})
    assert result.ok, str(result)
