"""infer-layouts: give every register tile and vector a fragment layout, and make conversions explicit.

Rewrites
* the kernel's thread shape: `warpgroups = {consumers = N}` on sm_90a (kept when the front end set it from
  `@warpgroups(...)`, else N = min(max(accumulator rows / 64, 1), 2) for kernels with tk.mma, for others
  enough warpgroups (1, 2 or 4) that the widest row-reduced register tile gives a thread at most
  ROW_BLOCK_ELEMS_PER_THREAD elements, else 1, and a kernel whose row reductions all run in a loop (a row walked in
  chunks) `warps = 1` or `2` where that leaves a thread at most CHUNK_LOOP_ELEMS_PER_THREAD elements of the chunk
  (`chunk_warps`; FileCheck tests/filecheck/passes/infer-layouts-chunk-warps.tk); on sm_80 `warps = W` (kept
  when set, else 4 * consumers when `warpgroups` is given, else, with tk.mma, min(max(accumulator rows / 32, 4),
  8) when an accumulator needs whole rows per warp and that leaves each at most 128 registers per thread
  (WHOLE_ROW_WARP_ROWS), or else min(max(accumulator rows / 16, 1), 8); without tk.mma 4, or 4 per warpgroup of
  the sm_90a rule above). `warps = W` from `@warps(W)` on sm_90a: W a multiple of 4 becomes `warpgroups = {consumers =
  W/4}` (the attribute removed: the same block and PTX as `@warpgroups(consumers=W/4)`); any other W is
  kept for a kernel without tk.mma (its tiles spread over W warps, as on sm_80) and is a located error for
  one with tk.mma (wgmma needs whole warpgroups); FileCheck test:
  tests/filecheck/passes/infer-layouts-warps.tk;
* every `rt`/`rv` type gains `layout={kind = ..., ...}` (kinds in tkir/layout.py, docs/passes.md):
  tk.mma accumulators `wgmma_acc` (sm_90a) / `mma_c` (sm_80), register A operands `wgmma_a` /
  `mma_a`, register B operands `mma_b` (sm_80 only), everything else `row`; row/column vectors
  take the layout that matches the tile they reduce or broadcast over;
* sm_80 accumulators: the W warps form a (W/N) x N grid over the tile (`mma_c` with `warps_n = N`
  when N > 1), each warp computing one block from its own rows of A and columns of B. `mma_warps_n`
  = 0 (default) takes N from `tkir.layout.mma_warps_n` (the fewest ldmatrix loads per mma.sync) for
  an accumulator whose values are only accumulated by mmas that read A and B from shared memory,
  carried by loops, combined element-wise, cast, column-reduced and stored, and N = 1 (whole rows per
  warp) for any other; 1 is the 1-D layout everywhere (the ablation); N > 1 forces N column warps and
  is a located error at the first use that cannot have them (a row reduction, tk.outer, a register
  mma operand, ...) or where the tile does not split;
* tk.outer operands: the layout that puts the factors of each product in the product's thread or in
  its warp (`tkir.layout.outer_operand_layout`), so the backend multiplies in registers with shuffles;
* `row` tiles: whole rows per warp, split over several warps (`parts`) where a thread would hold more
  than ROW_ELEMS_PER_THREAD elements, or (`split_idle_warps`, default) where whole rows per warp would
  leave warps repeating the others' rows;
* a tk.gather's result: `row` (its copies are chunks, as a load's), its row-index vector the row vector
  layout of that tile (each thread holds the indices of the rows it loads);
* where a value's layout differs from the one a consumer needs, a `tk.convert_layout` before the
  consumer with `via` = "none" (same registers, relabel), "shuffle" (within warps; `shuffles` = the
  most 32-bit shuffles one thread issues) or "smem" (`smem_bytes` = the round trip's buffer).

Values that must share a layout (the operands and result of an elementwise op, a loop's init,
argument, result and yield, an mma's accumulator and result; tk.cmp, tk.select and tk.index with
their tile operands) form one class; a class takes the
layout of its mma result if it has one, else that of its first consumer that needs one, else `row`.
Assumes a verified tk-level module; errors are located at the op that cannot be laid out.
"""

from __future__ import annotations

from tkir.ir import Module, Operation, Value
from tkir.layout import (
    MMA_M,
    MMA_N,
    WGMMA_M,
    RegisterLayout,
    auto_consumer_warpgroups,
    conversion,
    dtype_bytes,
    layout_of,
    make_layout,
    mma_warps_n,
    outer_operand_layout,
    row_layout_warps,
    row_split,
)
from tkir.ops import TILE_BINARY, TILE_UNARY
from tkir.passes.analysis import classify_copy, coarsen_match, grid_blocks_at_problem_sizes, in_loop
from tkir.passmanager import Options, ParamError, Pass, PassError, param
from tkir.target import DEFAULT_WARPS, MAX_THREADS_PER_BLOCK, NUM_SMS, WARPS_PER_WARPGROUP
from tkir.target import WARP as WARP_SIZE
from tkir.types import TileType, VectorType, is_register, is_shared

