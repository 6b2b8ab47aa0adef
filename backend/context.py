"""The lowering context: the state of one kernel's lowering and the services every rule uses.

Rules (backend/rules_*.py, selected through backend.rules) are free functions `fn(cx, op)`; `cx` is
a LoweringContext. It owns the LLVM writer, the lowered value of every IR value (`get`/`set`), the
shared-memory plan, the current warp-specialized role, and the thread-index arithmetic that several
rule families share (slot coordinates of register layouts, shared addresses with swizzles, the plane
of a global tensor, predicated regions, the barrier of the threads that run the code). Address,
swizzle and fragment formulas themselves live in backend.fragments and backend.wgmma_desc, the PTX of
barriers, fences and waits in backend.idioms; the context only emits them.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from tkir.backend import rules as rule_table
from tkir.backend.fragments import (
    BitLLVMBuilder,
    LLVMBuilder,
    NumpyBuilder,
    numeric_slots,
    shared_offset,
    slot_coords,
    tile_shape,
)
from tkir.backend.idioms import (
    NAMED_BARRIERS,
    block_barrier,
    bulk_wait,
    fence_acq_rel,
    fence_async_proxy,
    named_barrier_sync,
    wgmma_wait_group_tied,
)
from tkir.backend.launch import Param, block_threads
from tkir.backend.llvm_text import LLVMWriter
from tkir.backend.values import (
    LLVM_TYPE,
    REGS_PER_SM,
    Frag,
    Global,
    LoweringError,
    Smem,
    register_layout,
    slot_layout,
)
from tkir.diagnostics import CompileError
from tkir.facts import MULTICAST_ATTR, FactError, OccupancyPlan
from tkir.ir import Module, Operation, Value
from tkir.layout import SharedLayout, fragment, layout_of
from tkir.ops import TILE_BINARY, TILE_UNARY
from tkir.ops_pipeline import WAIT_FENCE_ATTR
from tkir.shared_plan import SharedPlan, plan_shared, tile_stage_bytes  # noqa: F401  (re-exported)
from tkir.types import GlobalType, TileType, VectorType, format_attr_value

# ops whose register operands of the result's kind share its layout (infer-layouts' ELEMENTWISE)
SAME_LAYOUT_OPS = frozenset({f"tk.{n}" for n in (*TILE_BINARY, *TILE_UNARY)}
                            | {"tk.cast", "tk.mask_causal", "tk.cmp", "tk.select", "tk.index"})

# (row, byte column) a thread addresses in instance i: builder, thread index, instance
Position = Callable[[object, object, object], tuple[object, object]]


@dataclass
class RoleCtx:
    kind: str
    first_wg: int
    warpgroups: int
    single_thread: bool
    tid: str = ""      # thread index within the role
    wg: str = ""       # warpgroup index within the role
    lane: str = ""
    warp: str = ""     # warp index within its warpgroup
    warps: int = 0     # a role sized in warps (sm_80: no warpgroup granularity); 0: warpgroups

    @property
    def threads(self) -> int:
        """Threads that run the role: its warps, or its warpgroups' 128 each."""
        return 32 * self.warps if self.warps else 128 * self.warpgroups


@dataclass
class ThreadParts:
    """Warpgroup, warp-in-warpgroup and lane of the thread, for kernels without roles."""

    wg: str
    warp: str
    lane: str


def shared_layout(t: TileType) -> SharedLayout:
    """The physical layout the layout passes chose for a shared tile (swizzle span or row padding)."""
    return SharedLayout(t.dtype, t.rows, t.cols, int(t.get("swizzle") or 0), int(t.get("pad") or 0))


