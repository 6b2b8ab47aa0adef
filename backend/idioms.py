"""The PTX idioms the lowering rules emit, one named emitter each, and the named-barrier table.

Every barrier, fence, mbarrier operation, wgmma fence / commit / wait, cp.async commit / wait and bulk
commit / wait that a rule emits is spelled here once, as a function of the LLVM writer (and of the
target where the spelling differs between sm_90a and sm_80). The rules call these by name (as
ThunderKittens' `sync.cuh` names `arrive`, `arrive_and_wait`, `wait`, and MLIR's NVGPUToNVVM lowers
onto one-instruction NVVM ops); none writes the PTX of an idiom inline.

Named barriers (PTX ISA bar/barrier): a CTA has NAMED_BARRIER_IDS ids; id 0 is the block barrier
(`__syncthreads`, `llvm.nvvm.barrier0`). Which ids each use takes, and why, is the table
NAMED_BARRIERS: a user asks it for its id (`NAMED_BARRIERS.id("role")`) or emits its id from a
warpgroup index (`NAMED_BARRIERS.emit_id(...)`), never writes a number.

Each emitter writes exactly the LLVM text (and so the PTX) the rules wrote inline before it had a name;
tests/backend/test_backend_rooms.py checks the text of some and that no other backend module spells
`bar.sync` or `fence.proxy.async`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from tkir.target import MBARRIER_BYTES

if TYPE_CHECKING:
    from tkir.backend.llvm_text import LLVMWriter

NAMED_BARRIER_IDS = 16  # PTX ISA bar/barrier: barrier ids 0..15 per CTA
MBARRIER_SHIFT = MBARRIER_BYTES.bit_length() - 1  # log2 of an mbarrier's bytes: a slot's byte offset is index << 3


# --- the named-barrier table ----------------------------------------------------------------------


@dataclass(frozen=True)
class BarrierUse:
    """A run of named-barrier ids that one use takes: ids first .. first + count - 1."""

    name: str
    first: int
    count: int
    reason: str

    @property
    def ids(self) -> range:
        return range(self.first, self.first + self.count)


class NamedBarriers:
    """Which named-barrier ids each use takes, with the reason. Uses are reserved once (at import):
    two uses never share an id, and no use reaches past the hardware's `total` ids; either is an error
    at reservation. A use's ids are the same in every kernel, so the emitted code names fixed ids."""

    def __init__(self, total: int = NAMED_BARRIER_IDS) -> None:
        self.total = total
        self.uses: dict[str, BarrierUse] = {}

    def reserve(self, name: str, count: int, reason: str, first: int | None = None) -> BarrierUse:
        """Take `count` ids for `name`: from `first`, or the lowest free run of `count` ids."""
        if name in self.uses:
            raise ValueError(f"named barriers: '{name}' is reserved twice")
        if count < 1:
            raise ValueError(f"named barriers: '{name}' asks for {count} ids")
        taken = {i: u.name for u in self.uses.values() for i in u.ids}
        if first is None:
            first = next((f for f in range(self.total - count + 1)
                          if not any(i in taken for i in range(f, f + count))), self.total)
        if first < 0 or first + count > self.total:
            raise ValueError(f"named barriers: '{name}' needs ids {first}..{first + count - 1}, "
                             f"but a CTA has {self.total} ({', '.join(self.uses) or 'none'} taken)")
        clash = sorted({taken[i] for i in range(first, first + count) if i in taken})
        if clash:
            raise ValueError(f"named barriers: '{name}' (ids {first}..{first + count - 1}) shares ids with "
                             f"{', '.join(clash)}")
        use = BarrierUse(name, first, count, reason)
        self.uses[name] = use
        return use

    def __getitem__(self, name: str) -> BarrierUse:
        return self.uses[name]

    def id(self, name: str, index: int = 0) -> int:
        """The id of entry `index` of a use."""
        use = self.uses[name]
        if not 0 <= index < use.count:
            raise ValueError(f"named barriers: '{name}' has {use.count} ids, not an entry {index}")
        return use.first + index

    def emit_id(self, w: LLVMWriter, name: str, index: str, hint: str) -> str:
        """The id of entry `index` (an i32 LLVM value, a warpgroup's number) of a use, as an LLVM value."""
        return w.op(f"add i32 {index}, {self.uses[name].first}", hint)


NAMED_BARRIERS = NamedBarriers()
NAMED_BARRIERS.reserve("block", 1, "every thread of the CTA: __syncthreads (llvm.nvvm.barrier0)", first=0)
NAMED_BARRIERS.reserve("warpgroup", 7, "one warpgroup's 128 threads, id 1 + its number: the staged epilogue's and "
                                       "stream-K partials' writes before one thread reads them (a block has at "
                                       "most 8 warpgroups, 7 beside a producer)", first=1)
NAMED_BARRIERS.reserve("role", 1, "the threads of a warp-specialized role (LoweringContext.sync inside tk.role)",
                       first=8)
