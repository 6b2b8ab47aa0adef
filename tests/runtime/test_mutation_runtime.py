"""The host-side checks of backend/ at their boundaries, without a GPU (mutants that survived
scripts/mutate.py's sample, docs/mutation.md): scalar argument ranges, rank-1 tensor maps, the CUDA
folder order, and C size expressions that the translator must refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir
from tkir.backend import c_expr, runtime, toolchain
from tkir.backend.launch import LaunchDescription, ScalarArg
from tkir.backend.runtime import LaunchError
from tkir.symexpr import SymExprError

# the two's-complement ranges of the scalar parameter types (C99 <stdint.h>)
RANGES = {"i32": (-(2**31), 2**31 - 1), "u32": (0, 2**32 - 1), "i64": (-(2**63), 2**63 - 1)}


@pytest.mark.parametrize("dtype", list(RANGES))
def test_scalar_arguments_accept_exactly_their_type_range(dtype: str) -> None:
    lo, hi = RANGES[dtype]
    spec = ScalarArg("x", dtype)
    assert runtime._check_scalar("k", spec, lo) == lo
    assert runtime._check_scalar("k", spec, hi) == hi
    for bad in (lo - 1, hi + 1):
        with pytest.raises(LaunchError, match="does not fit"):
            runtime._check_scalar("k", spec, bad)


VECTOR_TMA = """
kernel v(W: gl<bf16>[N], Y: gl<bf16>[N]) grid(cdiv(N, 256)) {
    shared w: sv<bf16, 256>
    w = W[block.x]
    reg x: rv<bf16, 256> = w
    Y[block.x] = x
}
"""


def test_a_rank_1_tensor_map_is_a_valid_launch(tmp_path: Path) -> None:
    """cuTensorMapEncodeTiled takes ranks 1..5 (HOPPER.md §4.1): a shared vector filled by TMA has a
    rank-1 map, and the launch description's check (backend/launch.py) accepts it (rank 0 and 6 it refuses)."""
    path = tmp_path / "v.tk"
    path.write_text(VECTOR_TMA, encoding="utf-8")
    launch = tkir.compile(str(path)).launch
    assert [t.rank for t in launch.tma] == [1]
    launch.validate()
    data = launch.to_json()
    for rank in (0, 6):
        bad = dict(data, tma=[dict(data["tma"][0], rank=rank)])
        with pytest.raises(LaunchError, match="rank"):
            LaunchDescription.from_json(bad)


def test_cuda_folders_sort_the_default_link_first() -> None:
    """/usr/local/cuda (the link to the default toolkit) before any versioned folder, then the newest."""
    names = ["/usr/local/cuda-12.4", "/usr/local/cuda", "/usr/local/cuda-13.0", "/usr/local/cuda-12.10"]
    got = sorted((Path(n) for n in names), key=toolchain._version_key, reverse=True)
    assert [p.name for p in got] == ["cuda", "cuda-13.0", "cuda-12.10", "cuda-12.4"]


@pytest.mark.parametrize("expr", ["foo(N)", "cdiv(N)", "min(N)", "max(N, key=2)", "N < 4", "N.x"])
def test_c_size_expressions_refuse_what_they_cannot_translate(expr: str) -> None:
    """Only + - * / % and cdiv/min/max with their argument counts become C; anything else is a
    SymExprError naming the expression (never a KeyError from the function table)."""
    with pytest.raises(SymExprError, match="unsupported|bad"):
        c_expr.to_c(expr, {"N": "n"}, "p")


def test_c_size_expressions_translate_the_functions() -> None:
    assert c_expr.to_c("cdiv(N, 64)", {"N": "n"}, "p") == "p_cdiv(n, INT64_C(64), tkir_bad)"
    assert c_expr.to_c("min(N, 4, 8)", {"N": "n"}, "p") == "p_min(p_min(n, INT64_C(4)), INT64_C(8))"


def test_c_string_literals_escape_quotes_backslashes_and_bytes() -> None:
    """The embedded PTX and names become C string literals (C11 §6.4.5): `"`, `\\` and `?` (trigraphs)
    escaped, non-printable and non-ASCII bytes as three-digit octal escapes of their UTF-8 bytes."""
    from tkir.backend.emit_c import _c_string

    assert _c_string('a"b\\c?d') == '"a\\"b\\\\c\\?d"'
    assert _c_string("x\ny\u00e9") == '"x\\012y\\303\\251"'
