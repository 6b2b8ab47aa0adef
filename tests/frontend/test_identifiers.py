"""Names reach LLVM safely (issue 14): identifiers of any length, names that collide once the backend
derives its own (a tensor `A_tma` and the tensor map of `A`), and IR text whose temporaries print as
`%0` all lower to PTX that ptxas assembles.

The rule (backend/llvm_text.py): the front end takes identifiers of any length, as C compilers do;
the backend keeps at most NAME_HINT_CHARS of a name in an LLVM local name and makes every name
unique (LLVM truncated names past 1024 characters, so two long ones collided into invalid LLVM IR).
"""

from __future__ import annotations

import os

import pytest

import tkir
from tkir.backend.llvm_text import NAME_HINT_CHARS, name_hint, param_names
from tkir.backend.toolchain import assemble

os.environ.setdefault("TKIR_CACHE", "0")
LONG = "x" * 5000


def _kernel(name: str = "k", tensor: str = "X", size: str = "N", reg: str = "t") -> str:
    return (f"kernel {name}({tensor}: gl<bf16>[{size}, D], Y: gl<bf16>[{size}, D]) grid({size} / 16) {{\n"
            f"    reg {reg}: rt<bf16, 16, 64> = {tensor}[block.x, 0]\n"
            f"    let {reg}2 = {reg} * 2.0\n"
            f"    Y[block.x, 0] = {reg}2\n}}\n")


@pytest.mark.parametrize("where", ["kernel", "tensor", "size", "reg"])
def test_a_5000_character_identifier_compiles_from_tk_and_from_ir_text(where: str, tmp_path) -> None:
    src = tmp_path / "long.tk"
    src.write_text(_kernel(**{{"kernel": "name"}.get(where, where): LONG}))
    k = tkir.compile(str(src))
    assemble(k.asm["ptx"])
    ir = tmp_path / "long.tkir"
    ir.write_text(k.ir)
    again = tkir.compile(str(ir), passes="verify")
    assert again.asm["ptx"] == k.asm["ptx"]


def test_a_tensor_named_like_another_tensors_map_compiles(tmp_path) -> None:
    """create-tma names A's descriptor A_tma; a parameter A_tma was the same LLVM argument."""
    src = tmp_path / "c.tk"
    src.write_text("kernel k(A: gl<bf16>[M, K], A_tma: gl<bf16>[M, K]) grid(M / 64) {\n"
                   "    shared a: st<bf16, 64, 64>\n    a = A[block.x, 0]\n    A_tma[block.x, 0] = a\n}\n")
    assemble(tkir.compile(str(src)).asm["ptx"])


def test_printed_ir_lowers_to_the_ptx_of_its_source(tmp_path) -> None:
    """gemm's temporaries print as %0, %1...; read back, `%0.8` was not an LLVM name."""
    k = tkir.compile("examples/gemm.tk")
    ir = tmp_path / "gemm.tkir"
    ir.write_text(k.ir)
    assert tkir.compile(str(ir), passes="verify").asm["ptx"] == k.asm["ptx"]


def test_llvm_names() -> None:
    assert name_hint("0") == "v0" and name_hint("a.b") == "a_b" and len(name_hint(LONG)) == NAME_HINT_CHARS
    assert param_names(["A_tma", "A", "A_tma", LONG, "M"]) == ["%A_tma", "%A", "%A_tma.p2",
                                                                f"%{'x' * NAME_HINT_CHARS}.p3", "%M"]