NAMED_BARRIERS.reserve("turn", 7, "pingpong turns: warpgroup w of a consumer role waits on id 9 + w", first=9)


# --- barriers -------------------------------------------------------------------------------------


def block_barrier(w: LLVMWriter) -> None:
    """Every thread of the CTA meets (`bar.sync 0` in the PTX: the intrinsic of __syncthreads)."""
    w.call("void", "llvm.nvvm.barrier0", [])


def named_barrier_sync(w: LLVMWriter, barrier: int | str, threads: int) -> None:
    """`bar.sync id, threads`: wait until `threads` threads have arrived on named barrier `barrier`
    (an id of NAMED_BARRIERS, or an i32 LLVM value computed from one)."""
    _bar(w, "bar.sync", barrier, threads)


def named_barrier_arrive(w: LLVMWriter, barrier: int | str, threads: int) -> None:
    """`bar.arrive id, threads`: count this thread on named barrier `barrier` without waiting."""
    _bar(w, "bar.arrive", barrier, threads)


def _bar(w: LLVMWriter, opcode: str, barrier: int | str, threads: int) -> None:
    if isinstance(barrier, int):
        w.asm("void", [f"{opcode} {barrier}, {threads};"], [], [])
    else:
        w.asm("void", [f"{opcode} $0, {threads};"], ["r"], [("i32", barrier)])


def warp_sync(w: LLVMWriter) -> None:
    """The warp's lanes meet; their shared writes are visible to each other (PTX ISA §9.7.13.2)."""
    w.asm("void", ["bar.warp.sync -1;"], [], [])


def cluster_barrier(w: LLVMWriter) -> None:
    """Every thread of the cluster's CTAs meets; shared-memory writes before it, remote ones included,
    are visible after it (PTX ISA 7.8, barrier.cluster: arrive has release, wait acquire semantics)."""
    w.asm("void", ["barrier.cluster.arrive.release;", "barrier.cluster.wait.acquire;"], [], [])


# --- fences ---------------------------------------------------------------------------------------


def fence_async_proxy(w: LLVMWriter) -> None:
    """Generic-proxy shared writes become visible to the async proxy: wgmma and TMA (HOPPER.md §8.1)."""
    w.asm("void", ["fence.proxy.async.shared::cta;"], [], [])


def fence_mbarrier_init(w: LLVMWriter) -> None:
    """mbarrier.init is visible to the cluster (and to the TMA unit that completes transactions)."""
    w.asm("void", ["fence.mbarrier_init.release.cluster;"], [], [])


def fence_acq_rel(w: LLVMWriter, scope: str) -> None:
    """`fence.acq_rel.<scope>` (cta or gpu; PTX ISA 6.0, sm_70+)."""
    w.asm("void", [f"fence.acq_rel.{scope};"], [], [])


# --- mbarriers --------------------------------------------------------------------------------------


def barrier_space(target: str) -> str:
    """The state space of a barrier operand: `.shared::cta` needs PTX ISA 7.8, which sm_80 kernels do
    not declare; plain `.shared` is the same space (PTX ISA §9.7.13.15)."""
    return "shared::cta" if target == "sm_90a" else "shared"


def mbarrier_slot(w: LLVMWriter, base: str, index: str) -> str:
    """The address of mbarrier `index` (an i32 value) of an array at shared address `base`."""
    off = w.op(f"shl i32 {index}, {MBARRIER_SHIFT}", "boff")
    return w.op(f"add i32 {base}, {off}", "bar")


def mbarrier_init(w: LLVMWriter, target: str, bar: str, count: int | str) -> None:
    """Initialise the mbarrier at `bar` to expect `count` arrivals per phase."""
    w.asm("void", [f"mbarrier.init.{barrier_space(target)}.b64 [$0], $1;"], ["r", "r"],
          [("i32", bar), ("i32", str(count))])


def mbarrier_arrive(w: LLVMWriter, target: str, bar: str) -> None:
    """mbarrier.arrive on `bar`, its state discarded: the sink `_` on sm_90, a scratch register on sm_80
    (ptxas refuses the discard form there)."""
    if target == "sm_90a":
        lines = ["mbarrier.arrive.shared::cta.b64 _, [$0];"]
    else:
        lines = ["{", ".reg .b64 state;", "mbarrier.arrive.shared.b64 state, [$0];", "}"]
    w.asm("void", lines, ["r"], [("i32", bar)])


def cluster_ctarank(w: LLVMWriter) -> str:
    """This CTA's rank in its cluster (PTX special register %cluster_ctarank)."""
    return w.asm("i32", ["mov.u32 $0, %cluster_ctarank;"], ["=r"], [])


