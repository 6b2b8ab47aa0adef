"""fence-loads (passes/fence_loads.py; opt-in in the default pipeline) on the row kernels (tests/data/rows): a fence
right after the loads of a one-read kernel, none where a loop lies between the loads and the first
reduction (the chunk loops: a fence there would wait for a load before issuing the loop's) or where there
is no reduction; in the default pipeline only for kernels that ask (@fence_loads(1)), which the row
kernels' tune spaces offer for narrow rows only."""

from __future__ import annotations

import tkir

PIPE = ["canonicalize", "hoist-loads", "fence-loads"]


def _ops(path: str, **consts: int) -> list[str]:
    ir = tkir.compile(path, passes=PIPE, **consts).ir
    return [ln.split("=", 1)[-1].split()[0] for ln in ir.splitlines() if " tk." in ln or ln.strip().startswith("tk.")]


def test_one_read_row_kernel_gets_the_fence_after_its_loads() -> None:
    ops = _ops("tests/data/rows/layernorm.tk", D=768, DC=1024, ROWS=1, WG=1, HOIST=1)
    i = ops.index("tk.fence")
    assert ops[i - 3:i] == ["tk.load"] * 3 and ops.count("tk.fence") == 1
    assert "tk.reduce" not in ops[:i] and "tk.reduce" in ops[i:]


def test_chunk_loop_gets_no_fence() -> None:
    # D > DC: X's first chunk, then the loop over the others, then the reductions
    assert "tk.fence" not in _ops("tests/data/rows/layernorm.tk", D=2048, DC=1024, ROWS=1, WG=1, HOIST=0)
    assert "tk.fence" not in _ops("tests/data/rows/rmsnorm.tk", D=8192, DC=4096, ROWS=1, WG=2)


def test_kernel_without_a_reduction_gets_no_fence() -> None:
    assert "tk.fence" not in _ops("examples/rotary.tk")


# --- opt-in: the default pipeline's fence-loads{opt_in=true} and @fence_loads(F) --------------------------

def _default_ops(path: str, **consts: int) -> list[str]:
    ir = tkir.compile(path, **consts).ir
    return [ln.split("=", 1)[-1].split()[0] for ln in ir.splitlines() if " tk." in ln or ln.strip().startswith("tk.")]


def test_default_pipeline_fences_only_kernels_that_ask() -> None:
    assert "fence-loads{opt_in=true}" in tkir.api.default_pipeline()
    for k in ("layernorm", "rmsnorm", "softmax"):
        asked = _default_ops(f"tests/data/rows/{k}.tk", D=768, DC=1024, ROWS=1, WG=1, FENCE=1)
        assert asked.count("tk.fence") == 1, k
        assert "tk.fence" not in _default_ops(f"tests/data/rows/{k}.tk", D=768, DC=1024, ROWS=1, WG=1, FENCE=0), k


def test_fence_loads_annotation_records_the_request() -> None:
    ir = tkir.compile("tests/data/rows/softmax.tk", D=768, DC=1024, ROWS=1, WG=1, FENCE=1,
                      passes=["canonicalize"]).ir
    assert "fence_loads_requested = true" in ir
    ir0 = tkir.compile("tests/data/rows/softmax.tk", D=768, DC=1024, ROWS=1, WG=1, FENCE=0, passes=["canonicalize"]).ir
    assert "fence_loads_requested = false" in ir0  # the source said no: the size rule leaves it alone


def test_tune_spaces_offer_the_fence_only_for_narrow_rows() -> None:
    from tkir.tools.tune import read_space

    for k in ("layernorm", "rmsnorm", "softmax"):
        space = read_space(f"tests/data/rows/{k}.tk")
        narrow = {p.consts["FENCE"] for p in space.points({"D": 768}) if p.dropped is None}
        wide = {p.consts["FENCE"] for p in space.points({"D": 4096}) if p.dropped is None}
        assert narrow == {0, 1} and wide == {0}, k


PLAIN = "examples/layernorm.tk"  # no @fence_loads / @hoist_loads: the compiler decides


def _ops_at(n: int, d: int, **kw: object) -> str:
    return tkir.compile(PLAIN, sizes={"N": n}, D=d, **kw).ir


def test_size_rule_fences_and_hoists_a_latency_bound_narrow_row_kernel() -> None:
    """A grid that fits in one wave (N = 4096 rows of 768 in blocks of 4: 1024 blocks) with narrow rows: the
    loads are fenced and W, Bias hoisted; at N = 65536 (16384 blocks) neither; at D = 4096 hoisted, not fenced."""
    ir = _ops_at(4096, 768)
    assert ir.count("tk.fence") == 1 and "hoisted_loads = 2" in ir
    many = _ops_at(65536, 768)
    assert "tk.fence" not in many and "hoisted_loads" not in many
    wide = _ops_at(1, 4096)
    assert "tk.fence" not in wide and "hoisted_loads = 2" in wide
    plain = tkir.compile(PLAIN, D=768).ir  # compiled without sizes: nothing to decide from
    assert "tk.fence" not in plain and "hoisted_loads" not in plain


def test_size_rule_ablation_and_the_source_saying_no() -> None:
    off = _ops_at(4096, 768, pass_edits="hoist-loads{latency=false},fence-loads{opt_in=true,latency=false}")
    assert "tk.fence" not in off and "hoisted_loads" not in off
    said_no = tkir.compile("tests/data/rows/layernorm.tk", sizes={"N": 1}, D=768, DC=1024, ROWS=1, WG=1, HOIST=0,
                           FENCE=0).ir
    assert "tk.fence" not in said_no and "hoisted_loads" not in said_no
