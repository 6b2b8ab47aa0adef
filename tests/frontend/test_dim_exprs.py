"""Tensor dims that are expressions of sizes and consts (`gl<bf16>[B, H / G, N, D]`): the front end's
reading and refusals, the IR text (quoted, read back), the launch description (a size parameter for the
expression, a `requires` entry per division), and the checks at launch, in the interpreter and in the
runtime's argument validation (before any GPU work): H not a multiple of G, and a K/V tensor whose head
count is not H / G, are refused with messages that say so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend.runtime import Kernel, LaunchError
from tkir.diagnostics import CompileError
from tkir.interp import interpret
from tkir.interp.frame import InterpError
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.verifier import verify

GQA = """\
kernel gqa<G=2>(Q: gl<bf16>[B, H, N, 64], K: gl<bf16>[B, H / G, N, 64], O: gl<bf16>[B, H, N, 64])
    grid(cdiv(N, 64), H, B)
{
    reg q: rt<bf16, 64, 64> = Q[block.z, block.y, block.x, 0]
    reg k: rt<bf16, 64, 64> = K[block.z, block.y / G, block.x, 0]
    O[block.z, block.y, block.x, 0] = q + k
}
"""
BF16 = ml_dtypes.bfloat16
FAKE_BASE = 0x7F00_0000_0000  # a made-up device address, never dereferenced (validate() touches no GPU)


def _compile(tmp_path: Path, src: str = GQA, target: str = "sm_90a", **consts: int) -> tkir.CompiledKernel:
    path = tmp_path / "gqa.tk"
    path.write_text(src)
    return tkir.compile(str(path), target=target, **consts)


def _refused(tmp_path: Path, dim: str) -> str:
    with pytest.raises(CompileError) as e:
        _compile(tmp_path, GQA.replace("H / G, N", f"{dim}, N"))
    return e.value.format()


def test_the_dim_is_a_size_expression_in_the_ir_and_reads_back(tmp_path: Path) -> None:
    k = _compile(tmp_path)
    types = [str(a.type) for a in k.module.kernel.body.args]
    assert types == ["gl<bf16>[B, H, N, 64]", 'gl<bf16>[B, "H / 2", N, 64]', "gl<bf16>[B, H, N, 64]"]
    text = print_module(k.module)
    again = parse_module(text)
    verify(again)
    assert print_module(again) == text
    assert again.kernel.body.args[1].type.dims == ("B", "H / 2", "N", 64)


def test_the_launch_passes_the_expression_and_requires_an_exact_division(tmp_path: Path) -> None:
    launch = _compile(tmp_path).launch
    sizes = [(p.name, p.size) for p in launch.params if getattr(p, "size", None) is not None]
    assert sizes == [("B", "B"), ("H", "H"), ("N", "N"), ("K_dim1", "H / 2")]
    assert [(r.expr, r.equals) for r in launch.requires] == [("H % 2", 0)]
    assert "argument 'K' dim 1 is H / 2: H must be a multiple of 2" in launch.requires[0].why


def test_a_unit_divisor_is_the_size_itself(tmp_path: Path) -> None:
    """G = 1: K's dim is the size H (no extra parameter, nothing required): what the kernel declared before
    it had G."""
    k = _compile(tmp_path, G=1)
    assert k.module.kernel.body.args[1].type.dims == ("B", "H", "N", 64)
    assert [p.name for p in k.launch.params if getattr(p, "size", None)] == ["B", "H", "N"]
    assert not k.launch.requires


@pytest.mark.parametrize("on, dims, params", [
    (0, ("B", "H", "N", 64), ["B", "H", "N"]),
    (1, ("B", "H * (1 + (cdiv(N, 64) - 1))", "N", 64), ["B", "H", "N", "K_dim1"]),
])
def test_a_const_switches_a_term_off(tmp_path: Path, on: int, dims: tuple, params: list) -> None:
    """A product with 0 and a term that is 0 fold away: `H * (1 + X * (cdiv(N, 64) - 1))` at X = 0 is the size H
    (no extra parameter), at X = 1 an expression (attention_bwd.tk's deterministic workspace rows)."""
    src = GQA.replace("kernel gqa<G=2>", "kernel gqa<G=2, X=0>").replace("H / G, N", "H * (1 + X * (cdiv(N, 64) - 1)), N")
    k = _compile(tmp_path, src, X=on)
    assert k.module.kernel.body.args[1].type.dims == dims
    assert [p.name for p in k.launch.params if getattr(p, "size", None)] == params


def test_a_dim_that_folds_to_a_number_is_a_number(tmp_path: Path) -> None:
    k = _compile(tmp_path, GQA.replace("kernel gqa<G=2>", "kernel gqa<G=2, X=0>").replace(
        "Q: gl<bf16>[B, H, N, 64]", "Q: gl<bf16>[B, H, N, 64 + X * N]"))
    assert k.module.kernel.body.args[0].type.dims == ("B", "H", "N", 64)


def test_nested_divisions_each_divide_exactly(tmp_path: Path) -> None:
    launch = _compile(tmp_path, GQA.replace("H / G, N", "H / G / 2, N")).launch
    assert sorted(r.expr for r in launch.requires) == ["(H / 2) % 2", "H % 2"]


@pytest.mark.parametrize("dim, message", [
    ("H / X", "1:62: error: a tensor dim uses sizes and consts; 'X' is unknown"),
    ("H / 2.5", "error: tensor dim sizes are integers, got 2.5"),
    ("H / 0", "1:60: error: division by zero in a tensor dim expression"),
    ("H / O", "error: a tensor dim uses sizes and consts; 'O' is a global tensor parameter"),
])
def test_bad_dim_expressions_are_located_errors(tmp_path: Path, dim: str, message: str) -> None:
    assert message in _refused(tmp_path, dim)


def test_the_verifier_refuses_an_expression_of_unknown_sizes(tmp_path: Path) -> None:
    text = print_module(_compile(tmp_path).module).replace('"H / 2"', '"HKV / 2"')
    with pytest.raises(CompileError, match=r"%K dim 1 'HKV / 2' uses 'HKV', which is not a size of the kernel"):
        verify(parse_module(text))


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_interpreter_reads_the_group_head_and_refuses_bad_head_counts(tmp_path: Path, target: str) -> None:
    k = _compile(tmp_path, target=target, G=2)
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 70, 64), np.float32).astype(BF16)
    kv = rng.standard_normal((2, 2, 70, 64), np.float32).astype(BF16)
    o = np.full(q.shape, np.nan, BF16)
    interpret(k.module, q, kv, o)
    want = (q.astype(np.float32) + np.repeat(kv.astype(np.float32), 2, axis=1)).astype(BF16)
    np.testing.assert_array_equal(o, want)
    q3 = np.zeros((1, 3, 64, 64), BF16)
    with pytest.raises(InterpError, match=r"argument 'K' dim 1 is H / 2: H must be a multiple of 2 "
                                          r"\(H % 2 is 1, must be 0; H = 3\)"):
        interpret(k.module, q3, np.zeros((1, 1, 64, 64), BF16), np.zeros_like(q3))
    with pytest.raises(InterpError, match=r"parameter K: .* dim 1 is H / 2 = 2, array has 4"):
        interpret(k.module, q[:, :, :64], np.zeros((2, 4, 64, 64), BF16), o[:, :, :64].copy())


