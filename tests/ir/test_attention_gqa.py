"""Grouped-query attention (-D G: K and V with H / G heads, query head h reads K/V head h / G) through
attention_fwd.tk and the three backward kernels in the reference interpreter, on sm_90a and sm_80.

* Forward and whole backward at G = 1, 2, 4, ragged N (1, 63, 65, 130), causal and not, against the float64
  forward and backward (dK, dV of a K/V head summed over its G query heads); dK, dV have K's shape.
* The dK/dV loop over (query head, query block) pairs stays top-level and pipelined on sm_90a (a producer
  role and ring buffers), and G = 4 assembles on both targets (sm_90a without spills or local memory).
* H not a multiple of G is refused before the kernel runs, with the requirement's message.
* Mutants of the grouping (the K/V head, the query head of a pair, the pair count) fail.
"""

from __future__ import annotations

import functools
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.interp import interpret
from tkir.interp.frame import InterpError
from tkir.tools.examples import load_companion, max_error, relative_error

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TARGETS = ("sm_90a", "sm_80")
GRAD_TOL = 2e-2  # the companions' bound: bf16 outputs from bf16 products of P and dS
O_TOL = 2e-2  # attention_fwd.py's bound for O (bf16)
L_TOL = 1e-5  # attention_fwd.py's bound for L (f32)
ZERO_GRAD_TOL = 1e-4  # at N = 1 dQ and dK are rounding noise (tests/ir/test_attention_bwd.py)
D = 64
# (G, H, N): each G with a ragged N; H = 4 query heads (one K/V head at G = 4), two batches at N = 63
CASES = [(1, 2, 65), (2, 4, 1), (2, 4, 130), (4, 4, 63)]


@functools.cache
def _prep():  # noqa: ANN202 - a companion module
    return load_companion(str(EXAMPLES / "attention_bwd_prep.tk"))


@functools.cache
def _compile(name: str, target: str, **consts: int | str) -> tkir.CompiledKernel:
    return tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target, **consts)


def _kernels(target: str, causal: int, g: int) -> dict[str, tkir.CompiledKernel]:
    """The four kernels as examples/attention_autograd.py compiles them (G only where > 1)."""
    gqa = {"G": g} if g > 1 else {}
    return {"fwd": _compile("attention_fwd", target, D=D, CAUSAL=causal, **gqa),
            "prep": _compile("attention_bwd_prep", target, D=D),
            "dkdv": _compile("attention_bwd_dkdv", target, D=D, CAUSAL=causal, BQ="auto", **gqa),
            "dq": _compile("attention_bwd_dq", target, D=D, CAUSAL=causal, **gqa)}


def _run(ks: dict, q: np.ndarray, k: np.ndarray, v: np.ndarray, do: np.ndarray) -> dict[str, np.ndarray]:
    """O and L from the forward, then Delta, dK, dV, dQ from the backward, in the interpreter."""
    b, h, n, _ = q.shape
    o = np.full(q.shape, np.nan, q.dtype)
    lse = np.full((b, h, n), np.nan, np.float32)
    interpret(ks["fwd"].module, q, k, v, o, lse)
    delta = np.full((b, h, n), np.nan, np.float32)
    interpret(ks["prep"].module, o, do, delta)
    dk, dv = np.full(k.shape, np.nan, k.dtype), np.full(v.shape, np.nan, v.dtype)
    interpret(ks["dkdv"].module, q, k, v, do, lse, delta, dk, dv)
    dq = np.full(q.shape, np.nan, q.dtype)
    interpret(ks["dq"].module, q, k, v, do, lse, delta, dq)
    return {"O": o, "L": lse, "DQ": dq, "DK": dk, "DV": dv}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("g, h, n", CASES, ids=[f"G{g}-H{h}-N{n}" for g, h, n in CASES])
def test_forward_and_backward_match_float64(g: int, h: int, n: int, causal: int, target: str) -> None:
    prep = _prep()
    sizes = dict(B=2 if n == 63 else 1, H=h, N=n)
    p = prep.problem(np.random.default_rng(100 * g + n + causal), sizes, D, bool(causal), g)
    assert p["K"].shape[1] == h // g
    got = _run(_kernels(target, causal, g), p["Q"], p["K"], p["V"], p["DO"])
    o64, l64 = prep.forward64(p["Q"], p["K"], p["V"], bool(causal))
    assert relative_error(got["O"], o64) < O_TOL and relative_error(got["L"], l64) < L_TOL
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], got["L"],
                           (p["DO"].astype(np.float64) * got["O"].astype(np.float64)).sum(-1), bool(causal))
    assert got["DK"].shape == got["DV"].shape == p["K"].shape
    assert relative_error(got["DV"], want["DV"]) < GRAD_TOL and max_error(got["DV"], want["DV"]) < GRAD_TOL
    for name in ("DQ", "DK"):
        out = got[name].astype(np.float64)
        assert np.isfinite(out).all(), name
        if n == 1:  # one key: P = 1 whatever the score, so dQ = dK = 0 in exact arithmetic
            assert np.abs(out).max() <= ZERO_GRAD_TOL * np.abs(want["DV"]).max(), (name, np.abs(out).max())
        else:
            assert relative_error(out, want[name]) < GRAD_TOL, (name, relative_error(out, want[name]))
            assert max_error(out, want[name]) < GRAD_TOL, (name, max_error(out, want[name]))