# tk.index only reads its operand's shape, but its indices must sit where that tile's elements do.
ELEMENTWISE = ({f"tk.{n}" for n in (*TILE_BINARY, *TILE_UNARY)}
               | {"tk.cast", "tk.mask_causal", "tk.cmp", "tk.select", "tk.index"})
MAX_AUTO_WARPS_SM80 = 8  # 8 warps of m16 rows: a 128-row block tile on the mma.sync path
# sm_80 kernels whose accumulators need whole rows per warp (attention: row max and row sum) give each
# warp 32 rows, two m16 blocks, as FlashAttention-2 does (4 warps over a 128-row tile: every K and V
# fragment a warp loads with ldmatrix feeds two mma.sync), where that keeps the largest accumulator at
# or under half of a thread's 255 registers (HOPPER.md §1): O of a 128 x 128 f32 tile over 4 warps is 128.
# Measured on the H200 (docs/experiments.md, "sm_80: the pipelined mma.sync path"): attention at
# BQ = 128, BKV = 64, head dim 128 ran 1.03-1.04x FA2 with 4 warps of 32 rows, 0.82x at 4 warps of 16.
WHOLE_ROW_WARP_ROWS = 32
WHOLE_ROW_MAX_ACC_REGS = 128
VEC_BYTES = 16          # `row` layouts: each lane owns 16-byte column chunks (one v4 access)
# max_vec_bytes: the global access widths PTX has for a lane chunk (ld/st.global .v4.b32, .v2.b32, .b32, .b16,
# .b8); below the element size a chunk is one element
VEC_BYTES_CHOICES = (16, 8, 4, 2, 1)
# A `row` tile whose rows give a thread more elements than this is split over more warps per row
# (`parts`): 64 f32 values are 64 registers, a quarter of the 255 a thread may have (HOPPER.md §1),
# which leaves room for the converted copies an elementwise chain keeps live. Below it nothing
# changes (every example's row tiles are at or under it: softmax/layernorm 16 x 1024 over 16 warps
# hold 32 each).
ROW_ELEMS_PER_THREAD = 64
# A kernel without tk.mma and without @warpgroups / @warps that row-reduces a register tile gets the warps that
# give a thread at most ROW_BLOCK_ELEMS_PER_THREAD of that tile's elements (in whole warpgroups, a power of two,
# at most MAX_ROW_WARPGROUPS; one warpgroup below it). Measured on an H100 (docs/experiments.md, "Row kernels
# with two consts"): layernorm at D = 8192 ran 0.90-0.91x its tuned point with 32 (two warpgroups, two blocks
# per SM), 1.00x with 64 (one warpgroup, as tuned); D = 16384 takes two, 1.00-1.02x.
ROW_BLOCK_ELEMS_PER_THREAD = 64
# A row kernel whose sums over rows coarsen-rows will carry in registers (passes/analysis.py coarsen_match: a layernorm
# backward's DW and DB) holds, beside its row tiles, one f32 accumulator per carried sum of the row's width, live
# across its whole grid-stride loop, and each block walks its rows one after another. It gets the warps that leave
# a thread at most CARRIED_ROW_ELEMS_PER_THREAD elements of its widest row-reduced tile, so that more warps share
# each row's latency chain (the user layernorm backward at D = 4096: 4 warpgroups of 8 elements a thread, 64
# registers, 2 blocks per SM, where the row rule's one warpgroup holds 32 elements and takes 212 registers). sm_90a
# only; `infer-layouts{carried_warps=true}`, off by default: not yet timed on a GPU (docs/passes.md).
CARRIED_ROW_ELEMS_PER_THREAD = 8
# Where the kernel was compiled for a size bucket (`problem_sizes`, set by tkir.compile(sizes=...) and by every call
# of a kernel with auto consts) whose grid has fewer blocks than the GPU has SMs, the count doubles (at most
# MAX_ROW_WARPGROUPS) while a thread keeps at least ROW_MIN_ELEMS_FEW_BLOCKS elements (two 16-byte bf16 chunks): a
# lone block per SM has the SM's memory to itself, and more warps keep more loads in flight (H100: a two-const
# rmsnorm at one row of 4096 / 8192 ran 0.91x / 0.94x the tuned two-warpgroup point with one warpgroup, 1.01-1.03x
# with two; docs/experiments.md, "... row kernels with two consts"). Not for any grid in one wave: at 4096 rows of
# 768 (1024 blocks of 4 rows) two warpgroups ran rmsnorm at 1.00x the tuned point but layernorm at 0.90x, whose
# 40 registers a thread leave 5 blocks of 256 threads an SM, 1.55 waves (docs/experiments.md, "One wave is not
# enough").
ROW_MIN_ELEMS_FEW_BLOCKS = 16
MAX_ROW_WARPGROUPS = 4
# A kernel without tk.mma and without @warpgroups / @warps whose row reductions run inside a loop (a row walked in
# chunks, each chunk reduced across the block every iteration) gets the fewest warps, a power of two up to a
# warpgroup, that leave a thread at most CHUNK_LOOP_ELEMS_PER_THREAD elements of the widest chunk it row-reduces;
# where that is a whole warpgroup or more, the rule above. Each iteration's reductions exchange partials across the
# block's warps (shared memory and a barrier each); fewer warps a row mean cheaper exchanges and more resident blocks,
# each with its own loads in flight. Measured on an H100 (docs/experiments.md, "A chunk loop's warps"): the user
# row_argmax (a 2048-wide chunk, two row reductions an iteration) at N = 4096 / 16384, V = 32000 / 128256 ran 1.10 /
# 0.99 / 1.15 / 1.05x torch.argmax with 2 warps (32 elements a thread), 0.997 / 0.870 / 1.002 / 0.908x with one
# warpgroup (16), 1.00 / 0.91 / 1.06 / 0.96x with 1 warp (64).
CHUNK_LOOP_ELEMS_PER_THREAD = 32
# A `row` tile with fewer rows than the block has warps (ROWS = 1 over 8 or 16 warps) gets whole rows
# per warp and the other warps repeat them (the same loads and arithmetic, their results unused). With
# `split_idle_warps` (default) such a tile is split over the repeating warps too, where a split keeps
# every lane busy in whole 16-byte steps (tkir.layout.row_split): a thread holds 1/P of the row, and row
# reductions combine the P warps through shared memory. Measured (docs/experiments.md, "Row kernels: the
# sweep's misses diagnosed"): the element-wise
# Welford accumulators of layernorm's chunk loop (1 x 2048 f32 over 16 warps) went from 64 registers per
# thread repeated in every warp to 4.
# i1 tiles are never loaded from or stored to memory, so the 16-byte chunk rule means nothing for
# them; a class that starts with one takes the vec of the 4-byte (f32/i32) tiles it is compared from.
PREDICATE_BYTES = 4


