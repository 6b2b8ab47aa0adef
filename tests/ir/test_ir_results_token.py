"""The IR parser after an op without operands: `pipe.turn_wait` followed by `%s = tk.mma ...` must
start a new op, not read `%s` as turn_wait's operand (the grammar's RESULTS token). Found when
pingpong joined the default pipeline: attention's printed IR did not parse back."""

from __future__ import annotations

import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.verifier import verify


def test_attention_with_turns_round_trips() -> None:
    k = tkir.compile("examples/attention_fwd.tk", D=128, CAUSAL=1, BQ=128, BKV=128)
    text = k.ir
    assert "pipe.turn_wait\n" in text
    m = parse_module(text)
    verify(m)
    assert print_module(m) == text


def test_results_token_keeps_names_and_errors() -> None:
    two = """tk.kernel @k {grid = ["1"]} {
  ^()
  %a ,  %b = arith.const {value = 1} : i32, i32
}
"""
    m = parse_module(two)  # spaces around the comma: still two result names
    assert [r.name for op in m.kernel.body.ops for r in op.results] == ["a", "b"]
    dup = """tk.kernel @k {grid = ["1"]} {
  ^()
  %a = arith.const {value = 1} : i32
  %a = arith.const {value = 2} : i32
}
"""
    with pytest.raises(CompileError) as e:
        parse_module(dup)
    assert "redefinition of value '%a'" in str(e.value) and ":4:3:" in str(e.value)
