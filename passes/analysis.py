"""The analyses several passes read (a module of the passes, not a pass; STYLE.md: "A pass should not import
another pass").

A pass module imports the IR core (tkir.*), tkir.passes.builder and this module, never another pass; what two
passes both need to know is computed here, and this module imports no pass (tests/passes/test_pass_imports.py keeps
both rules). So no pass depends on the code, or the order, of another, and passes/registry.py alone imports
the passes. In this module, in order:

* attribute names one pass writes and another reads (CLUSTER_ATTR, CP_HOLD_ATTR, COARSEN_PENDING_ATTR);
* shared accesses: who touches a shared tile, how, and what that allows (select-swizzle, bank-conflicts and
  create-tma; below);
* copies between global memory and tiles: `classify_copy` (create-tma, infer-layouts, hoist-loads),
  `register_load_from_global` (cache-policy, readonly-loads, fence-loads), `global_store`, `copies_to_shared`;
* cp.async loops: `match_cp_async` / `cp_async_loop_loads`, the loops pipeline-cp-async rings, which are
  also the loops plan-occupancy and `pipeline` give sm_80 cp.async producer warps;
* rotation: `match_rotation` / `rotatable`, the loops overlap-mma rotates (pipeline-cp-async holds a stage
  for them);
* occupancy: `mma_sync_fragment_regs` (plan-occupancy's register budget, pipeline-cp-async's step_ahead) and
  `block_smem`, a block's share of an SM's shared memory (plan-occupancy, stage-epilogue);
* grids: `persistent_grid` and `one_block_per_sm` (persistent, stream-k).

Shared accesses. For a shared tile (`tk.alloc` of an st or sv) this module computes
* `tile_uses`: every warp-wide access to it, in program order, as a TileUse: the op, the
  instruction's address pattern (tkir/layout.py) and the kind of consumer (`ldmatrix.x4`/
  `stmatrix.x4` for 16-bit mma fragments, `ld/st.shared.v2` for f32 accumulators, `ld/st.shared.v4`
  (or .v2/.b32) for `row` tiles, 4-byte accesses for vectors, bf16 pairs for the staged epilogue,
  and the hardware paths `wgmma.desc` (core matrices: 8 rows x 16 B) and `tma`);
* `swizzle_problem`: why a layout is one some consumer cannot read or write (None when all can);
* `choose_swizzle`: select-swizzle's decision rule for one tile (passes/select_swizzle.py says it);
* `access_report`: bank-conflicts' entry for one access: its degree (wavefronts per 128-byte phase of
  the worst instruction, 32 banks x 4 bytes) under the tile's layout and under the plain layout.

select-swizzle and bank-conflicts apply these to every tile; create-tma applies the same two decisions
to the epilogue staging tile it creates after both ran (its swizzle is `choose_swizzle`'s, its report
`access_report`'s), so the report and the bank model cover it.
Register layouts come from infer-layouts; a register tile without one counts as a `row` tile.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from typing import Literal

import numpy as np

from tkir.access_report import AccessReport
from tkir.diagnostics import CompileError
from tkir.facts import FactError, OccupancyPlan
from tkir.ir import Block, Operation, Value, parent_op, uses_of
from tkir.layout import (
    BANK_BYTES,
    CHUNK_BYTES,
    INTERLEAVED,
    SWIZZLE_ALIGN,
    SWIZZLE_SPANS,
    WARP,
    Access,
    RegisterLayout,
    SharedLayout,
    bf16_pair_pattern,
    conflict_degree,
    core_matrix_pattern,
    dtype_bytes,
    fragment,
    layout_of,
    ldmatrix_pattern,
    make_layout,
    register_access,
    row_layout_warps,
    tma_pattern,
    vector_accesses,
)
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, PassError
from tkir.target import (
    CP_ASYNC_BYTES,
    DEFAULT_WARPS,
    MAX_BLOCKS_PER_SM,
    MAX_REGS_PER_THREAD,
    MAX_WARPS_PER_SM,
    MMA_A_WORDS,
    MMA_B_UNIT_WORDS,
    MMA_M,
    REG_ALLOC_UNIT,
    REGS_PER_SM,
    SMEM_ALLOC_UNIT,
    SMEM_PER_BLOCK,
    SMEM_PER_SM,
    SMEM_RESERVED_PER_BLOCK,
)
from tkir.types import GlobalType, TileType, VectorType, is_register, is_shared

# Attributes one pass writes and another reads.
CLUSTER_ATTR = "cluster"  # cluster-rows writes it on a kernel; the backend, plan-occupancy and the launch read it
# multicast marks the producer's drain loop, which persistent keeps after its tile loop (tkir.facts MULTICAST_ATTR:
# the kernel attr)
MULTICAST_DRAIN_ATTR = "multicast_drain"
CP_HOLD_ATTR = "cp_hold"  # pipeline-cp-async writes it on a loop that holds a stage; overlap-mma rotates those
# coarsen-rows writes it on a kernel whose grid it bounded, `min(E, NUM_SMS * K)`, leaving K to the plan: the
# rows expression E; plan-occupancy sizes K from its plan and removes it (passes/coarsen_rows.py)
COARSEN_PENDING_ATTR = "coarsen_rows_pending"
COARSEN_DONE_ATTR = "coarsen_rows"  # coarsen-rows' choice on the kernel: {blocks_per_sm = K, carried = n}

STAGED_SWIZZLE = 128  # the backend writes tk.store_staged's stage as 128B-swizzled 64-column panels
                      # (backend/rules_wgmma.py), one TMA store box each

# "tma": a TMA copy (or its cp.async fallback); "wgmma": a wgmma descriptor operand; "ldmatrix": an
# mma.sync operand; "ldst": thread loads/stores of a register tile or vector; "staged": the staged
# epilogue's bf16-pair writes (tk.store_staged)
Consumer = Literal["tma", "wgmma", "ldmatrix", "ldst", "staged"]


@dataclass(frozen=True)
class TileUse:
    """One op's access to a shared tile: the instruction pattern and what the consumer is."""

    op: Operation
    access: Access
    consumer: Consumer
    major: str | None = None  # wgmma operands: "K" or "MN"


