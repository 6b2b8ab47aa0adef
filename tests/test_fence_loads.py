"""fence-loads (a research pass, passes/fence_loads.py) on the example row kernels: a fence right after the
loads of a one-read kernel, none where a loop lies between the loads and the first reduction (the chunk
loops: a fence there would wait for a load before issuing the loop's) or where there is no reduction."""

from __future__ import annotations

import tkir

PIPE = ["canonicalize", "hoist-loads", "fence-loads"]


def _ops(path: str, **consts: int) -> list[str]:
    ir = tkir.compile(path, passes=PIPE, **consts).ir
    return [ln.split("=", 1)[-1].split()[0] for ln in ir.splitlines() if " tk." in ln or ln.strip().startswith("tk.")]


def test_one_read_row_kernel_gets_the_fence_after_its_loads() -> None:
    ops = _ops("examples/layernorm.tk", D=768, DC=1024, ROWS=1, WG=1, HOIST=1)
    i = ops.index("tk.fence")
    assert ops[i - 3:i] == ["tk.load"] * 3 and ops.count("tk.fence") == 1
    assert "tk.reduce" not in ops[:i] and "tk.reduce" in ops[i:]


def test_chunk_loop_gets_no_fence() -> None:
    # D > DC: X's first chunk, then the loop over the others, then the reductions
    assert "tk.fence" not in _ops("examples/layernorm.tk", D=2048, DC=1024, ROWS=1, WG=1, HOIST=0)
    assert "tk.fence" not in _ops("examples/rmsnorm.tk", D=8192, DC=4096, ROWS=1, WG=2)


def test_kernel_without_a_reduction_gets_no_fence() -> None:
    assert "tk.fence" not in _ops("examples/rotary.tk")