def test_the_pair_loop_stays_pipelined() -> None:
    """sm_90a at G = 4: the one loop over (query head, query block) pairs has a producer role and ring buffers
    (a loop nested in a run-time loop would not be pipelined)."""
    ir = _compile("attention_bwd_dkdv", "sm_90a", D=D, CAUSAL=1, BQ="auto", G=4).ir
    assert "tk.role" in ir and "pipe.wait" in ir and "pipe.arrive" in ir
    assert ir.count("scf.for") == _compile("attention_bwd_dkdv", "sm_90a", D=D, CAUSAL=1, BQ="auto").ir.count("scf.for")


@pytest.mark.parametrize("target", TARGETS)
def test_gqa_assembles(target: str) -> None:
    for name in ("attention_fwd", "attention_bwd_dkdv", "attention_bwd_dq"):
        consts = {"D": 128, "CAUSAL": 1, "G": 4} | ({"BQ": "auto"} if name == "attention_bwd_dkdv" else {})
        k = _compile(name, target, **consts)
        res = k.asm["ptxas"]
        assert res.registers > 0, name
        if target == "sm_90a":
            assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, (name, res)
            assert not local_memory_ops(k.asm["sass"]), name


def test_heads_not_a_multiple_of_g_are_refused() -> None:
    bf16 = ml_dtypes.bfloat16
    ks = _kernels("sm_90a", 0, 4)
    q, kv = np.zeros((1, 6, 64, D), bf16), np.zeros((1, 1, 64, D), bf16)
    lse = np.zeros((1, 6, 64), np.float32)
    with pytest.raises(InterpError, match=r"argument 'K' dim 1, 'V' dim 1 are H / 4: H must be a multiple of 4 "
                                          r"\(H % 4 is 2, must be 0; H = 6\)"):
        interpret(ks["fwd"].module, q, kv, kv, np.zeros_like(q), lse)
    with pytest.raises(InterpError, match=r"H must be a multiple of 4"):
        interpret(ks["dkdv"].module, q, kv, kv, q, lse, lse, kv.copy(), kv.copy())
    with pytest.raises(InterpError, match=r"parameter K: .* dim 1 is H / 4 = 2, array has 1"):
        interpret(ks["dq"].module, *(np.zeros((1, 8, 64, D), bf16),), kv, kv, np.zeros((1, 8, 64, D), bf16),
                  np.zeros((1, 8, 64), np.float32), np.zeros((1, 8, 64), np.float32), np.zeros((1, 8, 64, D), bf16))


MUTANTS = [
    # the forward reads K/V head h % G instead of h / G
    ("attention_fwd", "let kv_head = block.y / G", "let kv_head = block.y % G", ["O"]),
    # dK/dV sums only the first query head of the group, G times
    ("attention_bwd_dkdv", "let h = block.y * G + t / nq", "let h = block.y * G", ["DK", "DV"]),
    # dK/dV's loop covers one query head's blocks only
    ("attention_bwd_dkdv", "let t_end = G * nq", "let t_end = nq", ["DK", "DV"]),
    # dQ reads K/V head h % G
    ("attention_bwd_dq", "let kv_head = block.y / G", "let kv_head = block.y % G", ["DQ"]),
]


@pytest.mark.parametrize("name, old, new, failing", MUTANTS, ids=[f"{m[0]}-{i}" for i, m in enumerate(MUTANTS)])
def test_grouping_mutants_fail(tmp_path: Path, name: str, old: str, new: str, failing: list[str]) -> None:
    src = (EXAMPLES / f"{name}.tk").read_text()
    assert src.count(old) == 1
    path = tmp_path / f"{name}.tk"
    path.write_text(src.replace(old, new))
    prep = _prep()
    p = prep.problem(np.random.default_rng(9), dict(B=1, H=4, N=100), D, True, 2)
    good = _run(_kernels("sm_90a", 1, 2), p["Q"], p["K"], p["V"], p["DO"])
    ks = dict(_kernels("sm_90a", 1, 2))
    key = {"attention_fwd": "fwd", "attention_bwd_dkdv": "dkdv", "attention_bwd_dq": "dq"}[name]
    consts = {"D": D, "CAUSAL": 1, "G": 2} | ({"BQ": "auto"} if key == "dkdv" else {})
    ks[key] = tkir.compile(str(path), target="sm_90a", **consts)
    bad = _run(ks, p["Q"], p["K"], p["V"], p["DO"])
    wrong = sorted(o for o in failing if relative_error(bad[o], good[o]) > 10 * GRAD_TOL)
    assert wrong == failing, {o: relative_error(bad[o], good[o]) for o in failing}
