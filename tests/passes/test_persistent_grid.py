"""persistent's grid choices, checked in the interpreter against the reference and in the launch."""

from __future__ import annotations

import pytest
from test_runtime import FAKE_BASE, bf16  # tests/ is on sys.path under pytest

import tkir
from tkir.backend.runtime import bind
from tkir.tools.examples import check_interpreted, load_companion

GEMM = "examples/gemm.tk"


def _balanced(flag: int) -> list[str]:
    return [f"persistent{{balanced_grid={flag}}}" if p == "persistent" else p for p in tkir.api.default_pipeline()]


@pytest.mark.parametrize("balanced", [0, 1])
@pytest.mark.parametrize("sizes, num_sms", [(dict(M=640, N=512, K=128), 4), (dict(M=896, N=256, K=192), 3)])
def test_grid_choices_compute_every_tile(balanced, sizes, num_sms):
    k = tkir.compile(GEMM, passes=_balanced(balanced))
    (res,) = check_interpreted(k.module, load_companion(GEMM), sizes, {}, seed=1, num_sms=num_sms)
    assert res.ok, res


@pytest.mark.parametrize("M, N, full, balanced", [
    (4096, 4096, 132, 128),   # 512 tiles: 4 rounds either way
    (2048, 2048, 128, 128),   # 128 tiles: one round
    (4096, 5120, 132, 128),   # 640 tiles: 5 rounds either way
    (2560, 3840, 132, 100),   # 300 tiles: 3 rounds, 100 blocks suffice
])
def test_balanced_grid_keeps_the_rounds_with_fewer_blocks(M, N, full, balanced):
    args = (bf16(M, 4096), bf16(4096, N, ptr=FAKE_BASE + 2**30), bf16(M, N, ptr=FAKE_BASE + 2**34))
    tiles = (M // 128) * (N // 256)
    for opt, want in ((0, full), (1, balanced)):
        k = tkir.compile(GEMM, passes=_balanced(opt))
        grid = bind(k.launch, args, num_sms=132).grid[0]
        rounds = -(-tiles // grid)
        assert rounds == -(-tiles // 132)
        assert grid == want


@pytest.mark.parametrize("group_m", [16, 2**31 - 1])
def test_a_group_larger_than_the_tile_rows_is_all_of_them(group_m):
    """persistent{group_m=G} above 8 is min(G, TM) at run time: G * TN tiles per group would pass 2**31 - 1
    (4294967296 became 0 in LLVM's i32 before the parameter was range-checked: a division by zero)."""
    passes = [f"persistent{{group_m={group_m}}}" if p == "persistent" else p for p in tkir.api.default_pipeline()]
    k = tkir.compile(GEMM, passes=passes)
    assert f"%group_m = arith.const {{value = {group_m}}}" in k.asm["tkir"]
    assert "%group_m.1 = arith.min %group_m, " in k.asm["tkir"]
    (res,) = check_interpreted(k.module, load_companion(GEMM), dict(M=640, N=512, K=128), {}, seed=1, num_sms=4)
    assert res.ok, res
