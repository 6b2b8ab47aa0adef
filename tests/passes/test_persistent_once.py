"""persistent's per-tile one-shot loads (attention's q) in the interpreter: a block that runs several
tiles refills q once per tile, guarded by `once` (fill n at parity n mod 2) and `once_empty` (the
consumers' release after their K loop). The interpreter runs producer and consumers as threads, so a
missing release wait lets the producer overwrite q under the consumer (wrong O): checked to fail. (A
wrong parity deadlocks, which the interpreter reports after its 60 s role timeout: too slow for CI;
tests/backend/test_mutation_kills.py checks the parities statically.)"""

from __future__ import annotations

import time

import pytest

import tkir
from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.tools.examples import check_interpreted, load_companion

ATT = "examples/attention_fwd.tk"
CONSTS = dict(D=64, BQ=64, BKV=64, STAGES=2)
SIZES = dict(B=2, H=1, N=200)   # 4 query tiles of 64 rows per head, 8 tiles on 2 blocks
CONSUMER_LAG_S = 0.005          # per interpreted mma in the race test (it then takes about 1 s longer)


def _pipeline() -> str:
    return ",".join("persistent{linear_grids=true}" if p == "persistent" else p for p in DEFAULT_PIPELINE)


@pytest.fixture(scope="module")
def comp():
    return load_companion(ATT)


def _compile():
    return tkir.compile(ATT, passes=_pipeline(), **CONSTS)


def test_linear_grid_attention_is_persistent_and_correct(comp) -> None:
    k = _compile()
    assert "NUM_SMS" in k.launch.grid[0]
    assert "once_empty" in k.ir
    for r in check_interpreted(k.module, comp, SIZES, CONSTS, seed=1, num_sms=2):
        assert r.ok, str(r)


def _mutated(kind: str):
    k = _compile()
    for op in k.module.kernels()[0].walk():
        if kind == "no-release-wait" and op.name == "pipe.wait" and op.operands[0].name == "once_empty":
            op.parent.remove(op)
            return k
    raise AssertionError(f"no op to mutate for {kind}")


def test_producer_that_does_not_wait_for_the_release_gives_wrong_results(comp, monkeypatch) -> None:
    """The race shows only when the producer's refill of q comes before the consumers' last reads of it.
    Under a loaded machine (CI's two busy workers) the threads' interleaving hid it (one
    failure in a full local run, none alone), so every interpreted mma here first sleeps a little: the
    consumers lag behind the producer, as on the GPU, and the overwrite happens on every run."""
    from tkir.interp import frame as interp_frame

    mma = interp_frame.HANDLERS["tk.mma"]

    def slow_mma(*args, **kwargs):
        time.sleep(CONSUMER_LAG_S)
        return mma(*args, **kwargs)

    monkeypatch.setitem(interp_frame.HANDLERS, "tk.mma", slow_mma)
    k = _mutated("no-release-wait")
    results = check_interpreted(k.module, comp, SIZES, CONSTS, seed=1, num_sms=2)
    assert not all(r.ok for r in results)
