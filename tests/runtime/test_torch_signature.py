"""The parts of tkir.torch that need no torch: op names, the op's signature and schemas from a launch
description, output shapes from fake input shapes, the autograd wiring by names, and the module loading
without torch or the backend. (The ops themselves run in tests/gpu/test_torch_ops.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from limits import HANG_S  # tests/ is on sys.path under pytest

import tkir
from tkir.backend.launch import read_launch
from tkir.torch import AutogradPlan, OpSignature, TorchOpError, check_op_name, op_name

ROOT = Path(__file__).resolve().parents[2]


def _launch(path: str):  # noqa: ANN202
    return tkir.compile(str(ROOT / path)).launch


def _halving_launch():  # noqa: ANN202
    """A hand-made description whose output's dims are an expression and a name of the input."""
    d = _launch("tests/data/rows/softmax.tk").to_json()
    d["tensors"] = [{"name": "X", "dtype": "bf16", "dims": ["N", "D"]},
                    {"name": "Y", "dtype": "f32", "dims": ["D / 2", "N"]}]
    d["params"] = [p for p in d["params"] if p["kind"] == "pointer"] + [
        {"name": "N", "kind": "scalar", "dtype": "i32", "size": "N"},
        {"name": "D", "kind": "scalar", "dtype": "i32", "size": "D"}]
    d["aligned"], d["readonly"] = [], []
    return read_launch(d)


def test_op_name_is_the_kernel_and_a_hash_of_the_consts() -> None:
    a = op_name("softmax", {"D": 1024, "ROWS": 16})
    assert a == op_name("softmax", {"ROWS": 16, "D": 1024})  # any order
    assert a.startswith("softmax_") and len(a) == len("softmax_") + 8 and a.isidentifier()
    assert a != op_name("softmax", {"D": 512, "ROWS": 16}) and a != op_name("rmsnorm", {"D": 1024, "ROWS": 16})
    assert op_name("softmax", {"D": 1024}) != op_name("softmax", {"D": 1024.0})  # 1024 and 1024.0 differ
    assert op_name("9-bad.name", {}).startswith("k_9_bad_name_")
    assert check_op_name("my_softmax") == "my_softmax"
    for bad in ("_private", "has space", "ns::name", "class", "a.b"):
        with pytest.raises(TorchOpError, match="must be an identifier"):
            check_op_name(bad)


def test_signature_and_schemas_of_rmsnorm() -> None:
    sig = OpSignature.of(_launch("tests/data/rows/rmsnorm.tk"), ["Y"])
    assert sig.inputs == ("X", "W") and sig.outputs == ("Y",) and sig.scalars == ()
    assert sig.schema() == "(Tensor X, Tensor W) -> Tensor"
    assert sig.out_schema() == "(Tensor X, Tensor W, Tensor(a0!) Y) -> ()"
    assert sig.output_shapes([(48, 1024), (1024,)]) == [(48, 1024)]
    assert sig.kernel_args(["x", "w"], ["y"], []) == ["x", "w", "y"]


def test_two_outputs_in_the_order_given() -> None:
    sig = OpSignature.of(_launch("tests/data/mul_bwd.tk"), ["DW", "DX"])
    assert sig.inputs == ("DY", "X", "W") and sig.outputs == ("DW", "DX")
    assert sig.schema() == "(Tensor DY, Tensor X, Tensor W) -> (Tensor, Tensor)"
    assert sig.out_schema() == "(Tensor DY, Tensor X, Tensor W, Tensor(a1!) DX, Tensor(a0!) DW) -> ()"
    assert sig.output_shapes([(32, 256)] * 3) == [(32, 256), (32, 256)]
    assert sig.kernel_args(["dy", "x", "w"], ["dw", "dx"], []) == ["dy", "x", "w", "dx", "dw"]


def test_output_dims_from_expressions_and_scalars_in_the_schema() -> None:
    launch = _halving_launch()
    sig = OpSignature.of(launch, ["Y"])
    assert sig.output_shapes([(3, 10)]) == [(5, 3)]
    assert sig.schema() == "(Tensor X) -> Tensor"


@pytest.mark.parametrize(("shapes", "message"), [
    ([(48, 1024)], "takes 2 tensors \\(X, W\\), got 1"),
    ([(48, 1024, 1), (1024,)], "argument 'X' has 3 dims \\[48, 1024, 1\\], expected 2"),
    ([(48, 512), (1024,)], "argument 'X' dim 1 is 512, expected 1024"),
    ([(48, 1024), (512,)], "argument 'W' dim 0 is 512, expected 1024"),
])
def test_input_shapes_refused_before_launch(shapes: list, message: str) -> None:
    sig = OpSignature.of(_launch("tests/data/rows/rmsnorm.tk"), ["Y"])
    with pytest.raises(TorchOpError, match=message):
        sig.output_shapes(shapes)


