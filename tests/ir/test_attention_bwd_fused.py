"""Attention's one-kernel backward (examples/attention_bwd.tk, with attention_bwd_prep.tk before it and
attention_bwd_dq_convert.tk after it) in the reference interpreter, compiled with the default pipeline.

* Each companion's CHECK_SIZES on sm_90a and sm_80.
* The whole backward (prep, the main kernel adding dQ^T into a zeroed workspace, the conversion) against the
  float64 backward of the float64 forward at ragged N = 1, 63, 64, 65, 127, 200, causal and not, D = 64 and 128,
  G = 1 and 4 (grouped-query attention). At N = 1 dQ = dK = 0 in exact arithmetic: an absolute bound there.
* The tiles BQ=auto, BKV=auto, WG=auto choose per head dim; ptxas assembles the main kernel on sm_90a without
  spills, with its dQ reduce-add a TMA reduce left in flight (no read-wait right after its issue).
(The float64 finite-difference check of tests/ir/test_attention_bwd.py runs this path too.)
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.interp import interpret
from tkir.tools.examples import check_interpreted, load_companion, max_error, relative_error

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KERNELS = ("attention_bwd", "attention_bwd_dq_convert")
TARGETS = ("sm_90a", "sm_80")
GRAD_TOL = 2e-2  # bf16 outputs from bf16 products of P and dS (the three-kernel path's bound)
ZERO_GRAD_TOL = 1e-4  # at N = 1: max |dQ|, max |dK| against max |dV| (tests/ir/test_attention_bwd.py)
RAGGED_N = (1, 63, 64, 65, 127, 200)


@functools.cache
def _companion(name: str):  # noqa: ANN202 - a companion module
    return load_companion(str(EXAMPLES / f"{name}.tk"))


@functools.cache
def _compile(name: str, target: str, **consts: int | str) -> tkir.CompiledKernel:
    return tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target, **consts)


def fused_kernels(target: str, d: int, causal: int, g: int = 1) -> dict[str, tkir.CompiledKernel]:
    """The three kernels of the fused path as examples/attention_autograd.py compiles them."""
    gqa = {"G": g} if g > 1 else {}
    return {"prep": _compile("attention_bwd_prep", target, D=d),
            "main": _compile("attention_bwd", target, D=d, CAUSAL=causal, BQ="auto", BKV="auto", WG="auto", **gqa),
            "convert": _compile("attention_bwd_dq_convert", target, D=d)}


def fused_backward(ks: dict, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, lse: np.ndarray,
                   do: np.ndarray) -> dict[str, np.ndarray]:
    """Delta, dQ, dK, dV from the fused path in the interpreter, in the order the autograd wiring runs them
    (the workspace zeroed first, as the wiring's torch.zeros does)."""
    b, h, n, d = q.shape
    sizes = dict(B=b, H=h, N=n)
    delta = np.full((b, h, n), np.nan, np.float32)
    interpret(ks["prep"].module, o, do, delta, sizes=sizes)
    acc = np.zeros((b, h, d, -(-n // 4) * 4), np.float32)
    dk, dv = (np.full(k.shape, np.nan, k.dtype) for _ in range(2))
    interpret(ks["main"].module, q, k, v, do, lse, delta, acc, dk, dv, sizes=sizes)
    dq = np.full(q.shape, np.nan, q.dtype)
    interpret(ks["convert"].module, acc, dq, sizes=sizes)
    return {"DELTA": delta, "DQ": dq, "DK": dk, "DV": dv, "DQACC": acc}


def _sizes(n: int, g: int) -> dict:
    """Two heads at N = 200 (G heads at G > 1: one K/V head), two batches at N = 65, one of each otherwise."""
    h = max(g, 2) if n == 200 else g
    return dict(B=2 if n == 65 else 1, H=h, N=n)


# --- the companions' checks --------------------------------------------------------------------------------

def _check_cases() -> list:
    out = []
    for name in KERNELS:
        comp = _companion(name)
        assert len(comp.CHECK_SIZES) == len(comp.CHECK_CONSTS) >= 4
        for i in range(len(comp.CHECK_SIZES)):
            for target in TARGETS:
                out.append(pytest.param(name, target, i, id=f"{name}-{i}-{target}"))
    return out


@pytest.mark.parametrize("name, target, i", _check_cases())
def test_companion_check_sizes(name: str, target: str, i: int) -> None:
    comp = _companion(name)
    sizes, consts = comp.CHECK_SIZES[i], comp.CHECK_CONSTS[i]
    results = check_interpreted(_compile(name, target, **consts).module, comp, sizes, consts, seed=i)
    assert results and all(r.ok for r in results), [str(r) for r in results]


# --- the whole backward at ragged N --------------------------------------------------------------------------

@pytest.mark.parametrize("g", [1, 4])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("n", RAGGED_N)
def test_whole_fused_backward_matches_float64(n: int, causal: int, d: int, g: int) -> None:
    prep = _companion("attention_bwd_prep")
    p = prep.problem(np.random.default_rng(n + 7 * causal + 3 * g), _sizes(n, g), d, bool(causal), g)
    got = fused_backward(fused_kernels("sm_90a", d, causal, g), p["Q"], p["K"], p["V"], p["O"], p["L"], p["DO"])
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], bool(causal))
    assert relative_error(got["DV"], want["DV"]) < GRAD_TOL and max_error(got["DV"], want["DV"]) < GRAD_TOL
    assert np.all(got["DQACC"][..., n:] == 0), "the workspace's padding columns were added into"
    for name in ("DQ", "DK"):
        out = got[name].astype(np.float64)
        assert np.isfinite(out).all(), name
        if n == 1:  # zero in exact arithmetic
            assert np.abs(out).max() <= ZERO_GRAD_TOL * np.abs(want["DV"]).max(), (name, np.abs(out).max())
        else:
            assert relative_error(out, want[name]) < GRAD_TOL, (name, relative_error(out, want[name]))
            assert max_error(out, want[name]) < GRAD_TOL, (name, max_error(out, want[name]))


@pytest.mark.parametrize("causal", [0, 1])
def test_fused_backward_on_sm80_matches_float64(causal: int) -> None:
    """sm_80 (mma.sync, red.global.add for the workspace): one ragged size per mask, both head dims."""
    prep = _companion("attention_bwd_prep")
    for d in (64, 128):
        p = prep.problem(np.random.default_rng(5 + causal), dict(B=1, H=2, N=127), d, bool(causal))
        got = fused_backward(fused_kernels("sm_80", d, causal), p["Q"], p["K"], p["V"], p["O"], p["L"], p["DO"])
        want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], bool(causal))
        for name in ("DQ", "DK", "DV"):
            assert relative_error(got[name], want[name]) < GRAD_TOL, (d, name, relative_error(got[name], want[name]))


