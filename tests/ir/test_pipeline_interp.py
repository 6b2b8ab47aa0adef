"""The interpreter runs the pipelined level (producer/consumer roles meeting at mbarriers, the
persistent tile loop, staged epilogues): gemm and attention after the whole default pipeline compute
their references, and a broken barrier protocol is reported as a deadlock, not a wrong answer."""

from __future__ import annotations

import pytest

import tkir
import tkir.interp.pipeline as pipe
from tkir.interp import InterpError
from tkir.parser import parse_module
from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.printer import print_module
from tkir.tools.examples import check_interpreted, load_companion

PW4 = ",".join("plan-occupancy{producer_warps=4}" if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE)
CASES = [
    ("gemm", dict(M=256, N=512, K=192), {}),
    ("gemm", dict(M=200, N=296, K=136), {}),                       # ragged: TMA zero fill, clipped stores
    ("attention_fwd", dict(B=1, H=2, N=256), {}),
    ("attention_fwd", dict(B=1, H=1, N=256), {"D": 64, "CAUSAL": 1, "BQ": 128, "STAGES": 3}),
    # sm_80: cp.async producer warps (every producer thread arrives on full[s] per copy), roles in warps; asked
    # for (plan-occupancy{producer_warps=4}): the automatic choice is the one-role loop
    ("gemm", dict(M=200, N=296, K=136), {"target": "sm_80", "passes": PW4}),
    ("gemm", dict(M=300, N=136, K=200), {"target": "sm_80", "passes": PW4, "BM": 256, "BN": 128, "STAGES": 3}),
    ("linear", dict(M=200, N=264, K=72), {"target": "sm_80", "passes": PW4, "ACT": 2}),
]


@pytest.mark.parametrize("name, sizes, consts", CASES, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(CASES)])
def test_pipelined_ir_matches_reference(name: str, sizes: dict, consts: dict) -> None:
    path = f"examples/{name}.tk"
    k = tkir.compile(path, **consts)
    assert "tk.role" in k.ir and "pipe.wait" in k.ir  # really the warp-specialized level
    consts = {c: v for c, v in consts.items() if c not in ("target", "passes")}
    for r in check_interpreted(k.module, load_companion(path), sizes, consts):
        assert r.ok, f"{name} {sizes}: {r.output} rel_err {r.rel_err}"


def test_wrong_barrier_parity_is_a_deadlock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipe, "ROLE_TIMEOUT_S", 0.5)
    k = tkir.compile("examples/gemm.tk")
    # the producer waits for the *current* phase of `empty` instead of the completed one: it never
    # issues the first copy, and the consumers wait forever for `full`
    text = print_module(k.module).replace("pipe.wait %empty, %s, %free_phase", "pipe.wait %empty, %s, %phase")
    assert text != print_module(k.module)
    module = parse_module(text)
    comp = load_companion("examples/gemm.tk")
    with pytest.raises(InterpError, match="deadlock|never completed"):
        check_interpreted(module, comp, dict(M=128, N=256, K=64), {})


@pytest.mark.parametrize("count", [128, 512])
def test_sm80_wrong_copy_arrival_count_is_a_deadlock(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    """`full` must count every producer thread once per copy (4 warps x 32 x 2 copies = 256): half of it
    completes each stage's phase twice (the consumers' parity never comes round), twice it never."""
    monkeypatch.setattr(pipe, "ROLE_TIMEOUT_S", 0.5)
    k = tkir.compile("examples/gemm.tk", target="sm_80", passes=PW4)
    good = print_module(k.module)
    assert "%full = pipe.barriers {count = 256}" in good
    module = parse_module(good.replace("%full = pipe.barriers {count = 256}", f"%full = pipe.barriers {{count = {count}}}"))
    with pytest.raises(InterpError, match="deadlock|never completed"):
        check_interpreted(module, load_companion("examples/gemm.tk"), dict(M=128, N=256, K=192), {})


# N = 127, 128, 129: one under, at and one over a multiple of every key and query tile (64 and 128), so the
# last key block is full, one key short, or holds one key; causal and not.
BOUNDARY = [(n, causal) for n in (127, 128, 129) for causal in (0, 1)]


@pytest.mark.parametrize(("n", "causal"), BOUNDARY, ids=[f"N{n}-causal{c}" for n, c in BOUNDARY])
def test_attention_at_boundary_lengths(n: int, causal: int) -> None:
    k = tkir.compile("examples/attention_fwd.tk", D=64, CAUSAL=causal)
    for r in check_interpreted(k.module, load_companion("examples/attention_fwd.tk"), dict(B=1, H=1, N=n),
                               {"D": 64, "CAUSAL": causal}, seed=n):
        assert r.ok, f"N = {n}: {r}"


def test_a_mask_bound_off_by_one_fails_the_f32_output(monkeypatch: pytest.MonkeyPatch) -> None:
    """split-masks computing the unmasked key blocks one key too generously lets the key past the end of
    the sequence into the last row block's softmax when N = -1 (mod BKV): O moves by about 1e-3 (within
    its bf16 bound), L by more than its f32 bound."""
    import tkir.passes.split_masks as sm

    real = sm._mask_bound

    def loose(m, loop):  # noqa: ANN001, ANN202
        b = real(m, loop)
        return None if b is None else sm._Bound(b.a, b.inv, b.k + 1, b.b)

    monkeypatch.setattr(sm, "_mask_bound", loose)
    k = tkir.compile("examples/attention_fwd.tk", D=64)
    results = {r.output: r for r in check_interpreted(k.module, load_companion("examples/attention_fwd.tk"),
                                                        dict(B=1, H=1, N=127), {"D": 64}, seed=0)}
    assert not results["L"].ok and results["L"].rel_err > 1e-5, results["L"]
