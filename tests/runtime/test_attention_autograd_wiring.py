"""examples/attention_autograd.py without torch or a GPU: its wiring of attention_fwd.tk and the backward kernels
(the fused path and the three-kernel one) through tkir.torch.autograd, run with each op replaced by the same kernel in the reference interpreter
(its arguments and output shapes from the op's OpSignature, as tkir.torch builds them) and the Function by the
AutogradPlan it would follow. The gradients match the float64 backward: the names, the order of each op's
arguments and what the forward saves are right. (The ops on the GPU: tests/gpu/test_attention_bwd_gpu.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tkir
import tkir.torch as tt
from tkir.interp import interpret
from tkir.tools.examples import load_companion, relative_error

ROOT = Path(__file__).resolve().parents[2]
NUMPY_DTYPES = {"bf16": ml_dtypes.bfloat16, "f32": np.float32}
GRAD_TOL = 2e-2  # the backward companions' bound


def _example():  # noqa: ANN202 - the example module
    from tkir.tools.examples import load_module

    return load_module(ROOT / "examples/attention_autograd.py")  # once per process (sys.modules)


class InterpretedOp:
    """tkir.torch.op's contract on numpy arrays: `op(*inputs)` allocates the outputs from the signature and
    runs the kernel in the interpreter."""

    def __init__(self, path: str | Path, *, outputs: list[str], name: str | None = None, **consts: Any):
        self.kernel = tkir.compile(str(path), **consts)
        self.signature = tt.OpSignature.of(self.kernel.launch, outputs)
        self.name = name or self.kernel.launch.kernel

    def __call__(self, *inputs: np.ndarray) -> Any:
        sig = self.signature
        shapes = [tuple(a.shape) for a in inputs]
        outs = [np.full(s, np.nan, NUMPY_DTYPES[sig.dtypes[o]])
                for o, s in zip(sig.outputs, sig.output_shapes(shapes), strict=True)]
        interpret(self.kernel.module, *sig.kernel_args(inputs, outs, []), sizes=sig.bind_sizes(shapes))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def out(self, *args: np.ndarray) -> Any:
        """The out variant: every kernel argument, outputs written in place (the fused backward's workspace)."""
        sig = self.signature
        shapes = [tuple(a.shape) for n, a in zip(sig.tensors, args, strict=True) if n in sig.inputs]
        interpret(self.kernel.module, *args, sizes=sig.bind_sizes(shapes))
        picked = [args[sig.tensors.index(o)] for o in sig.outputs]
        return picked[0] if len(picked) == 1 else tuple(picked)


def _apply(function: tuple, inputs: list[np.ndarray], do: np.ndarray) -> list[np.ndarray | None]:
    """What tkir.torch.autograd's Function does, by its AutogradPlan: the forward, the saved tensors, the
    backward's arguments (D<out> the output's gradient: dO, and zeros for L), the inputs' gradients."""
    forward, backward, plan = function
    outs = forward(*inputs)
    saved = [inputs[i] if kind == "input" else outs[i] for kind, i in plan.save]
    grads = [do, np.zeros_like(outs[1])]
    args = [saved[i] if kind == "saved" else grads[i] for kind, i in plan.backward_inputs]
    res = backward(*args)
    return [None if j is None else res[j] for j in plan.input_grads]


@pytest.mark.parametrize("backward", ["fused", "three-kernel"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_wiring_computes_the_gradients(monkeypatch: pytest.MonkeyPatch, causal: bool, backward: str) -> None:
    monkeypatch.setattr(tt, "op", InterpretedOp)
    monkeypatch.setattr(tt, "autograd", lambda fwd, bwd, save=None: (fwd, bwd, tt.AutogradPlan.of(
        fwd.signature, bwd.signature, save)))
    ex = _example()
    ops = ex.ops.__wrapped__(64, causal, 1, backward)  # not the cached ops (those would be torch's)
    assert (ops.main is not None, ops.dkdv is None) == ((backward == "fused"),) * 2
    forward, backward, plan = ops.function
    # the forward saves Q, K, V and O, L; dO is the gradient of O; the backward's outputs are dQ, dK, dV
    assert plan.save == (("input", 0), ("input", 1), ("input", 2), ("output", 0), ("output", 1))
    assert plan.input_grads == (0, 1, 2)
    assert backward.signature.inputs == ("Q", "K", "V", "O", "L", "DO")

    prep = load_companion(str(ROOT / "examples/attention_bwd_prep.tk"))
    p = prep.problem(np.random.default_rng(3), dict(B=1, H=2, N=70), 64, causal)
    dq, dk, dv = _apply(ops.function, [p["Q"], p["K"], p["V"]], p["DO"])
    o, lse = forward(p["Q"], p["K"], p["V"])
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], lse, (p["DO"].astype(np.float64) * o).sum(-1), causal)
    for name, got in (("DQ", dq), ("DK", dk), ("DV", dv)):
        assert got.dtype == ml_dtypes.bfloat16 and got.shape == p["Q"].shape
        err = relative_error(got, want[name])
        assert err < GRAD_TOL, (name, err)


def test_unsupported_head_dims_are_refused_before_any_compile() -> None:
    """D = 256 is the fused backward's alone (the three-kernel one holds dK, dV of 256 columns in registers)."""
    ex = _example()
    with pytest.raises(ValueError, match="head dim 256 is not supported by the three-kernel backward"):
        ex.ops.__wrapped__(256, False)
    with pytest.raises(ValueError, match="head dim 96 is not supported by the fused backward"):
        ex.ops.__wrapped__(96, False, 1, "fused")
    assert ex.BACKWARD_HEAD_DIMS == (64, 128, 256) and ex.THREE_KERNEL_HEAD_DIMS == (64, 128)
    assert 256 in ex.FORWARD_HEAD_DIMS


@pytest.mark.parametrize("d, causal", [(64, True), (256, False)])
def test_the_wiring_of_the_deterministic_and_d256_backward(monkeypatch: pytest.MonkeyPatch, d: int,
                                                           causal: bool) -> None:
    """backward="fused", deterministic=True: the main kernel and the convert compiled with DET=1 (and D = 256's
    DS), the workspace of cdiv(N, BKV) D rows allocated by the wiring; the gradients match the float64 ones."""
    monkeypatch.setattr(tt, "op", InterpretedOp)
    monkeypatch.setattr(tt, "autograd", lambda fwd, bwd, save=None: (fwd, bwd, tt.AutogradPlan.of(
        fwd.signature, bwd.signature, save)))
    ex = _example()
    ops = ex.ops.__wrapped__(d, causal, 1, "fused", True)
    main, convert = (x.kernel.module.kernel.attrs["consts"] for x in (ops.main, ops.dq))
    assert main["DET"] == convert["DET"] == 1 and main["BKV"] == convert["BKV"] == ex.FUSED_BKV[d]
    assert main["DS"] == (4 if d == 256 else 1) and convert["CAUSAL"] == int(causal)
    assert ex.workspace_rows(d, 70, True) == d * -(-70 // ex.FUSED_BKV[d]) and ex.workspace_rows(d, 70) == d
    prep = load_companion(str(ROOT / "examples/attention_bwd_prep.tk"))
    p = prep.problem(np.random.default_rng(9), dict(B=1, H=2, N=70), d, causal)
    dq, dk, dv = _apply(ops.function, [p["Q"], p["K"], p["V"]], p["DO"])
    o, lse = ops.forward(p["Q"], p["K"], p["V"])
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], lse, (p["DO"].astype(np.float64) * o).sum(-1), causal)
    for name, got in (("DQ", dq), ("DK", dk), ("DV", dv)):
        err = relative_error(got, want[name])
        assert err < GRAD_TOL, (name, err)