# --- tiles and assembly ----------------------------------------------------------------------------------------

def test_auto_tiles_per_head_dim() -> None:
    """D = 128: 128 keys over two consumer warpgroups, 32 queries (64 needs 256 registers a thread); D = 64: one
    warpgroup of 64 keys and 64 queries (two warpgroups would split dQ^T's 64 rows)."""
    assert fused_kernels("sm_90a", 128, 0)["main"].module.kernel.attrs["auto"] == {"BQ": 32, "BKV": 128, "WG": 2}
    assert fused_kernels("sm_90a", 64, 1)["main"].module.kernel.attrs["auto"] == {"BQ": 64, "BKV": 64, "WG": 1}


TMA_REDUCE = re.compile(r"cp\.reduce\.async\.bulk\.tensor\.4d\.global\.shared::cta\.add\.tile\.bulk_group")


@pytest.mark.parametrize("d, causal, g", [(128, 0, 1), (128, 1, 1), (64, 0, 1), (64, 1, 4), (128, 1, 8)])
def test_sm90a_assembles_without_spills(d: int, causal: int, g: int) -> None:
    k = fused_kernels("sm_90a", d, causal, g)["main"]
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, res
    sass = k.asm["sass"]
    assert not local_memory_ops(sass)
    assert "HGMMA" in sass and "UTMALDG" in sass and "UTMAREDG" in sass
    lines = [ln.split("//")[0].strip() for ln in k.asm["ptx"].splitlines() if ln.split("//")[0].strip()]
    at = max(i for i, ln in enumerate(lines) if TMA_REDUCE.search(ln))
    end = next(i for i in range(at, len(lines)) if lines[i].endswith(":") or lines[i].startswith("bra"))
    assert not any(ln.startswith("cp.async.bulk.wait_group") for ln in lines[at:end]), lines[at:end]


def test_convert_assembles_without_spills() -> None:
    for d in (64, 128):
        k = _compile("attention_bwd_dq_convert", "sm_90a", D=d)
        assert k.asm["ptxas"].spill_stores == 0 and not local_memory_ops(k.asm["sass"])