def no_producer(kernel: Operation) -> bool:
    """The source asked for no producer warpgroup, `@warpgroups(consumers=N, producers=0)`: create-tma leaves
    its loads into shared memory as cp.async copies (pipeline-cp-async rings them), so that is also how
    they write the tile here."""
    wg = kernel.attrs.get("warpgroups") if kernel.name == "tk.kernel" else None
    return isinstance(wg, dict) and wg.get("producers") == 0


def tile_uses(root: Operation, tile: Value, options: Options) -> list[TileUse]:
    """Every access to shared `tile` under `root`, in program order. A register layout that does not fit
    its tile (IR text can say anything) is a located error at the op that reads or writes the tile."""
    try:
        return _tile_uses(root, tile, options)
    except FactError:
        raise
    except ValueError as e:
        op = next((o for o, _ in uses_of(root, tile) if _misfit(o) is not None), None)
        why = _misfit(op) if op is not None else str(e)
        raise CompileError(op.loc if op is not None else None, f"shared tile '{tile.name}': {why}") from None


def _misfit(op: Operation) -> str | None:
    """Why a register operand or result of `op` does not fit its layout, or None."""
    for v in (*op.operands, *op.results):
        t = v.type
        lay = layout_of(t) if isinstance(t, (TileType, VectorType)) and is_register(t) else None
        if lay is None:
            continue
        try:
            fragment(lay, t.dtype, t.shape if isinstance(t, TileType) else (t.n,))
        except ValueError as e:
            return f"layout of {v.name or 'a value'} does not fit {t.bare()}: {e}"
    return None


def _tile_uses(root: Operation, tile: Value, options: Options) -> list[TileUse]:
    t = tile.type
    shape = t.shape if isinstance(t, TileType) else (t.n,)
    lay = shared_layout(t)
    rows, row_bytes = lay.rows, lay.row_bytes
    out: list[TileUse] = []
    for op, idx in uses_of(root, tile):
        name = op.name
        fill = name in ("tk.load", "tma.load") and not op.results and idx == 0
        drain = name in ("tk.store", "tma.store") and idx == 1 and isinstance(op.operands[0].type, GlobalType)
        if fill or drain:
            acc = tma_pattern(rows, row_bytes, lay.box_bytes)
            if options.no_tma or op.attrs.get("no_tma") or (fill and no_producer(root)):
                acc.op, acc.hardware = "cp.async", False
            out.append(TileUse(op, acc, "tma" if acc.hardware else "ldst"))
        elif name == "tk.load" and op.results and op.attrs.get("trans") is True:
            out.append(TileUse(op, transposed_load_access(reg_layout(op.result), t.dtype, shape), "ldst"))
        elif name in ("tk.load", "tk.store") and isinstance(t, VectorType) and (op.results if name == "tk.load"
                                                                                  else idx == 0):
            # a register vector: the backend's groups of consecutive slots, one access per width
            reg = op.result if name == "tk.load" else op.operands[1]
            out += [TileUse(op, acc, "ldst") for acc in vector_accesses(name == "tk.load", reg_layout(reg), t.dtype,
                                                                         t.n)]
        elif name == "tk.load" and op.results:
            acc = register_access(True, reg_layout(op.result), t.dtype, shape)
            out.append(TileUse(op, acc, "ldst"))
        elif name == "tk.store" and idx == 0:
            acc = register_access(False, reg_layout(op.operands[1]), t.dtype, shape)
            out.append(TileUse(op, acc, "ldst"))
        elif name == "tk.store_staged" and idx == 2 and isinstance(t, TileType):
            out += staged_store_uses(op, t)
        elif name == "tk.mma" and idx in (0, 1):
            trans = bool(op.attrs.get("trans_a" if idx == 0 else "trans_b"))
            if options.target == "sm_80":
                # A (M x K) and N x K B: ldmatrix.x4; K x N B: ldmatrix.x4.trans (HOPPER §6.3)
                op_name = "ldmatrix.x4.trans" if (idx == 1) != trans else "ldmatrix.x4"
                out.append(TileUse(op, ldmatrix_pattern(op_name, rows, row_bytes), "ldmatrix"))
            else:
                k_major = (idx == 0) != trans  # A plain and B transposed are K-major
                out.append(TileUse(op, core_matrix_pattern(rows, row_bytes), "wgmma", "K" if k_major else "MN"))
    return out


def staged_store_uses(op: Operation, stage: TileType) -> list[TileUse]:
    """`tk.store_staged %G, %v, %stage, ...`: the warpgroups write their accumulator rows into the stage as
    bf16 pairs (st.shared.b32), then TMA stores read it (a hardware path)."""
    lay = shared_layout(stage)
    return [TileUse(op, bf16_pair_pattern("st.shared.b32", lay.rows, lay.row_bytes), "staged"),
            TileUse(op, tma_pattern(lay.rows, lay.row_bytes, lay.box_bytes), "tma")]


def swizzle_problem(layout: SharedLayout, uses: list[TileUse]) -> str | None:
    """Why no consumer-compatible layout can use this swizzle (None: every consumer can)."""
    why = layout.problem()
    if why:
        return why
    for u in uses:
        if u.consumer == "wgmma" and layout.swizzle == 0 and layout.row_bytes != CHUNK_BYTES:
            return (f"wgmma reads an unswizzled operand only as 16-byte rows of core matrices, "
                    f"not {layout.row_bytes}-byte rows (HOPPER.md §2.3); the interleaved layout "
                    f"(16-byte panels) is the unswizzled form it reads")
        if u.consumer == "staged" and layout.swizzle != STAGED_SWIZZLE:
            return (f"tk.store_staged writes its staging tile as {STAGED_SWIZZLE}B-swizzled panels "
                    f"(the backend's staged epilogue)")
    return None


