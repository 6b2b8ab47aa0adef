"""Ops of the stream-K level (added by passes/stream_k.py): workspace, launch count, partial tiles.

* `%w = tk.workspace {name = "sk_part"} : gl<f32>[NUM_SMS, 32768]`: scratch global memory the
  runtime allocates (zeroed once, kept across launches) and passes as a hidden pointer parameter;
  dims are ints or NUM_SMS.
* `%e = tk.launch_count {name = "sk_epoch"} : i32`: 1 on the first launch of a compiled kernel, 2
  on the next, ... (a hidden scalar parameter): flags written with it never match a later launch.
* `tk.partial_store %part, %flags, %acc, %slot, %epoch[, %rows]`: store an f32 accumulator tile into
  row `slot` of `%part` (gl<f32>[S, rows*cols], the tile's fragment order: only `tk.partial_add` reads
  it), then set `%flags[slot, w] = epoch` for each consumer warpgroup `w` (release, GPU scope).
* `%r = tk.partial_add %part, %flags, %acc, %slot, %epoch[, %rows]`: wait until `%flags[slot, w] ==
  epoch` (acquire), then `%acc` plus the partial tile in row `slot`.
* The optional `%rows` (i32) is how many of the tile's rows lie inside the output (a skinny GEMM's
  M = 1 tile has 1 of 64): only those rows are stored and added; the others of the result keep
  `%acc`'s values (the epilogue's store drops them). Without it, every row.

The interpreter runs blocks one after another; a stream-K kernel (`stream_k` in its attrs) runs
them last block first, because a tile's owner waits only for higher-numbered blocks
(passes/stream_k.py). `tk.partial_add` of a partial nobody has written is an error there, not a hang
(tkir/interp/streamk.py).
"""

from __future__ import annotations

from tkir.ir import Operation
from tkir.opdef import expect, is_int_scalar, n_operands, n_results, register_op
from tkir.types import GlobalType, ScalarType, TileType

WORKSPACE_DIMS = ("NUM_SMS",)  # the symbolic dims a workspace may have (bound by the runtime)


def _workspace(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 1)
    t = op.result.type
    expect(isinstance(t, GlobalType), f"'tk.workspace' yields a gl, not {t}")
    expect(all(isinstance(d, int) or d in WORKSPACE_DIMS for d in t.dims),
           f"'tk.workspace' dims are ints or {', '.join(WORKSPACE_DIMS)}: {t}")
    expect(isinstance(op.attrs.get("name"), str), "'tk.workspace' needs name = \"...\" (its parameter)")


def _launch_count(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 1)
    expect(op.result.type == ScalarType("i32"), "'tk.launch_count' yields i32")
    expect(isinstance(op.attrs.get("name"), str), "'tk.launch_count' needs name = \"...\" (its parameter)")


def _check_partial(op: Operation, name: str) -> TileType:
    part, flags, acc, slot, epoch = (v.type for v in op.operands[:5])
    expect(isinstance(acc, TileType) and acc.space == "rt" and acc.dtype == "f32",
           f"'{name}' takes an f32 register tile, not {acc}")
    assert isinstance(acc, TileType)
    expect(isinstance(part, GlobalType) and part.dtype == "f32" and part.rank == 2
           and part.dims[1] == acc.rows * acc.cols,
           f"'{name}': partials must be gl<f32>[S, {acc.rows * acc.cols}], not {part}")
    expect(isinstance(flags, GlobalType) and flags.dtype == "i32" and flags.rank == 2,
           f"'{name}': flags must be gl<i32>[S, warpgroups], not {flags}")
    expect(is_int_scalar(slot) and is_int_scalar(epoch), f"'{name}': slot and epoch are i32")
    expect(all(is_int_scalar(v.type) for v in op.operands[5:]), f"'{name}': rows is i32")
    return acc


def _partial_store(op: Operation) -> None:
    n_operands(op, 5, 6)
    n_results(op, 0)
    _check_partial(op, "tk.partial_store")


def _partial_add(op: Operation) -> None:
    n_operands(op, 5, 6)
    n_results(op, 1)
    acc = _check_partial(op, "tk.partial_add")
    expect(op.result.type == acc, f"'tk.partial_add' yields its accumulator's type {acc}")


register_op("tk.workspace", _workspace, pure=False, summary="runtime-allocated scratch global memory")
register_op("tk.launch_count", _launch_count, summary="which launch of this compiled kernel this is (1, 2, ...)")
register_op("tk.partial_store", _partial_store, pure=False,
            summary="store a partial accumulator tile to a workspace slot and flag it (stream-K)")
register_op("tk.partial_add", _partial_add, pure=False,
            summary="wait for a workspace slot's flag, add its partial tile to the accumulator (stream-K)")