def mbarrier_arrive_cluster(w: LLVMWriter, bar: str, ctas: int) -> None:
    """One arrival on the mbarrier at `bar` (a shared::cta address) in each of the cluster's `ctas` CTAs: mapa
    gives the barrier's address in CTA r's shared memory (PTX ISA 7.8, mapa; `mbarrier.arrive.shared::cluster`
    with the default .release.cta semantics, as CUTLASS's ClusterBarrier::arrive(cta_id): the stage was read by
    wgmma, waited for before the release. `.release.cluster` makes each arrival a MEMBAR.ALL.GPU in the SASS:
    measured 2.5x slower at gemm 4096^3 on an H100)."""
    for r in range(ctas):
        remote = w.asm("i32", ["mapa.shared::cluster.u32 $0, $1, $2;"], ["=r", "r", "r"],
                       [("i32", bar), ("i32", str(r))])
        w.asm("void", ["mbarrier.arrive.shared::cluster.b64 _, [$0];"], ["r"], [("i32", remote)])


def mbarrier_arrive_expect_tx(w: LLVMWriter, bar: str, nbytes: int | str) -> None:
    """Arrive on `bar` and add `nbytes` to the transaction count its phase waits for (TMA loads)."""
    w.asm("void", ["mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;"], ["r", "r"],
          [("i32", bar), ("i32", str(nbytes))])


def mbarrier_wait_parity(w: LLVMWriter, target: str, bar: str, parity: str) -> None:
    """Wait until the phase of parity `parity` of the mbarrier at `bar` has completed: a loop in the IR
    around one test. try_wait (sm_90) suspends the thread for a while; sm_80 has only the test (PTX ISA
    mbarrier.test_wait)."""
    loop, ready = w.label("wait"), w.label("ready")
    w.br(loop)
    w.start_block(loop)
    test = "try_wait" if target == "sm_90a" else "test_wait"
    done = w.asm("i32", ["{", ".reg .pred p;", f"mbarrier.{test}.parity.{barrier_space(target)}.b64 p, [$1], $2;",
                         "selp.u32 $0, 1, 0, p;", "}"], ["=r", "r", "r"],
                 [("i32", bar), ("i32", parity)], "done")
    again = w.op(f"icmp eq i32 {done}, 0", "again")
    w.cond_br(again, loop, ready)
    w.start_block(ready)


def cp_async_mbarrier_arrive(w: LLVMWriter, target: str, bar: str) -> None:
    """Arrive on `bar` once this thread's cp.async copies have landed, without counting an extra
    arrival (`.noinc`: the barrier's count includes it; PTX ISA §9.7.9.25.3; sm_80)."""
    w.asm("void", [f"cp.async.mbarrier.arrive.noinc.{barrier_space(target)}.b64 [$0];"], ["r"], [("i32", bar)])


# --- wgmma groups -----------------------------------------------------------------------------------


def wgmma_fence(w: LLVMWriter) -> None:
    """Register writes before it (accumulators, a register A) are ordered before the next wgmma."""
    w.call("void", "llvm.nvvm.wgmma.fence.sync.aligned", [])


def wgmma_commit_group(w: LLVMWriter) -> None:
    """The wgmmas issued since the last commit form one group."""
    w.call("void", "llvm.nvvm.wgmma.commit_group.sync.aligned", [])


def wgmma_wait_group(w: LLVMWriter, n: int) -> None:
    """Wait until at most `n` wgmma groups are in flight (no registers tied: see wgmma_wait_group_tied)."""
    w.asm("void", [f"wgmma.wait_group.sync.aligned {n};"], [], [])


def wgmma_wait_group_tied(w: LLVMWriter, acc: list[str], n: int) -> list[str]:
    """`wgmma.wait_group n` with the accumulator registers `acc` tied through it, so LLVM cannot read
    them before the wait; returns the values after it."""
    k = len(acc)
    ret = w.struct("float", k)
    r = w.asm(ret, [f"wgmma.wait_group.sync.aligned {n};"], ["=f"] * k + [str(i) for i in range(k)],
              [("float", v) for v in acc], "waited")
    return [w.op(f"extractvalue {ret} {r}, {i}", "acc") for i in range(k)]


# --- cp.async and bulk copy groups ------------------------------------------------------------------


def cp_async_commit(w: LLVMWriter) -> None:
    """This thread's cp.async copies since the last commit form one group."""
    w.asm("void", ["cp.async.commit_group;"], [], [])


def cp_async_wait(w: LLVMWriter, pending: int) -> None:
    """Wait until at most `pending` of this thread's cp.async groups are still in flight."""
    w.asm("void", [f"cp.async.wait_group {pending};"], [], [])


def cp_async_wait_all(w: LLVMWriter) -> None:
    """Wait for every cp.async copy of this thread."""
    w.asm("void", ["cp.async.wait_all;"], [], [])


def bulk_commit(w: LLVMWriter) -> None:
    """This thread's bulk (TMA) stores since the last commit form one bulk group."""
    w.asm("void", ["cp.async.bulk.commit_group;"], [], [])


def bulk_wait(w: LLVMWriter, pending: int, read: bool = False) -> None:
    """Wait until at most `pending` bulk groups are in flight; with `read`, only until they have read
    their shared-memory source (it may then be overwritten)."""
    w.asm("void", [f"cp.async.bulk.wait_group{'.read' if read else ''} {pending};"], [], [])