def choose_swizzle(alloc: Operation, t: TileType, uses: list[TileUse], options: Options) -> int:
    """select-swizzle's decision for the shared tile `alloc` defines (rules in passes/select_swizzle.py)."""
    if options.swizzle == "none":
        return unswizzled(t, uses)
    override = alloc.attrs.get("swizzle")
    if override == 0:
        return unswizzled(t, uses)
    if override is not None:
        lay = SharedLayout(t.dtype, t.rows, t.cols, override if isinstance(override, int) else -1)
        why = swizzle_problem(lay, uses)
        if why is not None:
            name = alloc.result.name or "tile"
            raise PassError(alloc.loc, f"@swizzle({override}) cannot be used for shared tile '{name}' "
                            f"({t.bare()}, rows of {lay.row_bytes} bytes): {why}",
                            hint="remove the annotation to let select-swizzle choose")
        return int(override)
    wide_first = any(u.consumer in ("tma", "wgmma") for u in uses)
    order = sorted(SWIZZLE_SPANS, reverse=wide_first)
    best, best_degree = None, None
    for span in order:
        lay = SharedLayout(t.dtype, t.rows, t.cols, span)
        if swizzle_problem(lay, uses) is not None:
            continue
        degree = max((conflict_degree(u.access, lay) for u in uses), default=1)
        if best_degree is None or degree < best_degree:
            best, best_degree = span, degree
    if best is None:  # no consumer-compatible span: leave it plain (the verifier-level fallback)
        return 0
    return best


def unswizzled(t: TileType, uses: list[TileUse]) -> int:
    """The unswizzled layout for a tile: interleaved (16-byte panels) when wgmma reads it and its
    rows are wider than one core-matrix row, else plain rows."""
    row_bytes = SharedLayout(t.dtype, t.rows, t.cols).row_bytes
    if row_bytes > CHUNK_BYTES and any(u.consumer == "wgmma" for u in uses):
        return INTERLEAVED
    return 0


def access_report(tile: Value, use: TileUse, layout: SharedLayout) -> AccessReport:
    """bank-conflicts' entry for one access: its degree under `layout` and under the plain layout."""
    plain = SharedLayout(layout.dtype, layout.rows, layout.cols)
    return AccessReport(use.access.op, tile.name or "", conflict_degree(use.access, layout),
                        conflict_degree(use.access, plain), use.access.hardware, use.major)


def shared_layout(t: TileType | VectorType) -> SharedLayout:
    """The physical layout a shared tile's or vector's type states (swizzle and padding)."""
    if isinstance(t, VectorType):
        return SharedLayout(t.dtype, 1, t.n)
    return SharedLayout(t.dtype, t.rows, t.cols, int(t.get("swizzle", 0) or 0), int(t.get("pad", 0) or 0))


def with_layout(t: TileType, layout: SharedLayout) -> TileType:
    """`t` with `layout`'s swizzle, its alignment and its padding (none when 0) in the type."""
    t = t.with_attr("swizzle", layout.swizzle).with_attr("align", SWIZZLE_ALIGN[layout.swizzle])
    return t.with_attr("pad", layout.pad or None)