class InferLayouts(Pass):
    name = "infer-layouts"
    mma_warps_n: int = param(0, "sm_80: warps along the columns of each mma.sync accumulator (0: chosen per "
                                "accumulator; 1: whole rows per warp, the 1-D ablation; N: N column warps)")
    split_idle_warps: bool = param(True, "split a `row` tile whose rows leave warps repeating them over those "
                                         "warps too (false: only rows over ROW_ELEMS_PER_THREAD, the ablation)")
    max_vec_bytes: int = param(VEC_BYTES, "the widest global access of a `row` tile's lane chunk in bytes (16, 8, "
                                          "4, 2 or 1; a chunk is at least one element): the launch's variant for "
                                          "rows that do not start 16-byte aligned takes the piece they are aligned to")
    latency: bool = param(True, "double a row kernel's warpgroups where its size bucket's grid has fewer blocks than "
                                "SMs (ROW_MIN_ELEMS_FEW_BLOCKS; false: the size-free count, the ablation)")
    chunk_warps: bool = param(True, "give a kernel that row-reduces a chunk in a loop fewer warps than a warpgroup "
                                    "where CHUNK_LOOP_ELEMS_PER_THREAD allows (false: whole warpgroups, the ablation)")
    carried_warps: bool = param(True, "size the warps of a row kernel whose reduce-add stores coarsen-rows carries "
                                      "for CARRIED_ROW_ELEMS_PER_THREAD elements a thread (sm_90a; false: "
                                      "ROW_BLOCK_ELEMS_PER_THREAD, the ablation)")

    def __post_init__(self) -> None:
        if self.mma_warps_n < 0:
            raise ParamError("mma_warps_n", f"infer-layouts: mma_warps_n={self.mma_warps_n} must be >= 0")
        if self.max_vec_bytes not in VEC_BYTES_CHOICES:
            raise ParamError("max_vec_bytes", f"infer-layouts: max_vec_bytes={self.max_vec_bytes} must be one of "
                                              f"{', '.join(map(str, VEC_BYTES_CHOICES))}")

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            _KernelLayouts(kernel, options.target == "sm_80", self.mma_warps_n, self.split_idle_warps,
                           self.max_vec_bytes, self.latency, self.chunk_warps, self.carried_warps).run()


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def find(self, v: Value) -> int:
        k = id(v)
        self.parent.setdefault(k, k)
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def union(self, a: Value, b: Value) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[rb] = ra


