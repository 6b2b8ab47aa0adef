"""stream-k: the data-parallel + stream-K schedule, checked in the interpreter against the reference.

A small NUM_SMS makes small matrices take the stream-K path: e.g. 7 tiles on 4 blocks leave 3 tiles
whose K iterations are spread over all 4 blocks, so some blocks do pieces of two tiles and owners
add one or two partials. Every K iteration must be summed exactly once for C to match.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_runtime import FAKE_BASE, bf16  # tests/ is on sys.path under pytest

import tkir
import tkir.interp as interp
from tkir.backend.runtime import bind
from tkir.examples import check_interpreted, load_companion

GEMM = "examples/gemm.tk"
COMP = load_companion(GEMM)


def _count_partials(monkeypatch) -> dict[str, int]:
    counts = {"tk.partial_store": 0, "tk.partial_add": 0}
    for name in counts:
        fn = interp.HANDLERS[name]

        def counted(op, args, frame, fn=fn, name=name):
            counts[name] += 1
            return fn(op, args, frame)

        monkeypatch.setitem(interp.HANDLERS, name, counted)
    return counts


def with_stream_k(params: str = "") -> list[str]:
    """The default pipeline with stream-k (and its parameters) after persistent."""
    p = tkir.api.default_pipeline()
    at = p.index("persistent") + 1
    return [*p[:at], "stream-k" + (f"{{{params}}}" if params else ""), *p[at:]]


ON = with_stream_k()
SPLIT_ALWAYS = with_stream_k("min_iters=4 max_tail=100")


@pytest.mark.parametrize("sizes, num_sms, stores", [
    (dict(M=384, N=512, K=512), 4, 2),    # 6 tiles on 4 blocks: 2 tiles split in halves
    (dict(M=896, N=256, K=512), 4, 3),    # 7 tiles on 4: blocks cross tile boundaries
    (dict(M=896, N=256, K=504), 4, 3),    # ragged K (TMA zero fill in the last iteration)
    (dict(M=1000, N=296, K=696), 6, 4),   # ragged everything: 16 tiles on 6 blocks, 4 split
])
def test_stream_k_schedule_matches_reference(monkeypatch, sizes, num_sms, stores):
    k = tkir.compile(GEMM, passes=SPLIT_ALWAYS)
    assert k.module.kernel.attrs["stream_k"] == {"min_iters": 4, "max_tail_pct": 100}
    counts = _count_partials(monkeypatch)
    (res,) = check_interpreted(k.module, COMP, sizes, {}, seed=0, num_sms=num_sms)
    assert res.ok, res
    assert counts["tk.partial_store"] == stores == counts["tk.partial_add"]


def test_default_heuristic_splits_only_small_tails_with_enough_iterations(monkeypatch):
    k = tkir.compile(GEMM, passes=ON)
    assert k.module.kernel.attrs["stream_k"] == {"min_iters": 16, "max_tail_pct": 60}
    counts = _count_partials(monkeypatch)
    # 7 tiles on 4 blocks: the tail (3 of 4 blocks) is over 60% full: not split
    assert check_interpreted(k.module, COMP, dict(M=896, N=256, K=2048), {}, seed=0, num_sms=4)[0].ok
    # 6 tiles on 4: tail of 2 (50%) but 2 x 8 / 4 = 4 iterations per block < 16: not split
    assert check_interpreted(k.module, COMP, dict(M=384, N=512, K=512), {}, seed=0, num_sms=4)[0].ok
    # 4 tiles on 132 blocks: no full round, nothing to balance
    assert check_interpreted(k.module, COMP, dict(M=256, N=512, K=512), {}, seed=0)[0].ok
    assert counts == {"tk.partial_store": 0, "tk.partial_add": 0}
    # 6 tiles on 4, K = 2048: 2 x 32 / 4 = 16 iterations per block: split
    assert check_interpreted(k.module, COMP, dict(M=384, N=512, K=2048), {}, seed=0, num_sms=4)[0].ok
    assert counts == {"tk.partial_store": 2, "tk.partial_add": 2}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tm=st.integers(1, 5), tn=st.integers(1, 3), kt=st.integers(1, 9), num_sms=st.integers(1, 7),
       ragged=st.booleans())
def test_stream_k_covers_every_iteration_once(tm, tn, kt, num_sms, ragged):
    """Any tile count, block count and K (min_iters 1: split whenever there is a full round)."""
    k = tkir.compile(GEMM, passes=with_stream_k("min_iters=1 max_tail=100"))
    sizes = dict(M=128 * tm - (37 if ragged and tm > 1 else 0), N=256 * tn, K=64 * kt - (8 if ragged else 0))
    (res,) = check_interpreted(k.module, COMP, sizes, {}, seed=tm * 100 + kt, num_sms=num_sms)
    assert res.ok, (sizes, num_sms, res)


def test_owner_waiting_for_an_unwritten_partial_is_an_error():
    k = tkir.compile(GEMM, passes=SPLIT_ALWAYS)
    k.module.kernel.attrs.pop("stream_k")  # blocks now run first to last: owners come before helpers
    with pytest.raises(interp.InterpError, match="partial tile of block 1 has not been written"):
        check_interpreted(k.module, COMP, dict(M=384, N=512, K=512), {}, seed=0, num_sms=4)


def test_stream_k_is_opt_in_and_applies_to_gemm_only():
    assert "stream_k" not in tkir.compile("examples/attention_fwd.tk", passes=ON).module.kernel.attrs
    off = tkir.compile(GEMM)
    assert "stream_k" not in off.module.kernel.attrs
    assert {p["kind"] for p in off.launch["params"]} == {"tensor_map", "pointer", "scalar"}
    assert "stream_k" in tkir.compile(GEMM, passes=ON).module.kernel.attrs


def test_launch_description_and_binding_of_hidden_params():
    k = tkir.compile(GEMM, passes=ON)
    hidden = [p for p in k.launch["params"] if p["kind"] in ("workspace", "launch_count")]
    assert hidden == [
        {"name": "sk_part", "kind": "workspace", "dtype": "f32", "dims": ["NUM_SMS", 128 * 256]},
        {"name": "sk_flags", "kind": "workspace", "dtype": "i32", "dims": ["NUM_SMS", 2]},
        {"name": "sk_epoch", "kind": "launch_count", "dtype": "i32"},
    ]
    args = (bf16(512, 256), bf16(256, 512, ptr=FAKE_BASE + 2**24), bf16(512, 512, ptr=FAKE_BASE + 2**26))
    bound = bind(k.launch, args, num_sms=132)
    got = [v for kind, v in bound.params if kind in ("workspace", "launch_count")]
    assert got == [("sk_part", 132 * 32768 * 4), ("sk_flags", 132 * 2 * 4), None]


def test_ptx_orders_partials_with_release_and_acquire():
    k = tkir.compile(GEMM, passes=ON)
    ptx = k.asm["ptx"]
    assert not k.asm["ptxas"].spill_stores and not k.asm["ptxas"].warnings
    assert "st.release.gpu.global.b32" in ptx and "ld.acquire.gpu.global.b32" in ptx
    assert "fence.acq_rel.gpu" in ptx and "ld.global.cg.v4.f32" in ptx


def test_stream_k_is_not_in_the_default_pipeline_and_sets_one_block_per_sm() -> None:
    """stream-k runs only where named; after a balanced persistent grid it makes one block per SM."""
    assert "stream-k" not in tkir.api.default_pipeline()
    assert "stream_k" not in tkir.compile(GEMM).module.kernel.attrs
    balanced = tkir.compile(GEMM).module.kernel.attrs["grid"]
    assert balanced[0].startswith("cdiv(")
    assert tkir.compile(GEMM, passes=ON).module.kernel.attrs["grid"] == [balanced[0].replace(
        "cdiv(", "min(", 1).split(", cdiv(")[0] + ", NUM_SMS)"]


def test_deprecated_pass_option_spells_the_same_pipeline() -> None:
    """`pass_options={"stream_k": 1, ...}` (deprecated) still works, warns, and gives the same IR."""
    with pytest.warns(DeprecationWarning, match="stream-k"):
        old = tkir.compile(GEMM, pass_options={"stream_k": 1, "stream_k_min_iters": 4, "stream_k_max_tail": 100})
    assert old.ir == tkir.compile(GEMM, passes=SPLIT_ALWAYS).ir
    assert "stream-k{min_iters=4 max_tail=100}" in old.pipeline_spec