def transposed_load_access(layout: RegisterLayout, dtype: str, src_shape: tuple[int, int]) -> Access:
    """`%x = tk.load %a {trans = true}`: element (r, c) of x comes from a[c, r].

    16-bit mma fragments use ldmatrix with the opposite `.trans` of a plain load (ldmatrix moves 8x8
    matrices of 16-byte rows of `a` either way, HOPPER §6.3), so the shared pattern is ldmatrix's over
    `a`. Any other layout reads element by element: register slot j of each lane is one access to the
    word holding a[c, r] (a row chunk of x is a column of a, so no vector access applies)."""
    rows, cols = src_shape
    eb = dtype_bytes(dtype)
    kind = layout.kind
    if kind in ("wgmma_acc", "wgmma_a", "mma_a", "mma_c") and eb == 2:
        return ldmatrix_pattern("ldmatrix.x4.trans", rows, cols * eb)
    if kind == "mma_b" and eb == 2:
        return ldmatrix_pattern("ldmatrix.x4", rows, cols * eb)
    frag = fragment(layout, dtype, (cols, rows))  # x is cols x rows
    rs, cs = [], []
    for w in range(frag.shape[0] // WARP):
        block = frag[w * WARP:(w + 1) * WARP]
        for j in range(block.shape[1]):
            idx = block[:, j]
            xr, xc = idx // rows, idx % rows  # x[xr, xc] = a[xc, xr]
            rs.append(np.where(idx >= 0, xc, -1))
            cs.append(np.where(idx >= 0, (xr * eb) // BANK_BYTES * BANK_BYTES, -1))
    op = f"ld.shared.b{8 * min(eb, BANK_BYTES)}"
    return Access(op, BANK_BYTES, np.stack(rs), np.stack(cs))


def reg_layout(v: Value) -> RegisterLayout:
    """The register layout of `v` (infer-layouts'), or the default `row` layout without one."""
    layout = layout_of(v.type) if is_register(v.type) else None
    if layout is not None:
        return layout
    t = v.type
    vec = max(CHUNK_BYTES // dtype_bytes(t.dtype), 1)
    if isinstance(t, TileType):
        return make_layout("row", warps=row_layout_warps(t.rows, t.cols, vec, DEFAULT_WARPS), vec=vec)
    return make_layout("row_vec", warps=1)


# ---------------------------------------------------------------------------------------------
# Copies between global memory and tiles.


def classify_copy(op: Operation) -> tuple[str, Value, Value] | None:
    """('shared' | 'register', global value, shared-or-register value) for a tk.load / tk.store that
    copies between global memory and a tile or vector, else None (create-tma's classification, also used
    by infer-layouts and hoist-loads)."""
    if op.name == "tk.load":
        if not op.results and isinstance(op.operands[1].type, GlobalType):
            return "shared", op.operands[1], op.operands[0]
        if op.results and isinstance(op.operands[0].type, GlobalType):
            return "register", op.operands[0], op.result
    if op.name == "tk.store" and isinstance(op.operands[0].type, GlobalType):
        v = op.operands[1]
        if is_shared(v.type):
            return "shared", op.operands[0], v
        if is_register(v.type):
            return "register", op.operands[0], v
    return None


def register_load_from_global(op: Operation) -> bool:
    """A tk.load whose source is a global tensor and whose result is a register tile or vector."""
    if op.name != "tk.load" or not op.results or not op.operands:
        return False
    t = op.results[0].type
    return (isinstance(op.operands[0].type, GlobalType) and isinstance(t, TileType | VectorType)
            and t.space in ("rt", "rv"))


GLOBAL_READS = frozenset({"tk.load", "tk.gather", "tma.load", "tma.desc"})  # ops that only read a global operand


PROBLEM_SIZES_ATTR = "problem_sizes"  # tk.kernel: the size bucket tkir.compile(sizes=...) compiled it for (tkir/api.py)
# The most 128-thread blocks (one warpgroup) an SM holds: 2048 threads per SM (HOPPER.md §1). A grid of at most
# NUM_SMS times this many blocks runs in one wave whatever the plan: every block's loads are issued at the start.
ONE_WAVE_BLOCKS_PER_SM = 16


def grid_blocks_at_problem_sizes(kernel: Operation) -> int | None:
    """The kernel's grid size at the size bucket it was compiled for; None when it was compiled without sizes or
    the bucket does not determine its grid."""
    from tkir import symexpr
    from tkir.target import NUM_SMS

    sizes = kernel.attrs.get(PROBLEM_SIZES_ATTR)
    if not isinstance(sizes, dict):
        return None
    blocks = 1
    for g in kernel.attrs.get("grid", []):
        try:
            blocks *= max(1, symexpr.evaluate(g, {**sizes, "NUM_SMS": NUM_SMS}))
        except (KeyError, ValueError, TypeError, ZeroDivisionError):
            return None
    return blocks


def latency_bound_rows(kernel: Operation) -> int | None:
    """For a kernel without tk.mma compiled for a size bucket whose grid fits in one wave at any plan (at most
    NUM_SMS x ONE_WAVE_BLOCKS_PER_SM blocks): its grid (such a kernel is a few memory round trips end to end);
    None otherwise."""
    from tkir.target import NUM_SMS

    blocks = grid_blocks_at_problem_sizes(kernel)
    if blocks is None or blocks > NUM_SMS * ONE_WAVE_BLOCKS_PER_SM:
        return None
    if any(op.name == "tk.mma" for op in kernel.walk()):
        return None
    return blocks


def written_globals(kernel: Operation) -> set[int]:
    """id() of every global tensor an op of the kernel may write: any op with a global operand other than the
    reads (a store, a TMA store or reduce-add, a staged epilogue, a Stream-K partial)."""
    out: set[int] = set()
    for op in kernel.walk():
        if op.name not in GLOBAL_READS:
            out.update(id(v) for v in op.operands if isinstance(v.type, GlobalType))
    return out


def global_store(op: Operation) -> bool:
    """A tk.store to a global tensor."""
    return op.name == "tk.store" and bool(op.operands) and isinstance(op.operands[0].type, GlobalType)


def copies_to_shared(op: Operation) -> bool:
    """tk.load / tma.load of a global tensor into a shared tile or vector."""
    return (op.name in ("tk.load", "tma.load") and not op.results and len(op.operands) >= 2
            and isinstance(op.operands[0].type, (TileType, VectorType)) and is_shared(op.operands[0].type)
            and isinstance(op.operands[1].type, GlobalType))


# ---------------------------------------------------------------------------------------------
# cp.async loops: the loops pipeline-cp-async rings (passes/pipeline_cp_async.py says when).


@dataclass
class CpAsyncMatch:
    """A loop pipeline-cp-async's schedule applies to (`match_cp_async`)."""

    loads: list[Operation]   # the loop body's global -> shared tile copies, in order
    step: int                # the loop's constant step (> 0)


def cp_async_loop_loads(kernel: Operation, loop: Operation) -> list[Operation] | None:
    """The loop's tile loads if pipeline-cp-async's schedule (or the sm_80 producer warps of plan-occupancy
    and `pipeline`, which share its conditions) applies to it, else None."""
    m = match_cp_async(kernel, loop) if loop.parent is kernel.body else None
    return m.loads if m is not None else None


def match_cp_async(kernel: Operation, loop: Operation) -> CpAsyncMatch | None:
    """The loop's tile loads if pipeline-cp-async's schedule applies (its module docstring), else None."""
    step = const_int(loop.operands[2])
    if step is None or step <= 0:
        return None
    body = loop.body
    loads = [op for op in body.ops if _is_shared_load(op)]
    if not loads or not any(op.name == "tk.mma" for op in loop.walk()):
        return None
    top = {id(op) for op in body.ops}
    for op in loop.walk():
        if op is not loop and copies_to_shared(op) and (id(op) not in top or not _is_shared_load(op)):
            return None  # a copy in a nested region: not ring-buffered
    bufs = [ld.operands[0] for ld in loads]
    if len(set(map(id, bufs))) != len(bufs):
        return None
    inside = {id(op) for op in loop.walk()}
    for buf in bufs:
        alloc = buf.owner
        if not (isinstance(alloc, Operation) and alloc.name == "tk.alloc" and alloc.parent is kernel.body
                and buf.type.get("stages") is None):
            return None
        for op in kernel.walk():
            if op is not alloc and buf in op.operands and id(op) not in inside:
                return None  # used before or after the loop: the ring buffer has no stage there
    for ld in loads:
        i = body.ops.index(ld)
        for op in body.ops[:i]:
            if any(ld.operands[0] in x.operands for x in op.walk()):
                return None  # read before its load: that reads the previous iteration's tile
    for op in loop.walk():
        if op.name in ("tk.store", "tk.load") and op not in loads and op.operands and \
                op.operands[0] in bufs and (op.name == "tk.store" or not op.results):
            return None  # another writer of a loaded tile
    for ld in loads:
        if not all(_coordinate_ok(c, loop) for c in ld.operands[2:]):
            return None
    return CpAsyncMatch(loads, step)


def _coordinate_ok(v: Value, loop: Operation) -> bool:
    """v is the loop index, defined before the loop, or scalar arithmetic of those in the body."""
    if v is loop.body.args[0]:
        return True
    d = v.owner
    if isinstance(d, Block):
        return d is not loop.body and not _inside(d, loop)
    if not isinstance(d, Operation):
        return False
    if d.parent is not loop.body:
        return not _inside_op(d, loop)
    return d.name.startswith("arith.") and not d.regions and all(_coordinate_ok(x, loop) for x in d.operands)


def _inside(blk: Block, loop: Operation) -> bool:
    return any(r.block is blk for op in loop.walk() for r in op.regions)


def _inside_op(op: Operation, loop: Operation) -> bool:
    return any(x is op for x in loop.walk())


def _is_shared_load(op: Operation) -> bool:
    """tk.load %tile, %global, coords... (a cp.async copy on this path), also into a shared vector of whole
    16-byte chunks (a one-row tile of the tensor's last two dims, or of a one-dim tensor: backend/rules_sm80.py
    `row_tile`; a narrower vector has no cp.async chunk to copy)."""
    if not (op.name == "tk.load" and not op.results and len(op.operands) >= 2
            and isinstance(op.operands[1].type, GlobalType)):
        return False
    t = op.operands[0].type
    if isinstance(t, VectorType):
        return t.space == "sv" and t.nbytes % CP_ASYNC_BYTES == 0
    return isinstance(t, TileType) and t.space == "st"


def const_int(v: Value) -> int | None:
    """The integer an `arith.const` defines `v` as, else None."""
    d = v.owner
    if isinstance(d, Operation) and d.name == "arith.const" and isinstance(d.attrs.get("value"), int) \
            and not isinstance(d.attrs.get("value"), bool):
        return int(d.attrs["value"])
    return None


# ---------------------------------------------------------------------------------------------
# Rotation: the loops overlap-mma rotates (passes/overlap_mma.py says how).

# Element-wise ops that may sit on the accumulator chain between the carried value and M2.
CHAIN_OPS = frozenset({"tk.mul", "tk.add", "tk.sub", "tk.div"})


class RotationPlan:
    """overlap-mma's split of a loop body: M1, M2 and stage 1 (M2, its accumulator chain, its stage views and
    waits), the release of M2's stage, and the carried accumulator M2 updates."""

    def __init__(self, m1: Operation, m2: Operation, stage1: list[Operation], arrive: Operation | None,
                 acc_arg: Value):
        self.m1, self.m2, self.stage1, self.arrive, self.acc_arg = m1, m2, stage1, arrive, acc_arg


def _users(blk: Block, v: Value) -> list[Operation]:
    return [op for op in blk.ops for x in op.walk() if v in x.operands]


def defined_in(blk: Block, v: Value) -> bool:
    """`v` is the result of an op of `blk` itself (not of a nested region, not a block argument)."""
    return isinstance(v.owner, Operation) and v.owner.parent is blk


def _depends_on(v: Value, target: Operation, blk: Block, seen: set[int] | None = None) -> bool:
    """Whether `v` is computed (inside `blk`) from `target`'s result."""
    seen = seen if seen is not None else set()
    d = v.owner
    if not isinstance(d, Operation) or d.parent is not blk or id(d) in seen:
        return False
    if d is target:
        return True
    seen.add(id(d))
    return any(_depends_on(x, target, blk, seen) for x in d.operands)


def match_rotation(loop: Operation) -> RotationPlan | None:
    """The two chained mmas of a loop body overlap-mma rotates and the split of the body around them
    (passes/overlap_mma.py's docstring), or None when the loop does not have that shape."""
    blk = loop.body
    term = blk.terminator
    if term is None or any(op.regions for op in blk.ops if op is not term):
        return None  # nested control flow in the body: not rotated
    mmas = [op for op in blk.ops if op.name == "tk.mma"]
    for m2 in mmas:
        users = _users(blk, m2.result)
        if users != [term]:
            continue
        # the accumulator chain: carried arg -> element-wise ops (each read once) -> M2
        chain: list[Operation] = []
        v = m2.operands[2]
        while defined_in(blk, v) and v.owner.name in CHAIN_OPS and len(_users(blk, v)) == 1:
            chain.append(v.owner)
            v = v.owner.operands[0]
        if v not in blk.args[1:]:
            continue
        acc_arg = v
        a, bop = m2.operands[0], m2.operands[1]
        if not (isinstance(a.type, TileType) and a.type.space == "rt" and defined_in(blk, a)):
            continue
        m1s = [m for m in mmas if m is not m2 and m.operands[2].owner is not None
               and getattr(m.operands[2].owner, "name", "") == "tk.fill" and _depends_on(a, m, blk)]
        if not m1s:
            continue
        m1 = m1s[0]
        if blk.ops.index(m1) > blk.ops.index(m2):
            continue
        views = []
        if defined_in(blk, bop) and bop.owner.name == "pipe.stage" and _users(blk, bop) == [m2]:
            views = [bop.owner]
        # the release (and, after early-release, the wait) of the stage M2 reads go with M2
        tile = views[0].operands[0].name if views else None
        arrives = [op for op in blk.ops if op.name == "pipe.arrive"]
        tagged = [op for op in arrives if op.attrs.get("tile") is not None]
        if tagged:
            arrives = [op for op in tagged if op.attrs.get("tile") == tile]
        if len(arrives) > 1:
            continue
        waits = [op for op in blk.ops if op.name == "pipe.wait" and tile is not None
                 and op.attrs.get("tile") == tile]
        stage1 = [op for op in blk.ops if op in chain or op is m2 or op in views or op in waits]
        s1 = {id(op) for op in stage1} | {id(op) for op in arrives}
        # stage 0 must not read stage 1's results (other than through the yield) nor the accumulator
        ok = True
        for op in blk.ops:
            if id(op) in s1 or op is term:
                continue
            for x in op.operands:
                if x is acc_arg or (isinstance(x.owner, Operation) and id(x.owner) in s1):
                    ok = False
        if not ok:
            continue
        return RotationPlan(m1, m2, stage1, arrives[0] if arrives else None, acc_arg)
    return None


def rotation_hazard(loop: Operation, plan: RotationPlan) -> str | None:
    """Why rotating `loop` by `plan` would be unsafe (None: it is safe). Rotation runs stage 1 (M2 and what
    goes with it) one iteration late, so every ring-buffer stage it reads must still be held then:
    * a stage view M2's stage reads but does not own (a `pipe.stage` left in stage 0 because stage 0 reads it
      too, e.g. dO read by both dV += P^T dO and dP = dO V^T) is released by stage 0's `pipe.arrive` of that
      ring before the late M2 would read it: the producer may refill it under the read;
    * a `deferred` release in stage 0 releases the previous iteration's stage from the loop's body, but the
      prologue (stage 0 of the first block) runs outside any loop."""
    blk = loop.body
    s1 = {id(op) for op in plan.stage1} | ({id(plan.arrive)} if plan.arrive is not None else set())
    for op in plan.stage1:
        for x in op.walk():
            for v in x.operands:
                view = v.owner
                if not (is_shared(v.type) and defined_in(blk, v) and view.name == "pipe.stage"
                        and id(view) not in s1):
                    continue
                buf = view.operands[0]
                for rel in blk.ops:
                    if rel.name == "pipe.arrive" and id(rel) not in s1 \
                            and rel.attrs.get("tile") in (None, buf.name):
                        return (f"'{op.name}' at line {_line(op)} would read a stage of %{buf.name} in the next "
                                f"iteration, after its release in this one ('pipe.arrive %{rel.operands[0].name}' "
                                f"{_where(blk, rel)}): the producer may refill it under the read")
    for op in blk.ops:
        if op.name == "pipe.arrive" and op.attrs.get("deferred") and id(op) not in s1:
            return (f"the deferred 'pipe.arrive %{op.operands[0].name}' at line {_line(op)} releases the previous "
                    "iteration's stage and would have to run in the prologue, outside the loop")
    return None


def _line(op: Operation) -> str:
    return str(op.loc.line) if op.loc is not None else "?"


def _where(blk: Block, op: Operation) -> str:
    """`at line N`, or for an op a pass made without a place, `after line N` of the closest op before it."""
    if op.loc is not None:
        return f"at line {op.loc.line}"
    before = [x for x in blk.ops[:blk.ops.index(op)] if x.loc is not None]
    return f"after line {before[-1].loc.line}" if before else "in the loop"


def rotatable(loop: Operation) -> TileType | None:
    """The register A operand of the second mma (what rotation carries into the next iteration, beside
    alpha) if the loop has the shape overlap-mma rotates (two chained mmas, the second's accumulator
    carried), else None: pipeline-cp-async asks, to keep a stage for the rotated second mma (its `hold`)."""
    plan = match_rotation(loop)
    return None if plan is None else plan.m2.operands[0].type


# ---------------------------------------------------------------------------------------------
# Occupancy: what plan-occupancy counts that other passes count the same way.

# Shared memory per block as the CUDA occupancy calculator counts it (HOPPER.md §7.3).


def round_up(x: int, unit: int) -> int:
    """`x` rounded up to a multiple of `unit`."""
    return -(-x // unit) * unit


def block_smem(smem_bytes: int) -> int:
    """What one block takes of an SM's shared memory: its bytes plus the 1 KB the system reserves per
    block, in the occupancy calculator's 128-B units."""
    return round_up(smem_bytes + SMEM_RESERVED_PER_BLOCK, SMEM_ALLOC_UNIT)


def smem_growth_problem(plan: OccupancyPlan | None, grow: int, what: str) -> str | None:
    """Why a block that planned `plan` cannot take `what`, `grow` more bytes of shared memory (over the block's
    limit, or fewer blocks per SM than planned), or None where it can (or there is no plan: the launch then sizes
    shared memory from the allocations)."""
    if plan is None or plan.smem_bytes is None:
        return None
    smem = plan.smem_bytes + grow
    if smem > SMEM_PER_BLOCK:
        return f"{what} ({grow} B) would take the block to {smem} B of shared memory, over {SMEM_PER_BLOCK}"
    blocks = plan.blocks_per_sm or 1
    if blocks * block_smem(smem) > SMEM_PER_SM:
        return (f"{what} ({grow} B) would leave room for fewer than the plan's {blocks} blocks per SM "
                f"({smem} B each)")
    return None


def grow_plan_smem(kernel: Operation, plan: OccupancyPlan | None, grow: int) -> None:
    """Record `grow` more bytes of shared memory in the kernel's occupancy plan (a pass that allocates after
    plan-occupancy)."""
    if plan is not None and plan.smem_bytes is not None:
        smem = plan.smem and replace(plan.smem, fixed_bytes=plan.smem.fixed_bytes + grow)
        kernel.attrs[OccupancyPlan.ATTR] = replace(plan, smem_bytes=plan.smem_bytes + grow, smem=smem).to_attr()


def resident_blocks(smem_bytes: int, threads: int, regs: int) -> int:
    """Blocks per SM that shared memory, registers (`regs` per thread), warps and the block limit allow."""
    return min(SMEM_PER_SM // block_smem(smem_bytes), REGS_PER_SM // (threads * regs),
               MAX_WARPS_PER_SM // (threads // WARP), MAX_BLOCKS_PER_SM)


def plan_with_more_registers(plan: OccupancyPlan | None, extra: int) -> tuple[OccupancyPlan | None, str]:
    """The one-role plan `plan` with `extra` more registers a thread at the role's peak (a pass that makes a value
    live longer after plan-occupancy): its rounded registers and the blocks per SM they leave; or None and why
    the block cannot take them (no such plan, a warp-specialized or clustered block, or over a thread's limit)."""
    if plan is None or plan.budget is None or not plan.threads or len(plan.roles) != 1:
        return None, "no one-role occupancy plan"
    name, role = plan.roles[0]
    if role.threads != plan.threads:
        return None, "the block's threads are spread over a cluster"
    needed = round_up(plan.budget.total + extra, REG_ALLOC_UNIT)
    fit = min(MAX_REGS_PER_THREAD, REGS_PER_SM // plan.threads // REG_ALLOC_UNIT * REG_ALLOC_UNIT)
    if needed > fit:
        return None, f"{needed} registers a thread, over the {fit} a block of {plan.threads} threads can have"
    budget = replace(plan.budget, live_tile_regs=plan.budget.live_tile_regs + extra)
    blocks = resident_blocks(plan.smem_bytes or 0, plan.threads, needed)
    return replace(plan, roles=((name, replace(role, regs=needed)),), budget=budget, blocks_per_sm=blocks), ""


def mma_sync_fragment_regs(op: Operation) -> int:
    """Registers per thread of the operand fragments an mma.sync loads from shared memory while it runs
    (backend/rules_sm80.py): one k16 step of A, MMA_A_WORDS per m16 block of the warp's tile, when A is
    shared, and one ldmatrix.x4 unit of B, MMA_B_UNIT_WORDS, when B is; 0 for any other op (wgmma reads
    its shared operands through descriptors, register operands are tiles counted as such)."""
    if op.name != "tk.mma":
        return 0
    try:
        layout = layout_of(op.result.type)
    except ValueError:
        return 0
    if layout is None or layout.kind != "mma_c":
        return 0
    a, b = op.operands[0], op.operands[1]
    m16_blocks = op.result.type.rows // layout.row_warps // MMA_M
    return (MMA_A_WORDS * m16_blocks if is_shared(a.type) else 0) + (MMA_B_UNIT_WORDS if is_shared(b.type) else 0)


# ---------------------------------------------------------------------------------------------
# Grids of persistent kernels (persistent writes them, stream-k reads them).


def persistent_grid(tiles: str, balanced: bool) -> str:
    """The persistent grid over T = `tiles` output tiles: R = cdiv(T, NUM_SMS) rounds either way; balanced,
    cdiv(T, R) blocks are enough for them; otherwise one block per SM, min(T, NUM_SMS)."""
    return f"cdiv({tiles}, cdiv({tiles}, NUM_SMS))" if balanced else f"min({tiles}, NUM_SMS)"


def one_block_per_sm(grid: str) -> str:
    """A balanced persistent grid (persistent_grid(T, True)) as the one-block-per-SM grid over the same
    tiles (stream-k starts from it, then sizes its own grid); any other grid unchanged."""
    call = ast.parse(grid, mode="eval").body
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "cdiv"
            and len(call.args) == 2 and isinstance(inner := call.args[1], ast.Call)
            and isinstance(inner.func, ast.Name) and inner.func.id == "cdiv" and len(inner.args) == 2
            and ast.dump(inner.args[0]) == ast.dump(call.args[0])
            and isinstance(inner.args[1], ast.Name) and inner.args[1].id == "NUM_SMS"):
        tiles = ast.get_source_segment(grid, call.args[0])
        if tiles is not None and persistent_grid(tiles, True) == grid:
            return persistent_grid(tiles, False)
    return grid


def in_loop(op: Operation, kernel: Operation) -> bool:
    """Whether `op` is nested in an scf.for of `kernel`."""
    p = parent_op(op)
    while p is not None and p is not kernel:
        if p.name == "scf.for":
            return True
        p = parent_op(p)
    return False


# --- coarsen-rows' match, shared with infer-layouts -------------------------------------------------------------
# Which reduce-add stores coarsen-rows can carry (passes/coarsen_rows.py's docstring gives the rewrite and its
# preconditions). infer-layouts, which runs before it, sizes such a kernel's warps for the carried sums too
# (CARRIED_ROW_ELEMS_PER_THREAD there): both ask `coarsen_match`, so they agree on which kernels it is.
# Ops of kernels that are not register row kernels: shared memory, tensor cores, the pipeline's and TMA's
# ops, warp roles, workspaces and stream-K's partial tiles.
FOREIGN_OPS = frozenset({"tk.mma", "tk.mma_wait", "tk.role", "tk.alloc", "tk.workspace", "tk.partial_add",
                         "tk.partial_store", "tk.store_staged", "tk.store_warp_staged", "tk.launch_count"})
FOREIGN_PREFIXES = ("pipe.", "tma.")
# Kernel attrs of schedules another pass already chose (cluster-rows, persistent, stream-k).
FOREIGN_ATTRS = ("cluster", "tile_order", "stream_k")
# Ops that may stay before the loop when they do not depend on the block: scalar arithmetic and sizes.
INVARIANT_PREFIX = "arith."
INVARIANT_OPS = frozenset({"tk.size"})
ACCESS_OPS = frozenset({"tk.load", "tk.store", "tk.gather"})
CARRIED_DTYPE = "f32"


def _at_line(op: Operation) -> str:
    return f" at line {op.loc.line}" if op.loc is not None and op.loc.line else ""


def kernel_reason(kernel: Operation) -> str | None:
    """Why the kernel as a whole cannot be coarsened, or None."""
    grid = kernel.attrs.get("grid")
    if not isinstance(grid, list) or len(grid) != 1:
        return f"a {len(grid) if isinstance(grid, list) else '?'}-D grid (coarsen-rows walks a 1-D grid of rows)"
    for attr in FOREIGN_ATTRS:
        if attr in kernel.attrs:
            return f"the kernel's schedule is set already ({attr})"
    for op in kernel.walk():
        if op.name in FOREIGN_OPS or op.name.startswith(FOREIGN_PREFIXES) or any(is_shared(r.type) for r in op.results):
            return (f"'{op.name}'{_at_line(op)}: not a register row kernel (shared memory, mma, pipeline or TMA); "
                    "coarsen-rows rewrites register row kernels only")
        if op.name == "tk.grid_dim":
            return f"the kernel reads the grid size{_at_line(op)}, which the rewrite changes"
    ids = {op.result for op in kernel.walk() if op.name == "tk.block_id"}
    for op in kernel.walk():
        if op.name == "tk.block_id" and op.attrs.get("dim") != 0:
            return f"block index dim {op.attrs.get('dim')} read{_at_line(op)} (coarsen-rows walks block.x only)"
        for i, v in enumerate(op.operands):
            if v in ids and not _row_index(op, i):
                return (f"block.x used other than as a row index by '{op.name}'{_at_line(op)} "
                        "(coarsen-rows walks rows: block.x must be the first index of loads and stores)")
    return None


def _row_index(op: Operation, i: int) -> bool:
    """Operand i of `op` is the first (row) index of a global access: tk.load X, r, ...; tk.store X, v, r, ..."""
    return (op.name in ("tk.load", "tk.gather") and i == 1) or (op.name == "tk.store" and i == 2)


def invariant_ops(kernel: Operation) -> list[Operation]:
    """The top-level ops that stay before the loop: scalar arithmetic and sizes that depend on neither the
    block index nor anything the loop computes (constants, `tk.size`, the reduce-add stores' indices)."""
    out: list[Operation] = []
    inside: set[Value] = set()
    for op in kernel.body.ops:
        if (not op.regions and (op.name.startswith(INVARIANT_PREFIX) or op.name in INVARIANT_OPS)
                and not any(v in inside for v in op.operands)):
            out.append(op)
        else:
            inside.update(op.results)
    return out


def carried_stores(kernel: Operation, stores: list[Operation]) -> tuple[list[Operation], str | None]:
    """The reduce-add stores whose values the loop can carry, or none and why not (the first store's reason)."""
    params = set(kernel.body.args)
    outside = {v for op in invariant_ops(kernel) for v in op.results} | params
    carried: list[Operation] = []
    reasons: list[str] = []
    for st in stores:
        dest, value, idx = st.operands[0], st.operands[1], st.operands[2:]
        name = dest.name or "?"
        what = f"the reduce-add into {name}{_at_line(st)}"
        accesses = [op for op in kernel.walk() if op.name in ACCESS_OPS and op.operands and op.operands[0] is dest
                    and not (op.name == "tk.store" and op.attrs.get("reduce") == "add")]
        if st.parent is not kernel.body:
            reasons.append(f"{what} is inside a loop or branch")
        elif not isinstance(value.type, (TileType, VectorType)) or value.type.dtype != CARRIED_DTYPE:
            dtype = getattr(value.type, "dtype", value.type)
            reasons.append(f"{what} adds {dtype} (only {CARRIED_DTYPE} sums are carried: registers would round "
                           "others differently)")
        elif not all(v in outside for v in idx):
            reasons.append(f"{what}: its indices depend on the block index (or on what a block computes)")
        elif accesses:
            reasons.append(f"{what}: the kernel also accesses {name} ('{accesses[0].name}'{_at_line(accesses[0])})")
        else:
            carried.append(st)
    if carried:
        return carried, None
    return [], reasons[0] + "; nothing to gain"


def reduce_add_stores(kernel: Operation) -> list[Operation]:
    """The kernel's stores with reduce = "add" (`DW[0] += ...`)."""
    return [op for op in kernel.walk() if op.name == "tk.store" and op.attrs.get("reduce") == "add"]


def coarsen_match(kernel: Operation) -> tuple[list[Operation], str | None]:
    """(the reduce-add stores coarsen-rows carries, None), or ([], why not); ([], None) for a kernel without
    reduce-add stores (not a candidate)."""
    stores = reduce_add_stores(kernel)
    if not stores:
        return [], None
    reason = kernel_reason(kernel)
    if reason is not None:
        return [], reason
    return carried_stores(kernel, stores)


def const_is(v: Value, want: int) -> bool:
    """Whether `v` is an `arith.const` of value `want`."""
    d = v.owner
    return isinstance(d, Operation) and d.name == "arith.const" and d.attrs.get("value") == want


def loop_trip_count(b: OpBuilder, loop: Operation, c0: Value | None = None) -> Value:
    """How many iterations `loop` runs: hi from 0 with step 1, else max(cdiv(hi - lo, step), 0) (ops added by
    `b`; `c0` a zero to reuse, else one is made)."""
    lo, hi, step = loop.operands[:3]
    if const_is(lo, 0) and const_is(step, 1):
        return hi
    span = b.op("arith.sub", [hi, lo], rname="k_span")
    trips = b.op("arith.cdiv", [span, step], rname="k_trips")
    return b.op("arith.max", [trips, c0 if c0 is not None else b.const(0)], rname="k_trips")


def value_at_sizes(v: Value, sizes: dict[str, int], block_id: int | None = None) -> int | None:
    """An i32 value computed from constants and sizes (`tk.size`) at `sizes`, with the IR's integer meaning
    (tkir.scalar.binary); block ids count as `block_id` (None: a value that depends on one is unknown). None where
    it depends on anything else or divides by zero. The cost model (tkir/tools/tune_model.py, block ids 0) and
    multicast's rule read loop bounds with it."""
    from tkir import scalar

    op = v.owner
    if not isinstance(op, Operation):
        return None
    if op.name == "arith.const":
        c = op.attrs.get("value")
        return c if isinstance(c, int) else None
    if op.name == "tk.size":
        return sizes.get(str(op.attrs.get("name")))
    if op.name == "tk.block_id":
        return block_id
    name = op.name.removeprefix("arith.")
    if name in scalar.INT_BINARY and len(op.operands) == 2:
        a, b = (value_at_sizes(x, sizes, block_id) for x in op.operands)
        if a is None or b is None:
            return None
        try:
            return scalar.binary(name, a, b)
        except ZeroDivisionError:
            return None
    return None


def mma_flop(op: Operation) -> float:
    """A tk.mma's tensor work in bf16-rate FLOP, 2 M N K (fp8 operands run at FP8_TENSOR_SPEEDUP times the rate):
    what the cost model (tkir/tools/tune_model.py) and multicast's rule count."""
    from tkir.scalar import FP8_DTYPES
    from tkir.target import FP8_TENSOR_SPEEDUP

    a, acc = op.operands[0].type, op.result.type
    if not (isinstance(a, TileType) and isinstance(acc, TileType)):
        return 0.0
    k = a.rows if op.attrs.get("trans_a") else a.cols
    rate = FP8_TENSOR_SPEEDUP if a.dtype in FP8_DTYPES else 1.0
    return 2.0 * acc.rows * acc.cols * k / rate