class LoweringContext:
    def __init__(self, module: Module, kernel: Operation, params: tuple[Param, ...], target: str):
        self.module = module
        self.kernel = kernel
        self.kernel_params = params  # its PTX parameters (tkir.backend.launch.kernel_params)
        self.target = target
        self.w = LLVMWriter()
        self.vals: dict[int, object] = {}
        # per region being lowered: the values set there, and those from outside it read there through
        # wgmma.wait_group (value id, what it was before): `scope` puts the latter back when the region
        # ends, as its blocks do not dominate what follows
        self.set_in: list[set[int]] = []
        self.waited_in: list[list[tuple[int, object]]] = []
        self.plan = plan_shared(kernel)
        self.role: RoleCtx | None = None
        self.params: dict[str, str] = {}
        self.sizes: dict[str, str] = {}
        self.tmaps: dict[str, str] = {}
        self.pending_sync = False
        # cluster-rows (passes/cluster_rows.py): a block runs as `cluster` CTAs of cta_threads threads each;
        # `threads` counts the whole block (the layouts spread the tiles over all of them)
        self.cluster = int(kernel.attrs.get("cluster") or 1)
        self.cta_threads = block_threads(kernel)
        self.threads = self.cta_threads * self.cluster
        # multicast (passes/multicast.py): clusters of `multicast` CTAs along x share the tiles they load
        mc = kernel.attrs.get(MULTICAST_ATTR)
        self.multicast = int(mc.get("ctas", 1)) if isinstance(mc, dict) else 1
        self.init_cap = min(255, (REGS_PER_SM // self.cta_threads) // 8 * 8)
        self.occupancy: OccupancyPlan | None = OccupancyPlan.of(kernel)
        self.tid = ""
        self.smem = ""
        self.l2_policies: dict[str, str] = {}  # L2 priority -> its policy register (backend/cache_policy.py)
        self.next_warp = 0          # first warp of the next tk.role
        self.staged_stores = False  # TMA stores issued in the current role (waited for at its end)
        self.deferred: dict | None = None  # a loop's deferred stage release (pipe.arrive {deferred})
        # staging tiles of the reduce-adds a loop leaves in flight (tma.store {reduce}; backend/rules_pipe.py):
        # their issuing thread waits for the copy engine's read before the tile is written again
        self.deferred_bulk_reads: set[int] = set()
        self.deferred_copies: list = []  # cp.async steps the next mma.sync interleaves (backend/rules_sm80.py)
        self.frag_rotation = None  # the rotated loop being lowered (backend/rules_sm80.py FragRotation)
        self.groups = 0        # wgmma groups committed so far in the code being lowered
        self.group_floor = 0   # groups numbered below this were committed before a branch or loop edge
        self._coord_cache: dict[tuple, list[tuple]] = {}
        self.scratch_bytes = 0  # shared memory after the planned allocations, for rules that need it
        self._fitting: set[tuple] = set()  # (layout, dtype, shape) checked by _check_layouts

    # --- dispatch ----------------------------------------------------------------------------------

    def lower_op(self, op: Operation) -> None:
        try:
            self._check_layouts(op)
            r = rule_table.select(self, op)
            if op.name == "tk.mma_wait" and op.attrs.get(WAIT_FENCE_ATTR) and any(
                    isinstance(x := self.vals.get(id(v)), Frag) and x.pending for v in op.operands):
                fence_acq_rel(self.w, "cta")  # overlap-mma{fence_wait}: ptxas keeps the wait below the work before it
            # an accumulator whose wgmma group may still be in flight is waited for (its registers tied
            # through wgmma.wait_group) before anything but another mma or the loop's yield reads it
            for i, v in enumerate(op.operands):
                x = self.vals.get(id(v))
                if isinstance(x, Frag) and x.pending and not (op.name == "tk.mma" and i == 2) \
                        and op.name != "scf.yield":
                    if self.waited_in and id(v) not in self.set_in[-1]:
                        self.waited_in[-1].append((id(v), x))
                    self.vals[id(v)] = Frag(x.type, self.wait_group(x.values, self.groups_after(x)))
            r.fn(self, op)
        except FactError as e:  # a malformed layout in the op's types (hand-written IR): located here
            if e.loc is not None:
                raise
            raise LoweringError(op.loc, e.message) from None
        except CompileError as e:  # raised by a helper that does not know the op: located here
            if e.loc is None:
                e.loc = op.loc
            raise

    def _check_layouts(self, op: Operation) -> None:
        """Every register layout of the op's operands and results fits its shape (hand-written IR may
        give `warps = 32` to a 16-row tile: the slot formulas would then silently hold no elements), and
        an element-wise op's register operands of the result's kind have the result's layout (what
        infer-layouts guarantees: the rules pair values slot by slot)."""
        if op.name in SAME_LAYOUT_OPS and op.results:
            res = layout_of(op.result.type)
            for v in op.operands:
                if type(v.type) is type(op.result.type) and layout_of(v.type) != res:
                    raise FactError(None, f"backend: '{op.name}' computes {op.result.type} from {v.type}: "
                                          "an element-wise op's operands and result have one layout")
        for v in (*op.operands, *op.results):
            t = v.type
            lay = layout_of(t) if isinstance(t, (TileType, VectorType)) else None
            if lay is None or (lay, t.dtype, tile_shape(t)) in self._fitting:
                continue
            try:
                fragment(lay, t.dtype, tile_shape(t))
            except ValueError as e:
                why = e.message if isinstance(e, CompileError) else str(e)
                raise FactError(None, f"layout {format_attr_value(lay.to_attr())} does not fit {t.bare()}: {why}") \
                    from None
            self._fitting.add((lay, t.dtype, tile_shape(t)))

    def lower_ops(self, ops: list[Operation]) -> None:
        """Lower a region's ops (its terminator is the parent rule's business) in a new scope."""
        with self.scope():
            for op in ops:
                if op.name != "scf.yield":
                    self.lower_op(op)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Values cached while lowering a region (slot coordinates) are dropped when it ends: the
        region's blocks do not dominate what follows it (a loop may run zero times, a branch may not
        run). So are the waited registers of an accumulator read in the region: after it, the value
        is the pending one again (a later read waits where it is; before, a read in a run-time if made
        the loop's back edge use registers defined only in the branch: invalid LLVM IR)."""
        saved = dict(self._coord_cache)
        self.set_in.append(set())
        self.waited_in.append([])
        try:
            yield
        finally:
            self._coord_cache = saved
            self.set_in.pop()
            for key, before in reversed(self.waited_in.pop()):
                self.vals[key] = before

    # --- values ------------------------------------------------------------------------------------

    def get(self, v: Value) -> object:
        if id(v) not in self.vals:
            raise LoweringError(None, f"backend: value %{v.name} has no lowering")
        return self.vals[id(v)]

    def peek(self, v: Value) -> object:
        """The lowered value if there is one yet (rule conditions look before the rule runs)."""
        return self.vals.get(id(v))

    def scalar(self, v: Value) -> str:
        x = self.get(v)
        if not isinstance(x, str):
            raise LoweringError(None, f"backend: %{v.name} is not a scalar")
        return x

    def set(self, v: Value, x: object) -> None:
        self.vals[id(v)] = x
        if self.set_in:
            self.set_in[-1].add(id(v))

    def describe(self, v: Value) -> str:
        """An operand's form for error messages: memory space and layout."""
        x = self.vals.get(id(v))
        if isinstance(x, Frag):
            lay = layout_of(x.type)
            return f"register {x.type.bare()} in layout '{lay.kind if lay is not None else '?'}'"
        if isinstance(x, Smem):
            return f"shared {x.type.bare()}"
        if isinstance(x, Global):
            return f"global {x.type}"
        return str(v.type)

    # --- scalars -------------------------------------------------------------------------------------

    def dim(self, d: int | str) -> str:
        return str(d) if isinstance(d, int) else self.sizes[d]

    def i64(self, v: str | int) -> str:
        if isinstance(v, int) or str(v).lstrip("-").isdigit():
            return str(v)
        return self.w.op(f"sext i32 {v} to i64", "w")

    def plane(self, ptr: str, gty: GlobalType, coords: list[str]) -> tuple[str, str, str]:
        """(pointer to the 2-D plane of a global tensor that the leading coordinates select, its rows,
        its cols)."""
        w = self.w
        dims = [self.dim(d) for d in gty.dims]
        nrows, ncols = dims[-2:]
        if gty.rank == 2:
            return ptr, nrows, ncols
        base, stride = "0", w.op(f"mul i64 {self.i64(nrows)}, {self.i64(ncols)}", "plane")
        for k in reversed(range(gty.rank - 2)):
            base = w.op(f"add i64 {base}, {w.op(f'mul i64 {self.i64(coords[k])}, {stride}', 'lo')}", "lb")
            if k:
                stride = w.op(f"mul i64 {stride}, {self.i64(dims[k])}", "st")
        return w.op(f"getelementptr {LLVM_TYPE[gty.dtype]}, ptr addrspace(1) {ptr}, i64 {base}", "pb"), nrows, ncols

    def if_then(self, cond: str, body: Callable[[], None]) -> None:
        """Emit `body` under the i1 `cond`."""
        w = self.w
        then, done = w.label("then"), w.label("endif")
        w.cond_br(cond, then, done)
        w.start_block(then)
        body()
        w.br(done)
        w.start_block(done)

    # --- threads ---------------------------------------------------------------------------------

    def thread_index(self) -> str:
        return self.role.tid if self.role is not None else self.tid

    def thread_parts(self) -> ThreadParts:
        """wg / warp / lane of the thread from %tid.x (computed where asked: no dominance worries)."""
        w = self.w
        t128 = w.op(f"and i32 {self.tid}, 127", "t128")
        return ThreadParts(wg=w.op(f"lshr i32 {self.tid}, 7", "wg"), warp=w.op(f"lshr i32 {t128}, 5", "warp"),
                           lane=w.op(f"and i32 {self.tid}, 31", "lane"))

    def role_threads(self) -> int:
        """Threads that run the current code: the role's warpgroups, or the whole block."""
        return self.role.threads if self.role is not None else self.threads

    # --- barriers and fences -----------------------------------------------------------------------

    def sync(self) -> None:
        """All threads that run this code meet: the block, or the role's threads on the role's named
        barrier (backend.idioms.NAMED_BARRIERS)."""
        if self.role is None:
            block_barrier(self.w)
            return
        named_barrier_sync(self.w, NAMED_BARRIERS.id("role"), self.role.threads)

    def wait_for_bulk_reads(self) -> None:
        """The thread that issues TMA stores (thread 0 of the role: backend/rules_pipe.py `tma_store`) waits
        until the copy engine has read the shared tiles of every bulk store it left in flight."""
        lead = self.w.op(f"icmp eq i32 {self.thread_index()}, 0", "lead")
        self.if_then(lead, lambda: bulk_wait(self.w, 0, read=True))

    def fence_async(self) -> None:
        """Generic-proxy shared writes become visible to wgmma and TMA (HOPPER.md §8.1): sm_90a only."""
        if self.target == "sm_90a":
            fence_async_proxy(self.w)

    # --- register layouts ------------------------------------------------------------------------

    def coords(self, t: TileType | VectorType) -> list[tuple]:
        """Each slot's logical coordinates for this thread, as LLVM values (cached per type)."""
        lay = slot_layout(t)
        key = ("coords", str(t.bare()), lay)
        if key not in self._coord_cache:
            tid = self.thread_index()
            if lay.threads < self.role_threads():
                # The layout spreads the value over fewer threads than run this code (a tile too
                # small to give every warp whole steps: rt<bf16, 64, 8> over 4 warps uses 2). The
                # other threads replicate those coordinates: they load the same elements and store
                # the same values to the same places, and never address past the tile.
                tid = self.w.op(f"urem i32 {tid}, {lay.threads}", "ltid")
            self._coord_cache[key] = slot_coords(lay, tile_shape(t), LLVMBuilder(self.w), tid)
        return self._coord_cache[key]

    def coord_steps(self, t: TileType) -> list[tuple[int, int]] | None:
        """Each slot's (row, col) minus slot 0's, when that difference is the same constant for every
        thread of the role (evaluated with numpy at compile time), else None. A rule can then test a
        slot with one compare against an immediate, instead of materializing every slot's coordinate:
        LLVM hoists those loop-invariant values out of the loop, one register each for the whole loop."""
        lay = slot_layout(t)
        tids = np.arange(self.role_threads())
        if lay.threads < self.role_threads():
            tids = tids % lay.threads
        coords = slot_coords(lay, tile_shape(t), NumpyBuilder(), tids)
        if not coords or any(rc is None for rc in coords):
            return None
        r0, c0 = (np.broadcast_to(np.asarray(v), tids.shape) for v in coords[0])
        steps = []
        for r, c in coords:
            dr, dc = np.broadcast_to(np.asarray(r), tids.shape) - r0, np.broadcast_to(np.asarray(c), tids.shape) - c0
            if not ((dr == dr[0]).all() and (dc == dc[0]).all()):
                return None
            steps.append((int(dr[0]), int(dc[0])))
        return steps

    def owner_masks(self, t: TileType | VectorType) -> list[np.ndarray | None]:
        """Per slot of `t`, which threads of the role own it (a bool per thread), or None where every thread
        does: an element held by several threads (a row vector in each lane of a quad, a layout over fewer
        threads than run the code) is owned by the lowest thread and slot holding it. A store may write it
        from every holder; an add (`reduce = "add"`) must come from exactly one."""
        lay = slot_layout(t)
        tids = np.arange(self.role_threads())
        lt = tids % lay.threads if lay.threads < self.role_threads() else tids
        coords = slot_coords(lay, tile_shape(t), NumpyBuilder(), lt)
        if any(c is None or any(x is None for x in c) for c in coords):
            raise LoweringError(None, f"backend: the owners of {t}'s elements are not known at compile time")
        keys = [np.ravel_multi_index(tuple(np.broadcast_to(np.asarray(x), tids.shape).astype(np.int64)
                                           for x in c), tile_shape(t)) for c in coords]
        seen = np.zeros(int(np.prod(tile_shape(t))), bool)
        masks: list[np.ndarray | None] = []
        for key in keys:
            own = np.zeros(tids.shape, bool)
            for tid in tids:  # ascending: the lowest holder claims an element
                if not seen[key[tid]]:
                    seen[key[tid]] = own[tid] = True
            masks.append(None if own.all() else own)
        return masks

    def nslots(self, t: TileType | VectorType) -> int:
        return len(numeric_slots(register_layout(t), tile_shape(t)))

    # --- shared memory -----------------------------------------------------------------------------

    def shared_addresses(self, smem: Smem, pos: Position, instances: list[object]) -> list[str]:
        """The shared address (i32) this thread uses in each instance: smem base + shared_offset.

        The lane-dependent offset of the first instance is computed once; every further instance
        whose offset differs from it by a constant for all threads (or by a constant XOR, as a
        swizzled column step does) reuses it, which is checked at compile time by evaluating
        shared_offset for every thread with numpy; anything else gets its own full computation."""
        w = self.w
        lay = shared_layout(smem.type)  # type: ignore[arg-type]
        nb, tids = NumpyBuilder(), np.arange(self.role_threads())

        def numeric(inst: object) -> np.ndarray:
            r, c = pos(nb, tids, inst)
            return np.broadcast_to(shared_offset(lay, r, c, nb), tids.shape)

        def emitted(inst: object) -> str:
            lb = BitLLVMBuilder(w)
            r, c = pos(lb, self.thread_index(), inst)
            return str(shared_offset(lay, r, c, lb))

        ref = numeric(instances[0])
        off0 = emitted(instances[0])
        base0 = w.op(f"add i32 {smem.addr}, {off0}", "sa")
        out = []
        for inst in instances:
            o = numeric(inst)
            diff, flip = o - ref, o ^ ref
            if (diff == diff[0]).all():
                out.append(base0 if diff[0] == 0 else w.op(f"add i32 {base0}, {int(diff[0])}", "sa"))
            elif (flip == flip[0]).all():
                x = w.op(f"xor i32 {off0}, {int(flip[0])}", "so")
                out.append(w.op(f"add i32 {smem.addr}, {x}", "sa"))
            else:
                out.append(w.op(f"add i32 {smem.addr}, {emitted(inst)}", "sa"))
        return out

    def scratch(self, nbytes: int, cluster_wide: bool = False) -> str:
        """The address of a scratch area of `nbytes` after the planned allocations (one area, reused:
        the rules that use it put barriers around their use). In a cluster kernel only a rule that
        exchanges through every CTA's copy (`cluster_wide`) may use it: cluster-rows refuses the others'
        ops, and this catches IR text that bypassed it."""
        if self.cluster > 1 and not cluster_wide:
            raise LoweringError(self.kernel.loc, f"backend: cluster = {self.cluster}: an exchange through one CTA's "
                                                 "shared memory cannot reach the warps of the other CTAs",
                                hint="cluster-rows accepts kernels whose values live in registers and global memory")
        self.scratch_bytes = max(self.scratch_bytes, nbytes)
        return self.w.op(f"add i32 {self.smem}, {self.scratch_offset}", "scratch")

    @property
    def scratch_offset(self) -> int:
        return -(-self.plan.total // 128) * 128

    # --- wgmma groups ------------------------------------------------------------------------------

    def commit_group(self) -> int:
        """Count one `wgmma.commit_group` (the caller emits it); returns the group's number."""
        self.groups += 1
        return self.groups - 1

    def groups_after(self, x: Frag) -> int:
        """How many wgmma groups may stay in flight while `x` is read: those committed after x's group
        in the same straight-line code (groups complete in order, PTX ISA wgmma.wait_group); 0 when
        x's group is unknown or lies before a loop edge or branch."""
        if x.group is None or x.group < self.group_floor:
            return 0
        return self.groups - 1 - x.group

    def cut_groups(self) -> None:
        """A loop edge or branch: from here on, earlier groups are waited for with wait_group 0."""
        self.group_floor = self.groups

    def wait_group(self, acc: list[str], n: int) -> list[str]:
        """`wgmma.wait_group n` with the accumulator registers tied through it (no early reads)."""
        return wgmma_wait_group_tied(self.w, acc, n)