class _FakeCAI:
    """A bf16 tensor exporting __cuda_array_interface__ v3 over an address that is never dereferenced."""

    def __init__(self, shape: tuple[int, ...], ptr: int):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": "<V2", "data": (ptr, False), "strides": None,
                                         "version": 3}


def _args(h: int, hkv: int) -> list[Any]:
    return [_FakeCAI((2, h, 128, 64), FAKE_BASE), _FakeCAI((2, hkv, 128, 64), FAKE_BASE + 2**24),
            _FakeCAI((2, h, 128, 64), FAKE_BASE + 2**26)]


def test_the_runtime_binds_the_expression_and_refuses_bad_head_counts(tmp_path: Path) -> None:
    launch = _compile(tmp_path, G=4).launch
    kernel = Kernel("// validate() needs no PTX", launch.to_json())
    bound = kernel.validate(*_args(8, 2))
    assert bound.sizes == {"B": 2, "H": 8, "N": 128}
    assert [v for _, v in bound.params[-4:]] == [2, 8, 128, 2]  # B, H, N, then K_dim1 = H / 4
    with pytest.raises(LaunchError, match=r"gqa: argument 'K' dim 1 is H / 4: H must be a multiple of 4 "
                                          r"\(H % 4 is 2, must be 0; H = 6\)"):
        kernel.validate(*_args(6, 1))
    with pytest.raises(LaunchError, match=r"gqa: argument 'K' dim 1 is 8, expected H / 4 = 2"):
        kernel.validate(*_args(8, 8))