class _KernelLayouts:
    def __init__(self, kernel: Operation, sm80: bool, mma_warps_n: int = 0, split_idle_warps: bool = True,
                 max_vec_bytes: int = VEC_BYTES, latency: bool = True, chunk_warps: bool = True,
                 carried_warps: bool = False):
        self.kernel = kernel
        self.carried_warps = carried_warps
        self.chunk_warps = chunk_warps
        self.max_vec_bytes = max_vec_bytes
        self.latency = latency
        self.split_idle_warps = split_idle_warps
        self.sm80 = sm80
        self.mma_warps_n = mma_warps_n
        self.uf = _UnionFind()
        self.anchors: dict[int, RegisterLayout] = {}  # class -> layout fixed by an mma result
        self.tile_uses: list[tuple[Operation, int, RegisterLayout]] = []  # (consumer, operand, layout)
        self.layouts: dict[int, RegisterLayout] = {}  # class -> chosen layout

    def run(self) -> None:
        mmas = [op for op in self.kernel.walk() if op.name == "tk.mma"]
        values = self._register_values()
        self._connect()
        self.compute_warps, self.wg = self._thread_shape(mmas)
        for op in mmas:
            self._mma_demands(op)
        self._assign_tiles(values)
        vec_uses = self._assign_vectors(values)
        for v in values:
            v.type = v.type.with_attr("layout", self.layouts[self.uf.find(v)].to_attr())
        for op, idx, want in [*self.tile_uses, *vec_uses]:
            self._convert(op, idx, want)
        for op in mmas:
            self._check_fp8_register_a(op)

    def _check_fp8_register_a(self, op: Operation) -> None:
        """An fp8 register A must be a matrix product's result converted from the accumulator's fragment: the
        backend shuffles that form into the 8-bit A fragment (rules_wgmma) and lowers no other way into it."""
        a = op.operands[0]
        if not is_register(a.type) or a.type.dtype not in FP8_REGISTER_A:
            return
        d = a.owner
        src = layout_of(d.operands[0].type) if isinstance(d, Operation) and d.name == "tk.convert_layout" else None
        if src is not None and src.kind == "wgmma_acc":
            return
        t = a.type
        raise PassError(op.loc, f"an fp8 '@' takes A from registers only as a matrix product's result (e.g. "
                                f"e4m3(p) of an f32 accumulator p), not {t.bare()}",
                        hint=f"store it to a shared tile first: `shared sa: st<{t.dtype}, {t.rows}, {t.cols}>`, "
                             "`sa = ...`, then `sa @ b.T`")

    # --- thread shape ------------------------------------------------------------------------

    def _thread_shape(self, mmas: list[Operation]) -> tuple[int, int]:
        """(compute warps, consumer warpgroups) after recording the choice on the kernel."""
        acc_rows = max((op.result.type.rows for op in mmas), default=0)
        has_mma = bool(mmas)
        attrs = self.kernel.attrs
        given = attrs.get("warpgroups")
        consumers = None
        if isinstance(given, dict) and "consumers" in given:
            consumers = given["consumers"]
            if not isinstance(consumers, int) or consumers < 1:
                raise PassError(self.kernel.loc, f"warpgroups consumers must be a positive count, "
                                f"got {consumers}")
        if self.sm80:
            warps = attrs.get("warps")
            if not isinstance(warps, int) or warps < 1:
                if consumers is not None:
                    warps = 4 * consumers
                elif has_mma:
                    warps = self._whole_row_warps(mmas) or min(max(acc_rows // MMA_M, 1), MAX_AUTO_WARPS_SM80)
                else:
                    groups = self._row_warpgroups()
                    warps = WARPS_PER_WARPGROUP * groups if groups > 1 else DEFAULT_WARPS
            attrs["warps"] = warps
            _check_threads(self.kernel, warps)
            return warps, 0
        warps = attrs.get("warps")
        if isinstance(warps, int):  # @warps(W)
            if warps < 1:
                raise PassError(self.kernel.loc, f"warps must be a positive count, got {warps}")
            if warps % WARPS_PER_WARPGROUP == 0:  # whole warpgroups: the same block as @warpgroups(consumers=W/4)
                del attrs["warps"]
                consumers = warps // WARPS_PER_WARPGROUP
                attrs["warpgroups"] = {**(given if isinstance(given, dict) else {}), "consumers": consumers}
            elif has_mma:
                raise PassError(self.kernel.loc, f"@warps({warps}): on sm_90a a kernel with '@' (tile matmul) runs "
                                "wgmma, which needs whole warpgroups of 4 warps",
                                hint="use @warps(W) with W a multiple of 4, or @warpgroups(consumers=N)")
            else:  # a register-only kernel: its tiles are spread over W warps, as on sm_80
                _check_threads(self.kernel, warps)
                return warps, 0
        if consumers is None:
            consumers = auto_consumer_warpgroups(acc_rows) if has_mma else self._row_warpgroups()
            few = None if has_mma or consumers > 1 or given is not None else self._chunk_loop_warps()
            if few is not None:  # a chunk loop's block of 1 or 2 warps (CHUNK_LOOP_ELEMS_PER_THREAD), as @warps(W)
                attrs["warps"] = few
                _check_threads(self.kernel, few)
                return few, 0
            attrs["warpgroups"] = {**(given if isinstance(given, dict) else {}), "consumers": consumers}
        _check_threads(self.kernel, 4 * consumers)
        return 4 * consumers, consumers

    def _row_warpgroups(self) -> int:
        """Warpgroups for a kernel without tk.mma that does not say: enough that the widest register tile
        it row-reduces gives each thread at most ROW_BLOCK_ELEMS_PER_THREAD elements (CARRIED_ROW_ELEMS_PER_THREAD
        on sm_90a where coarsen-rows will carry sums over rows; a power of two, at most MAX_ROW_WARPGROUPS),
        twice that under one block per SM where a thread keeps
        ROW_MIN_ELEMS_FEW_BLOCKS (not with latency=false); 1 without a row reduction."""
        widest = max((op.operands[0].type.rows * op.operands[0].type.cols for op in self.kernel.walk()
                      if op.name == "tk.reduce" and str(op.attrs.get("axis")) == "row"
                      and isinstance(op.operands[0].type, TileType)), default=0)
        threads = WARPS_PER_WARPGROUP * WARP_SIZE
        per_thread = ROW_BLOCK_ELEMS_PER_THREAD
        if self.carried_warps and not self.sm80 and coarsen_match(self.kernel)[0]:
            per_thread = CARRIED_ROW_ELEMS_PER_THREAD
        need = -(-widest // (threads * per_thread))
        groups = 1
        while groups < min(need, MAX_ROW_WARPGROUPS):
            groups *= 2
        if self.latency and widest and self._few_blocks() and groups < MAX_ROW_WARPGROUPS \
                and widest // (2 * groups * threads) >= ROW_MIN_ELEMS_FEW_BLOCKS:
            groups *= 2
        return groups

    def _chunk_loop_warps(self) -> int | None:
        """Warps for a kernel without tk.mma whose row reductions run in a loop: the fewest (1 or 2) that leave a
        thread at most CHUNK_LOOP_ELEMS_PER_THREAD elements of the widest tile it row-reduces in a loop; None where
        that takes a whole warpgroup or more, where a row reduction runs outside a loop, or with chunk_warps=false."""
        if not self.chunk_warps:
            return None
        reduces = [op for op in self.kernel.walk() if op.name == "tk.reduce" and str(op.attrs.get("axis")) == "row"
                   and isinstance(op.operands[0].type, TileType)]
        if not reduces or not all(in_loop(op, self.kernel) for op in reduces):
            return None
        widest = max(op.operands[0].type.rows * op.operands[0].type.cols for op in reduces)
        warps = 1
        while warps < WARPS_PER_WARPGROUP and widest > warps * WARP_SIZE * CHUNK_LOOP_ELEMS_PER_THREAD:
            warps *= 2
        return warps if warps < WARPS_PER_WARPGROUP else None

    def _few_blocks(self) -> bool:
        """Whether the kernel was compiled for a size bucket at which its grid has fewer blocks than SMs."""
        blocks = grid_blocks_at_problem_sizes(self.kernel)
        return blocks is not None and blocks < NUM_SMS

    def _whole_row_warps(self, mmas: list[Operation]) -> int | None:
        """sm_80 warps when some accumulator must give each warp whole rows (a row reduction, a register
        operand: `_grid_blocker`): WHOLE_ROW_WARP_ROWS rows per warp, at least DEFAULT_WARPS warps and at
        most MAX_AUTO_WARPS_SM80, where every accumulator splits into whole m16 blocks that way and the
        largest holds at most WHOLE_ROW_MAX_ACC_REGS registers per thread; None (the m16-row rule) otherwise.
        A warp of 32 rows issues two mma.sync per B fragment it loads, where a warp of 16 issues one. The
        mma_warps_n=1 ablation keeps the m16-row rule, so it builds what was measured before the grid."""
        if self.mma_warps_n == 1 or all(self._grid_blocker(self.uf.find(op.result)) is None for op in mmas):
            return None
        acc_rows = max(op.result.type.rows for op in mmas)
        warps = min(max(acc_rows // WHOLE_ROW_WARP_ROWS, DEFAULT_WARPS), MAX_AUTO_WARPS_SM80)
        for op in mmas:
            acc = op.result.type
            if acc.rows % (MMA_M * warps) or acc.rows * acc.cols // (warps * WARP_SIZE) > WHOLE_ROW_MAX_ACC_REGS:
                return None
        return warps

    # --- classes -----------------------------------------------------------------------------

    def _register_values(self) -> list[Value]:
        out = []
        for op in self.kernel.walk():
            for r in op.regions:
                out.extend(a for a in r.block.args if is_register(a.type))
            out.extend(v for v in op.results if is_register(v.type))
        return out

    def _connect(self) -> None:
        for op in self.kernel.walk():
            if op.name in ELEMENTWISE and op.results:
                res = op.result
                for v in op.operands:
                    if is_register(v.type) and type(v.type) is type(res.type):
                        self.uf.union(res, v)
            elif op.name == "tk.mma":
                self.uf.union(op.result, op.operands[2])
            elif op.name == "scf.for":
                term = op.body.terminator
                for init, arg, res, y in zip(op.operands[3:], op.body.args[1:], op.results,
                                             term.operands, strict=True):
                    if is_register(init.type):
                        for v in (arg, res, y):
                            self.uf.union(init, v)
            elif op.name == "scf.if":  # a result is one value with what each region yields for it
                for region in op.regions:
                    term = region.block.terminator
                    for res, y in zip(op.results, term.operands if term is not None else [], strict=False):
                        if is_register(res.type):
                            self.uf.union(res, y)

    def _mma_demands(self, op: Operation) -> None:
        acc = op.result.type
        if self.sm80:
            warps, warps_n = self.compute_warps, self._warps_n(op)
            if acc.rows % (MMA_M * (warps // warps_n)):
                raise PassError(op.loc, f"accumulator {acc.bare()} cannot be split over {warps} warps "
                                f"of {MMA_M}-row blocks", hint="set warps on the kernel or change the tile")
            acc_layout = make_layout("mma_c", warps=warps, warps_n=warps_n)
            a_layout = make_layout("mma_a", warps=warps)
        else:
            wg = self.wg
            if acc.rows % (WGMMA_M * wg):
                raise PassError(op.loc, f"accumulator {acc.bare()} cannot be split over {wg} consumer "
                                f"warpgroups of {WGMMA_M}-row wgmma blocks",
                                hint="change @warpgroups(consumers=...) or the tile's rows")
            acc_layout = make_layout("wgmma_acc", wg=wg)
            a_layout = make_layout("wgmma_a", wg=wg)
        root = self.uf.find(op.result)
        old = self.anchors.setdefault(root, acc_layout)
        if old != acc_layout:
            raise PassError(op.loc, f"accumulator needs layout {acc_layout.to_attr()} but its value also "
                                    f"carries {old.to_attr()}")
        a, b = op.operands[0], op.operands[1]
        if is_register(a.type):
            if op.attrs.get("trans_a"):
                raise PassError(op.loc, "a register A operand cannot be transposed; transpose it first "
                                "(tk.transpose) or keep A in shared memory")
            self.tile_uses.append((op, 0, a_layout))
        if is_register(b.type):
            if not self.sm80:
                raise PassError(op.loc, "wgmma reads B from shared memory only (HOPPER.md §1.6); "
                                "store the B tile to a shared tile first")
            if op.attrs.get("trans_b"):
                raise PassError(op.loc, "a register B operand cannot be transposed on the mma.sync path")
            self.tile_uses.append((op, 1, make_layout("mma_b", warps=self.compute_warps)))

    def _warps_n(self, op: Operation) -> int:
        """Column warps of the mma_c layout of op's accumulator (module docstring)."""
        want, warps, acc = self.mma_warps_n, self.compute_warps, op.result.type
        if want == 1:
            return 1
        blocker = self._grid_blocker(self.uf.find(op.result))
        if want == 0:
            return 1 if blocker is not None else mma_warps_n(acc.rows, acc.cols, warps)
        if blocker is not None:
            where, why = blocker
            raise PassError(where.loc, f"{why}: the accumulator {acc.bare()} cannot be split over {want} column "
                                       f"warps (infer-layouts{{mma_warps_n={want}}})",
                            hint="mma_warps_n=0 chooses per accumulator; 1 gives every warp whole rows")
        if warps % want or acc.rows % (MMA_M * (warps // want)) or acc.cols % (MMA_N * want):
            raise PassError(op.loc, f"accumulator {acc.bare()} cannot be split over a {warps // want} x {want} grid of "
                                    f"warps of m16 x n8 blocks (infer-layouts{{mma_warps_n={want}}})",
                            hint=f"mma_warps_n must divide warps = {warps} and leave whole m16 and n8 blocks")
        return want

    def _grid_blocker(self, root: int) -> tuple[Operation, str] | None:
        """The first use of a value of class `root` that a 2-D warp grid does not support, and why;
        None when every use is one it does: element-wise ops, casts, column reductions, stores, loops,
        and mmas that accumulate into it from shared A and B."""
        for op in self.kernel.walk():
            for idx, v in enumerate(op.operands):
                if not is_register(v.type) or self.uf.find(v) != root:
                    continue
                name = op.name
                if name in ELEMENTWISE or name in ("tk.store", "scf.for", "scf.yield"):
                    continue
                if name == "tk.reduce" and str(op.attrs.get("axis")) == "col":
                    continue
                if name == "tk.mma" and idx == 2:
                    if all(is_shared(x.type) for x in op.operands[:2]):
                        continue
                    return op, "mma.sync reads a register operand here (its fragments follow whole-row warps)"
                if name == "tk.mma":
                    return op, "the accumulator is read as an mma operand here"
                if name == "tk.reduce":
                    return op, "a row reduction here would combine the parts of each row held by different warps"
                return op, f"'{name}' is not lowered for a 2-D warp grid"
        return None

    def _assign_tiles(self, values: list[Value]) -> None:
        """Classes with an mma result take the accumulator layout, then those with a demanding
        consumer that layout; then, in program order, each tk.outer's result (`row` if nothing
        decided it) and its operands (outer_operand_layout of the result's: what lets the backend
        build the product in registers); everything left is `row`."""
        first_use: dict[int, RegisterLayout] = {}
        for op, idx, want in self.tile_uses:
            first_use.setdefault(self.uf.find(op.operands[idx]), want)
        for v in values:
            root = self.uf.find(v)
            if not isinstance(v.type, TileType) or root in self.layouts:
                continue
            if root in self.anchors:
                self.layouts[root] = self.anchors[root]
            elif root in first_use:
                self.layouts[root] = first_use[root]
        for op in self.kernel.walk():
            if op.name != "tk.outer":
                continue
            res = self.layouts.setdefault(self.uf.find(op.result), self._row_layout(op.result.type))
            for idx, v in enumerate(op.operands):
                want = outer_operand_layout(res, str(op.attrs["axis"]), v.type.shape, v.type.dtype) \
                    or self._row_layout(v.type)
                self.layouts.setdefault(self.uf.find(v), want)
                self.tile_uses.append((op, idx, want))
        # the rest are `row`, with the chunk width of the class's first tile that is loaded from or stored
        # to global memory (its copies are the 16-byte chunks), else of its narrowest tile: a bf16 tile
        # widened into an f32 accumulator declared before it keeps bf16's 8-element chunks
        touches = {id(c[2]) for op in self.kernel.walk() if (c := classify_copy(op)) and c[0] == "register"}
        touches |= {id(op.result) for op in self.kernel.walk() if op.name == "tk.gather"}  # a load of rows too
        chosen: dict[int, TileType] = {}
        settled: set[int] = set()   # classes whose choice is a global-memory tile
        for v in values:
            root = self.uf.find(v)
            if not isinstance(v.type, TileType) or root in self.layouts or root in settled:
                continue
            if id(v) in touches:
                chosen[root] = v.type
                settled.add(root)
            elif root not in chosen or _chunk_bytes(v.type) < _chunk_bytes(chosen[root]):
                chosen[root] = v.type
        for root, t in chosen.items():
            self.layouts[root] = self._row_layout(t)

    def _row_layout(self, t: TileType) -> RegisterLayout:
        eb = _chunk_bytes(t)
        vec = max(self.max_vec_bytes // eb, 1)
        warps = row_layout_warps(t.rows, t.cols, vec, self.compute_warps)
        idle = self.split_idle_warps and warps < self.compute_warps
        if idle or t.rows * t.cols // (warps * WARP_SIZE) > ROW_ELEMS_PER_THREAD:  # wide rows: share them
            split = row_split(t.rows, t.cols, vec, self.compute_warps, ROW_ELEMS_PER_THREAD)
            if split is not None:
                groups, parts = split
                return make_layout("row", warps=groups * parts, vec=vec, parts=parts)
            if idle:  # narrower chunks where 16-byte ones leave lanes without a whole step (1 x 768 bf16)
                for v in _narrower(vec):
                    split = row_split(t.rows, t.cols, v, self.compute_warps, ROW_ELEMS_PER_THREAD)
                    if split is not None:
                        groups, parts = split
                        return make_layout("row", warps=groups * parts, vec=v, parts=parts)
        return make_layout("row", warps=warps, vec=vec)

    def _assign_vectors(self, values: list[Value]) -> list[tuple[Operation, int, RegisterLayout]]:
        anchors: dict[int, RegisterLayout] = {}
        uses: list[tuple[Operation, int, RegisterLayout]] = []
        for op in self.kernel.walk():
            if op.name == "tk.reduce":
                tile = self.layouts[self.uf.find(op.operands[0])]
                anchors.setdefault(self.uf.find(op.result), vector_layout(tile, str(op.attrs["axis"])))
            elif op.name in ELEMENTWISE and op.attrs.get("bcast") is not None:
                t_idx = 0 if isinstance(op.operands[0].type, TileType) else 1
                tile = self.layouts[self.uf.find(op.operands[t_idx])]
                uses.append((op, 1 - t_idx, vector_layout(tile, str(op.attrs["bcast"]))))
            elif op.name == "tk.gather":  # the row indices where the rows they pick are: one per row of x
                tile = self.layouts[self.uf.find(op.result)]
                uses.append((op, len(op.operands) - 2, vector_layout(tile, "row")))
        first_use: dict[int, RegisterLayout] = {}
        for op, idx, want in uses:
            first_use.setdefault(self.uf.find(op.operands[idx]), want)
        for v in values:
            root = self.uf.find(v)
            if not isinstance(v.type, VectorType) or root in self.layouts:
                continue
            layout = anchors.get(root) or first_use.get(root)
            if layout is None:
                warps = max(w for w in range(1, self.compute_warps + 1) if v.type.n % w == 0)
                layout = make_layout("row_vec", warps=warps)
            self.layouts[root] = layout
        return uses

    # --- conversions -------------------------------------------------------------------------

    def _convert(self, op: Operation, idx: int, want: RegisterLayout) -> None:
        v = op.operands[idx]
        have = self.layouts[self.uf.find(v)]  # what run() recorded in v's type
        if have == want:
            return
        shape = v.type.shape if isinstance(v.type, TileType) else (v.type.n,)
        try:
            via, shuffles = conversion(have, want, v.type.dtype, shape)
        except ValueError as e:
            raise PassError(op.loc, f"cannot lay out {v.type.bare()} as {want.to_attr()}: {e}") from None
        cvt = Operation(
            "tk.convert_layout", [v], [v.type.with_attr("layout", want.to_attr())],
            {"via": via, "smem_bytes": v.type.nbytes if via == "smem" else 0, "shuffles": shuffles},
            result_names=[f"{v.name}.{want.kind}" if v.name else want.kind], loc=op.loc,
        )
        op.parent.insert_before(op, cvt)
        op.operands[idx] = cvt.result


FP8_REGISTER_A = ("e4m3", "e5m2")  # 8-bit wgmma A from registers (PTX ISA, wgmma.mma_async: .e4m3/.e5m2)


def _chunk_bytes(t: TileType) -> int:
    """Bytes per element that decide a `row` layout's chunk width (i1 tiles count as PREDICATE_BYTES)."""
    return PREDICATE_BYTES if t.dtype == "i1" else dtype_bytes(t.dtype)


def _narrower(vec: int) -> list[int]:
    """Chunk widths below `vec` elements, widest first, down to 1."""
    out = []
    while vec > 1:
        vec //= 2
        out.append(vec)
    return out


def vector_layout(tile: RegisterLayout, axis: str) -> RegisterLayout:
    """The layout of a vector with one value per row (axis "row") or column ("col") of a tile."""
    kind = tile.kind
    base = {"wgmma_a": "wgmma_acc", "mma_a": "mma_c"}.get(kind, kind)  # same rows/cols per thread
    if axis == "row":
        if base in ("wgmma_acc", "mma_c"):
            return make_layout("acc_row_vec", wg=tile.wg, warps=tile.warps, warps_n=tile.warps_n)
        return make_layout("row_vec", wg=tile.wg, warps=tile.warps, parts=tile.parts)
    if base == "row":
        return make_layout("col_vec", of="row", warps=tile.warps, vec=tile.vec, parts=tile.parts)
    if base == "mma_b":
        return make_layout("row_vec", warps=1)
    return make_layout("col_vec", of=base, wg=tile.wg, warps=tile.warps, warps_n=tile.warps_n)


def _check_threads(kernel: Operation, warps: int) -> None:
    """Refuse a thread shape no block can have, before anything is laid out over it (layouts walk
    every warp: 2**31 consumer warpgroups would never finish)."""
    if warps * WARP_SIZE > MAX_THREADS_PER_BLOCK:
        raise PassError(kernel.loc, f"{warps * WARP_SIZE} threads per block: more than the "
                                    f"{MAX_THREADS_PER_BLOCK} a block may have",
                        hint="use fewer warpgroups (@warpgroups(consumers=N)) or warps")  # as plan-occupancy says