def test_the_default_backward_and_its_override(monkeypatch: pytest.MonkeyPatch) -> None:
    ex = _example()
    monkeypatch.delenv(ex.BACKWARD_ENV, raising=False)
    assert ex.default_backward() == "fused"
    monkeypatch.setenv(ex.BACKWARD_ENV, "three-kernel")
    assert ex.default_backward() == "three-kernel"
    monkeypatch.setenv(ex.BACKWARD_ENV, "fast")
    with pytest.raises(ValueError, match="expected one of fused, three-kernel"):
        ex.default_backward()
    with pytest.raises(ValueError, match="backward='fast'"):
        ex.ops.__wrapped__(64, False, 1, "fast")


@pytest.mark.parametrize("backward", ["fused", "three-kernel"])
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("g", [2, 4])
def test_the_wiring_of_grouped_query_attention(monkeypatch: pytest.MonkeyPatch, g: int, causal: bool,
                                               backward: str) -> None:
    """K and V with H / G heads: the ops are compiled with G, dK and dV come back in K's and V's shape, each K/V
    head's the sum over its G query heads (the float64 backward's)."""
    monkeypatch.setattr(tt, "op", InterpretedOp)
    monkeypatch.setattr(tt, "autograd", lambda fwd, bwd, save=None: (fwd, bwd, tt.AutogradPlan.of(
        fwd.signature, bwd.signature, save)))
    ex = _example()
    ops = ex.ops.__wrapped__(64, causal, g, backward)
    assert (ops.main is not None) == (backward == "fused")
    assert ops.forward.kernel.module.kernel.attrs["consts"]["G"] == g
    prep = load_companion(str(ROOT / "examples/attention_bwd_prep.tk"))
    p = prep.problem(np.random.default_rng(5 + g), dict(B=1, H=4, N=70), 64, causal, g)
    assert p["K"].shape == (1, 4 // g, 70, 64) and ex.group_size(p["Q"].shape, p["K"].shape, p["V"].shape) == g
    dq, dk, dv = _apply(ops.function, [p["Q"], p["K"], p["V"]], p["DO"])
    o, lse = ops.forward(p["Q"], p["K"], p["V"])
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], lse, (p["DO"].astype(np.float64) * o).sum(-1), causal)
    for name, got, like in (("DQ", dq, p["Q"]), ("DK", dk, p["K"]), ("DV", dv, p["V"])):
        assert got.shape == like.shape, name
        err = relative_error(got, want[name])
        assert err < GRAD_TOL, (name, err)


@pytest.mark.parametrize("q, kv, message", [
    ((2, 6, 100, 64), (2, 4, 100, 64), "q has 6 heads and k, v have 4: grouped-query attention needs the query "
                                       "heads a multiple of the K/V heads"),
    ((2, 8, 100, 64), (2, 2, 99, 64), r"must agree in batch, sequence length and head dim"),
])
def test_group_size_refuses_mismatched_heads(q: tuple, kv: tuple, message: str) -> None:
    ex = _example()
    with pytest.raises(ValueError, match=message):
        ex.group_size(q, kv, kv)
    with pytest.raises(ValueError, match="k and v must have one shape"):
        ex.group_size((2, 8, 100, 64), (2, 2, 100, 64), (2, 4, 100, 64))
    assert ex.group_size((2, 8, 100, 64), (2, 2, 100, 64), (2, 2, 100, 64)) == 4
    assert ex.group_size((2, 8, 100, 64), (2, 8, 100, 64), (2, 8, 100, 64)) == 1
