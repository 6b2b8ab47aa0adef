"""persistent on a 3-D grid whose tiles differ in work (causal attention: query tile x runs x + 1 key
blocks, a count computed outside the roles from block.x), asked for with `@persistent(1)`: the roles
recompute the count per tile, the grid is whole x-rows of tiles and round r gives block pid the tile
(pid + r) mod (the round's tiles). Checked in the interpreter against the reference (outputs start
NaN, so a tile no block visits fails), for grids of one, two and several blocks per x-row and a last
round that is partial; and the schedule's balance, read off the IR the pass wrote."""

from __future__ import annotations

import pytest

import tkir
from tkir.symexpr import evaluate
from tkir.tools.examples import check_interpreted, load_companion

ATT = "examples/attention_fwd.tk"
CONSTS = dict(D=64, BQ=64, BKV=64, STAGES=2, CAUSAL=1, PERSIST=1)


@pytest.fixture(scope="module")
def comp():
    return load_companion(ATT)


@pytest.fixture(scope="module")
def kernel():
    return tkir.compile(ATT, **CONSTS)


def test_causal_attention_is_made_persistent_with_the_rotated_order(kernel) -> None:
    assert kernel.module.kernel.attrs["tile_order"] == {"rotated": 1}
    assert "persistent_skipped" not in kernel.module.kernel.attrs
    assert "NUM_SMS" in kernel.launch.grid[0]


@pytest.mark.parametrize("sizes, num_sms", [
    (dict(B=2, H=3, N=300), 3),     # 5 x-tiles per head: one x-row (5 blocks, more than the SMs), 6 rounds
    (dict(B=2, H=3, N=300), 11),    # two x-rows (10 blocks): 3 rounds of 2 heads
    (dict(B=1, H=5, N=200), 16),    # 4 x-tiles: 16 blocks = 4 heads a round, the second round 1 head
    (dict(B=1, H=1, N=64), 132),    # one tile
])
def test_rotated_causal_attention_matches_the_reference(kernel, comp, sizes: dict, num_sms: int) -> None:
    for r in check_interpreted(kernel.module, comp, sizes, CONSTS, seed=3, num_sms=num_sms):
        assert r.ok, f"{sizes} num_sms={num_sms}: {r}"


def test_every_block_gets_every_x_in_turn(kernel) -> None:
    """The grid expression and the order, evaluated for B = H = 16, N = 768 with 64-row tiles (12 x-tiles
    a head): 132 SMs -> 11 x-rows = 132 blocks, and over the rounds each block's x goes up by one per
    round, so the key blocks per block differ by at most one x-row's spread over 12 rounds."""
    sizes = dict(B=16, H=16, N=768, NUM_SMS=132)
    grid = evaluate(kernel.launch.grid[0], sizes)
    xs, tiles = 12, 12 * 16 * 16
    assert grid == 132
    work = [0] * grid
    seen = set()
    for t0 in range(grid):
        for t in range(t0, tiles, grid):  # the pass's formula (tests/filecheck/passes/persistent-requested.tk checks the IR)
            rnd, start = t // grid, (t // grid) * grid
            tile = start + (t0 + rnd) % min(grid, tiles - start)
            seen.add(tile)
            work[t0] += tile % xs + 1
    assert seen == set(range(tiles))
    assert max(work) - min(work) <= xs
