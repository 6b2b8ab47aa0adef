"""overlap-mma{fence_wait}: the steady loop's wait for the second mma carries `fence = true` (and only that wait);
the IR round-trips through the parser and the verifier with it, a value other than true or false is a located
error, and the fenced kernel computes what the unfenced one does in the interpreter. The PTX and SASS are
tests/filecheck/passes/overlap-mma-fence.tk's."""

from __future__ import annotations

import numpy as np
import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.parser import parse_module
from tkir.verifier import verify

KERNEL = "tests/filecheck/passes/overlap-mma-fence.tk"
FENCED = "overlap-mma{fence_wait=true}"


def test_only_the_steady_loops_wait_is_fenced() -> None:
    fenced = tkir.compile(KERNEL, pass_edits=FENCED).ir
    plain = tkir.compile(KERNEL).ir
    waits = [ln for ln in fenced.splitlines() if "tk.mma_wait" in ln]
    assert sum("fence = true" in ln for ln in waits) == 1 and len(waits) == 4
    assert "%o_done = tk.mma_wait" in next(ln for ln in waits if "fence = true" in ln)
    assert "fence" not in plain
    assert fenced.replace(" {fence = true}", "") == plain


def test_the_fence_round_trips_and_a_bad_value_is_refused() -> None:
    text = tkir.compile(KERNEL, pass_edits=FENCED).ir
    verify(parse_module(text, "f.tkir"))
    bad = text.replace("{fence = true}", "{fence = 1}", 1)
    with pytest.raises(CompileError) as info:
        verify(parse_module(bad, "f.tkir"))
    first = info.value.format().splitlines()[0]
    line = next(i for i, ln in enumerate(bad.splitlines(), 1) if "fence = 1" in ln)
    assert first.startswith(f"f.tkir:{line}:") and "fence = 1: true or false" in first, first


def test_the_fenced_kernel_computes_the_same_in_the_interpreter() -> None:
    from ml_dtypes import bfloat16

    rng = np.random.default_rng(7)
    n, d = 192, 64
    q, k, v = (rng.standard_normal((n, d)).astype(bfloat16) for _ in range(3))
    outs = []
    for edits in (None, FENCED):
        o = np.zeros((n, d), bfloat16)
        tkir.interpret(tkir.compile(KERNEL, pass_edits=edits), q, k, v, o)
        outs.append(o.astype(np.float32))
    assert np.array_equal(outs[0], outs[1])
    s = q.astype(np.float64) @ k.astype(np.float64).T
    p = np.exp2(s - s.max(axis=1, keepdims=True))
    ref = (p / p.sum(axis=1, keepdims=True)) @ v.astype(np.float64)
    assert np.abs(outs[1] - ref).max() < 3e-2