def test_a_size_given_two_values_is_refused() -> None:
    sig = OpSignature.of(_launch("tests/data/mul_fwd.tk"), ["Y"])
    with pytest.raises(TorchOpError, match="argument 'W' dim 0 \\(N\\) is 16, but argument 'X' dim 0 gave N = 32"):
        sig.output_shapes([(32, 256), (16, 256)])


@pytest.mark.parametrize(("outputs", "message"), [
    (["Z"], "must be distinct tensor parameters .*Z"),
    (["Y", "Y"], "one is repeated"),
    ("Y", "must be a non-empty list"),
    ([], "must be a non-empty list"),
    (["X", "W", "Y"], "every tensor is an output"),
])
def test_bad_outputs_are_refused(outputs: list, message: str) -> None:
    with pytest.raises(TorchOpError, match=message):
        OpSignature.of(_launch("tests/data/mul_fwd.tk"), outputs)


def test_an_output_dim_no_input_gives_leaves_only_the_out_variant() -> None:
    sig = OpSignature.of(_halving_launch(), ["X"])  # X [N, D] sized by nothing the op is given (Y has D / 2)
    assert "D is no dim of an input" in (sig.unsized() or "")
    with pytest.raises(TorchOpError, match="output 'X' has dims .* D is no dim of an input.*op.out"):
        sig.output_shapes([(5, 3)])
    assert OpSignature.of(_halving_launch(), ["Y"]).unsized() is None


def test_autograd_plan_by_names() -> None:
    fwd = OpSignature.of(_launch("tests/data/mul_fwd.tk"), ["Y"])
    bwd = OpSignature.of(_launch("tests/data/mul_bwd.tk"), ["DX", "DW"])
    plan = AutogradPlan.of(fwd, bwd)
    assert plan.save == (("input", 0), ("input", 1))  # X, W
    assert plan.backward_inputs == (("grad", 0), ("saved", 0), ("saved", 1))  # DY, X, W
    assert plan.input_grads == (0, 1) and plan.backward_scalars == ()
    swapped = AutogradPlan.of(fwd, OpSignature.of(_launch("tests/data/mul_bwd.tk"), ["DW", "DX"]), save=["W", "X", "Y"])
    assert swapped.save == (("input", 1), ("input", 0), ("output", 0))
    assert swapped.backward_inputs == (("grad", 0), ("saved", 1), ("saved", 0)) and swapped.input_grads == (1, 0)


def test_autograd_plan_refusals() -> None:
    fwd = OpSignature.of(_launch("tests/data/mul_fwd.tk"), ["Y"])
    bwd = OpSignature.of(_launch("tests/data/mul_bwd.tk"), ["DX", "DW"])
    with pytest.raises(TorchOpError, match="reads W, which the forward does not save"):
        AutogradPlan.of(fwd, bwd, save=["X"])
    with pytest.raises(TorchOpError, match="'Q' is no input or output of mul_fwd"):
        AutogradPlan.of(fwd, bwd, save=["X", "W", "Q"])
    with pytest.raises(TorchOpError, match="backward outputs Y name no forward input's gradient"):
        AutogradPlan.of(fwd, fwd)  # the forward as its own backward: its output Y is no D<input>


def test_a_python_backward_is_wired_by_its_names() -> None:
    from tkir.torch import Backward, backward

    @backward(inputs=["DY", "W", "X"], outputs=["DW", "DX"])
    def mul_backward(dy, w, x):  # noqa: ANN001, ANN202
        return dy * x, dy * w

    assert isinstance(mul_backward, Backward) and mul_backward.name == "mul_backward"
    assert mul_backward(2, 3, 5) == (10, 6)
    fwd = OpSignature.of(_launch("tests/data/mul_fwd.tk"), ["Y"])
    plan = AutogradPlan.of(fwd, mul_backward.signature)
    assert plan.save == (("input", 1), ("input", 0))  # W, X: in the backward's order
    assert plan.backward_inputs == (("grad", 0), ("saved", 0), ("saved", 1)) and plan.input_grads == (1, 0)
    with pytest.raises(TorchOpError, match="backward outputs DQ name no forward input's gradient"):
        AutogradPlan.of(fwd, backward(inputs=["DY"], outputs=["DQ"])(mul_backward.fn).signature)
    with pytest.raises(TorchOpError, match="inputs= must be a list of names"):
        backward(inputs="DY", outputs=["DX"])


def test_importing_tkir_torch_loads_neither_torch_nor_the_backend() -> None:
    code = ("import json, sys\nimport tkir.torch\n"
            "print(json.dumps(sorted(m for m in sys.modules if m == 'torch' or m.startswith('tkir.backend'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == []
