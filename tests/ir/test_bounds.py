"""tkir/bounds.py: the edge tests of a register tile's global copy that are left out must be the
ones that cannot fail. Each proof is checked against the values the index really takes, and the
cases it must not prove (sizes, subtractions, divisions, grids of a size) are unknown."""

from __future__ import annotations

from pathlib import Path

import pytest

from tkir.bounds import dim_in_bounds, largest
from tkir.frontend import compile_file

TESTS = Path(__file__).resolve().parents[1]  # tests/


def _kernel(tmp_path, body: str, grid: str = "cdiv(N, 1)"):
    src = tmp_path / "k.tk"
    src.write_text(f"kernel k(X: gl<bf16>[N, 4096], Y: gl<bf16>[N, 4096])\n    grid({grid})\n{{\n{body}\n}}\n")
    return compile_file(str(src), {}).kernel


def _loads(kernel):
    return [op for op in kernel.walk() if op.name == "tk.load"]


@pytest.mark.parametrize("lo, hi, step", [(0, 8, 1), (1, 8, 1), (0, 8, 3), (2, 9, 2), (0, 1, 1)])
def test_largest_loop_index_is_its_last_value(tmp_path, lo: int, hi: int, step: int) -> None:
    k = _kernel(tmp_path, f"    for c in {lo} .. {hi} step {step} {{\n"
                          "        reg x: rt<bf16, 1, 512> = X[block.x, c]\n        Y[block.x, c] = x\n    }")
    (ld,) = _loads(k)
    assert largest(ld.operands[2], k) == list(range(lo, hi, step))[-1]
    assert dim_in_bounds(ld.operands[2], 512, 4096, k) == (512 * (list(range(lo, hi, step))[-1] + 1) <= 4096)


def test_block_index_of_a_constant_grid_and_sums_and_products(tmp_path) -> None:
    k = _kernel(tmp_path, "    reg x: rt<bf16, 1, 512> = X[block.x, block.y * 2 + 1]\n"
                          "    Y[block.x, block.y * 2 + 1] = x", grid="N, 4")
    (ld,) = _loads(k)
    assert largest(ld.operands[2], k) == 3 * 2 + 1       # block.y <= 3
    assert dim_in_bounds(ld.operands[2], 512, 4096, k)   # 512 * 8 <= 4096
    assert not dim_in_bounds(ld.operands[2], 1024, 4096, k)
    assert largest(ld.operands[1], k) is None            # block.x over grid N: a size
    assert dim_in_bounds(ld.operands[1], 1, "N", k)      # ... but one row of N rows
    assert not dim_in_bounds(ld.operands[1], 1, "M", k)
    assert not dim_in_bounds(ld.operands[1], 2, "N", k)  # two rows per block may pass N


@pytest.mark.parametrize("grid", ["cdiv(N, 2)", "N + 1", "N * 2", "cdiv(N, 4) * 4"])
def test_a_grid_that_is_not_the_size_proves_nothing(tmp_path, grid: str) -> None:
    k = _kernel(tmp_path, "    reg x: rt<bf16, 1, 512> = X[block.x, 0]\n    Y[block.x, 0] = x", grid=grid)
    (ld,) = _loads(k)
    assert not dim_in_bounds(ld.operands[1], 1, "N", k)
    assert dim_in_bounds(ld.operands[2], 512, 4096, k)   # column 0 of 512 inside 4096


@pytest.mark.parametrize("index", ["c - 1", "c / 2", "N / 512", "c % 4"])
def test_unknown_indices(tmp_path, index: str) -> None:
    k = _kernel(tmp_path, "    for c in 1 .. 8 {\n"
                          f"        reg x: rt<bf16, 1, 512> = X[block.x, {index}]\n        Y[block.x, 0] = x\n    }}")
    ld = _loads(k)[0]
    assert largest(ld.operands[2], k) is None and not dim_in_bounds(ld.operands[2], 512, 4096, k)


def test_a_loop_with_a_runtime_step_is_unknown(tmp_path) -> None:
    """The loop's last index needs a constant step (here N / 4096 at run time)."""
    k = _kernel(tmp_path, "    for c in 0 .. 8 step N / 4096 {\n"
                          "        reg x: rt<bf16, 1, 512> = X[block.x, c]\n        Y[block.x, c] = x\n    }")
    (ld,) = _loads(k)
    assert largest(ld.operands[2], k) is None and not dim_in_bounds(ld.operands[2], 512, 4096, k)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("rows, hi", [(1, 8), (2, 8), (1, 9)])
def test_edge_test_kernel_copies_rows_on_both_targets(target: str, rows: int, hi: int) -> None:
    """tests/filecheck/backend/src/edge-tests.tk (tests left out, rows tested, columns tested past the end):
    ptxas assembles it for both targets and the interpreter copies X to Y on a ragged N; the chunk past
    D (hi = 9) reads zeros and stores nothing."""
    import ml_dtypes
    import numpy as np

    import tkir

    k = tkir.compile(str(TESTS / "filecheck" / "backend" / "src" / "edge-tests.tk"), target=target,
                     ROWS=rows, HI=hi)
    assert k.asm["ptxas"].spill_stores == 0 and f".target {target}" in k.asm["ptx"]
    x = np.random.default_rng(14).standard_normal((5, 8192), np.float32).astype(ml_dtypes.bfloat16)
    y = np.full_like(x, np.nan)
    tkir.interpret(k, x, y)
    assert np.array_equal(x.view(np.uint16), y.view(np.uint16))
