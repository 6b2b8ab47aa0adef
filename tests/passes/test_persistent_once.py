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


# An epilogue that reads the one-shot buffer after the K loop: examples/linear_dgrad.tk with ACT = 2 loads
# Z's tile before the loop (`once`) and reads it after, for SiLU's derivative. The release must follow that
# read, or the producer refills the buffer with the next tile's Z under it.
DGRAD = "examples/linear_dgrad.tk"
DGRAD_SIZES = dict(M=300, N=136, K=520)  # 3 x 5 tiles of 128 x 128 on 2 blocks: each block runs several
RELEASE_LAG_S = 0.02  # the consumers' pause after each release in the race test (the producer refills then)


def _dgrad():
    return tkir.compile(DGRAD, ACT=2)


def _consumer_ops(k):
    (role,) = [op for op in k.module.kernels()[0].walk() if op.name == "tk.role" and str(op.attrs["kind"]) == "consumer"]
    (tile_loop,) = [op for op in role.body.ops if op.name == "scf.for"]
    return tile_loop.body.ops


def test_release_follows_an_epilogue_read_of_the_one_shot_buffer() -> None:
    ops = _consumer_ops(_dgrad())
    names = [(op.name, op.operands[0].name if op.operands else None) for op in ops]
    read = next(i for i, op in enumerate(ops) if op.name == "tk.load" and op.operands[0].name == "zs")
    release = names.index(("pipe.arrive", "once_empty"))
    kloop = next(i for i, op in enumerate(ops) if op.name == "scf.for")
    assert kloop < read < release
    assert names.count(("pipe.arrive", "once_empty")) == 1


def test_a_release_before_the_epilogue_read_gives_wrong_results(monkeypatch) -> None:
    """The consumers pause after each release (as a slow warp would on the GPU): with the release after the
    read (what persistent emits) the results stay right; moved before the read (the placement persistent
    used to emit: right after the K loop), the producer's refill lands under the read and DX is wrong."""
    from tkir.interp import frame as interp_frame

    arrive = interp_frame.HANDLERS["pipe.arrive"]

    def lagging_arrive(op, args, frame):
        out = arrive(op, args, frame)
        if op.operands[0].name == "once_empty":
            time.sleep(RELEASE_LAG_S)
        return out

    monkeypatch.setitem(interp_frame.HANDLERS, "pipe.arrive", lagging_arrive)
    comp = load_companion(DGRAD)
    consts = {"ACT": 2}
    k = _dgrad()
    for r in check_interpreted(k.module, comp, DGRAD_SIZES, consts, seed=2, num_sms=2):
        assert r.ok, str(r)
    ops = _consumer_ops(k)
    blk = ops[0].parent
    release = next(op for op in ops if op.name == "pipe.arrive" and op.operands[0].name == "once_empty")
    kloop = next(op for op in ops if op.name == "scf.for")
    blk.remove(release)
    blk.insert_after(kloop, release)
    results = check_interpreted(k.module, comp, DGRAD_SIZES, consts, seed=2, num_sms=2)
    assert not all(r.ok for r in results)
