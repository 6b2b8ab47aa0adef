"""reuse-smem: place a shared tile first written after another tile's last use in that tile's memory.

Matches, per kernel, pairs of `tk.alloc`s at the top of the kernel body: a *donor* D and a *tile* T such that

* every use of D lies in top-level ops (or in the loops and branches nested in them) before the top-level op of
  T's first use (D is dead by then: attention's K and V tiles after the key loop);
* D is not written inside a loop (a loop-loaded tile becomes a ring buffer, and its stages are the pipeline's);
* T is written only from registers (`tk.store %T, %regs`, or the staged epilogue store `tk.store_staged`):
  never by a copy from global memory, which a producer warpgroup would issue ahead of the consumers still
  reading D;
* T fits D: one stage of D holds at least T's bytes, and D's alignment is at least T's (select-swizzle's,
  which a swizzled T needs).

Each matched T's `tk.alloc` is removed and `%T = tk.reuse %D` is inserted right before its first use:
T lives in D's memory and adds no bytes to the block's shared memory (plan-occupancy counts `tk.alloc`s).
The smallest donor that fits is taken, tiles in order of first use, a donor the copy engine may still be reading
(a TMA store's source, which the reuse must wait for) only where no other fits; a donor is given once.

What it is for: the staged epilogue tiles create-tma adds (`DK_stage`, `DV_stage`: 64 KB at attention_bwd's
128 x 128 blocks) cost shared memory the main loop could use. With them in K's and V's memory, the backward's
32 x 128 query block can be 64 x 128 (246,816 B -> 181,280 B at two stages; the 232,448 B limit).

The backend's `tk.reuse` waits for the role's wgmma groups and the bulk copies reading D (`wgmma.wait_group 0`;
the TMA-store thread's `cp.async.bulk.wait_group.read 0`), then syncs the role (every thread is past its reads
of D) before T's first write. The interpreter poisons D at the reuse and reports a later read of it as an
error (tkir/interp/ops.py).

Left alone (the remark `reuse_smem_skipped` on the kernel says why): kernels that ask for persistence
(`@persistent(1)`) or have a 2-D grid (persistent refills one-shot tiles per output tile, under the previous
tile's epilogue). Where persistent rewrites a kernel with a `tk.reuse` all the same (`persistent{linear_grids=
true}` on attention), it gives the tile its own memory back first (passes/persistent.py).
The ablation: `--pass-edits=-reuse-smem` (every tile its own memory).
"""

from __future__ import annotations

from tkir.ir import Module, Operation, Value
from tkir.passes.analysis import in_loop
from tkir.passmanager import Options, Pass
from tkir.shared_plan import tile_stage_bytes
from tkir.types import TileType, VectorType

OP = "tk.reuse"
SKIPPED_ATTR = "reuse_smem_skipped"
PERSISTENT_REQUEST_ATTR = "persistent_requested"  # passes/persistent.py REQUEST_ATTR
PERSISTENT_REASON = ("the kernel may be made persistent (a 2-D grid, or @persistent(1)): the next output tile's "
                     "one-shot loads would refill a donor under this tile's epilogue")
STAGED_SRC = {"tk.store": 0, "tk.store_staged": 2}  # operand index of the shared tile each writes
BULK_READERS = {"tma.store": 1, "tk.store_staged": 2}  # ops whose copy engine reads a shared operand later
DEFAULT_ALIGN = 16  # tkir/shared_plan.py: a tile without an `align` starts on 16 bytes


class ReuseSmem(Pass):
    name = "reuse-smem"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            grid = kernel.attrs.get("grid")
            if kernel.attrs.get(PERSISTENT_REQUEST_ATTR) or (isinstance(grid, list) and len(grid) == 2):
                if _pairs(kernel):
                    kernel.attrs[SKIPPED_ATTR] = PERSISTENT_REASON
                continue
            for tile, donor, at, after_bulk in _pairs(kernel):
                _rewrite(kernel, tile, donor, at, after_bulk)


def _top_index(kernel: Operation) -> dict[int, int]:
    """id(op) -> the index of the top-level op of the kernel body that is or contains it."""
    out: dict[int, int] = {}
    for i, top in enumerate(kernel.body.ops):
        for op in top.walk():
            out[id(op)] = i
    return out


def _uses(kernel: Operation) -> dict[int, list[Operation]]:
    uses: dict[int, list[Operation]] = {}
    for op in kernel.walk():
        if op is kernel:
            continue
        for v in op.operands:
            uses.setdefault(id(v), []).append(op)
    return uses


def _writes(op: Operation, v: Value) -> bool:
    """op writes the shared tile v (a copy into it, a store of registers into it, a staged store through it)."""
    if op.name in ("tk.load", "tma.load", "pipe.copy", "pipe.async_copy") and not op.results:
        return bool(op.operands) and op.operands[0] is v
    idx = STAGED_SRC.get(op.name)
    return idx is not None and len(op.operands) > idx and op.operands[idx] is v


def _register_written(op: Operation, v: Value) -> bool:
    """op writes v from registers: `tk.store %v, %regs` or the staged store through v."""
    if op.name == "tk.store":
        return op.operands[0] is v and len(op.operands) > 1 and op.operands[1].type.space in ("rt", "rv")
    return op.name == "tk.store_staged" and op.operands[2] is v


def _align(t: TileType | VectorType) -> int:
    return int(t.get("align") or DEFAULT_ALIGN)


def _pairs(kernel: Operation) -> list[tuple[Operation, Operation, int, bool]]:
    """(tile's tk.alloc, donor's tk.alloc, top-level index of the tile's first use, whether the donor is a TMA
    store's source) for each match."""
    top = _top_index(kernel)
    uses = _uses(kernel)
    allocs = [op for op in kernel.body.ops if op.name == "tk.alloc"]
    span: dict[int, tuple[int, int]] = {}
    for a in allocs:
        us = uses.get(id(a.result), [])
        if us:
            idx = [top[id(u)] for u in us]
            span[id(a)] = (min(idx), max(idx))

    def donor_ok(d: Operation) -> bool:
        t = d.result.type
        return (id(d) in span and not isinstance(t.get("stages"), int)
                and not any(_writes(u, d.result) and in_loop(u, kernel) for u in uses[id(d.result)]))

    def tile_ok(a: Operation) -> bool:
        us = uses.get(id(a.result), [])
        writes = [u for u in us if _writes(u, a.result)]
        return (id(a) in span and bool(writes) and all(_register_written(u, a.result) for u in writes)
                and not isinstance(a.result.type.get("stages"), int))

    donors = [d for d in allocs if donor_ok(d)]
    tiles = sorted((a for a in allocs if tile_ok(a)), key=lambda a: span[id(a)][0])
    out: list[tuple[Operation, Operation, int, bool]] = []
    given: set[int] = set()
    for a in tiles:
        first = span[id(a)][0]
        need, align = tile_stage_bytes(a.result.type), _align(a.result.type)
        fits = [d for d in donors if d is not a and id(d) not in given and span[id(d)][1] < first
                and tile_stage_bytes(d.result.type) >= need and _align(d.result.type) >= align
                and id(d) not in {id(t) for t, *_ in out}]
        if not fits:
            continue
        # a donor the copy engine still reads (a TMA store's source) costs a wait for that store: taken last
        d = min(fits, key=lambda d: (_bulk_read(d, uses), tile_stage_bytes(d.result.type)))
        given.add(id(d))
        out.append((a, d, first, _bulk_read(d, uses)))
    return out


def _bulk_read(donor: Operation, uses: dict[int, list[Operation]]) -> bool:
    """The donor is the source of a TMA store (its copy engine reads it after the store is issued)."""
    return any(u.name in BULK_READERS and u.operands[BULK_READERS[u.name]] is donor.result
               for u in uses.get(id(donor.result), []))


def _rewrite(kernel: Operation, tile: Operation, donor: Operation, at: int, after_bulk: bool) -> None:
    body = kernel.body
    anchor = body.ops[at]
    body.remove(tile)
    reuse = Operation(OP, [donor.result], [], loc=tile.loc)
    reuse.results = [tile.result]  # the tile keeps its value (and name): its uses need no change
    tile.result.owner = reuse
    if after_bulk:
        reuse.attrs["after_bulk_reads"] = True
    body.insert_before(anchor, reuse)
