"""The verifier's pipeline rules: the mbarrier ring protocol of `pipeline`, `early-release`,
`overlap-mma`, `persistent`, `stream-k` and `pingpong`, and the cp.async groups of
`pipeline-cp-async` (tkir/ops_pipeline.py), checked on the IR.

Two parts. Static rules over the IR text:

* a `pipe.expect` announces exactly the bytes of the `pipe.copy`s that follow it in its block on the
  same barrier and stage (what `mbarrier.expect_tx` waits for);
* a `deferred` `pipe.arrive` sits directly in an `scf.for` body, one per loop (the backend carries
  the previous iteration's stage around that loop and releases the last one after it).

And a protocol model: one block of the kernel run on scalars only, its roles (`tk.role`) as
coroutines that meet at mbarriers with the hardware's rules (PTX ISA §9.7.12.15; HOPPER.md §5.1):
a phase of `bars[s]` completes when it has received `count` arrivals and its announced transaction
bytes have all landed; `pipe.wait` with parity p passes once the barrier's completed phases c have
c mod 2 != p (a fresh barrier passes parity 1). Loop bounds, `scf.if` conditions (and cp.async copy
conditions), stage indices and parities are evaluated, with sizes that give every ring at least
2S+2 iterations (S its stages), for block 0 and for the grid's last block (sizes one more: ragged
edges); NUM_SMS is chosen so a persistent block runs TILES_PER_BLOCK tiles round its ring. A role
arrives as the backend makes it arrive: a TMA producer once (one thread), a consumer once per warp,
a cp.async producer once per thread per copy. A TMA copy lands at once; a cp.async copy when a
`pipe.async_wait` retires its group. wgmma groups are tracked as the backend commits and waits
them (`async_groups = N`: all but the newest N retired after issue; `defer_wait`: retired at the
first use of the result; otherwise retired at once), and a `deferred` release frees the previous
iteration's stage after the next mma was issued, the last one after the loop. The model checks:

* in a loop iteration `it` (the op marked `iteration = true`), every barrier op and stage view of an
  S-stage ring uses stage it mod S (and every stage index is in range), and a wait's parity is 0 or
  1 and flips once per round ((it / S) mod 2, or its complement for a barrier that starts free);
* arrivals never exceed a phase's count (else the barrier's count is wrong for its participants), and
  the copies never deliver more bytes than the phase's `pipe.expect`s announced;
* each role waits on a stage of a barrier once per phase, in order: the n-th wait is for the n-th
  phase after its first, and passes with exactly that phase completed (a barrier that ran two
  phases ahead was filled or released twice in a round); each role's arrivals on a ring go round
  it in order, once per stage per round;
* a role reads a stage (a `pipe.stage` view with readers, a tile a copy fills) only after waiting on
  the barrier its copies complete on for the latest fill, not after releasing it and not while a
  copy into it is in flight; it releases a stage (arrives on the barrier its producer waits on
  before refilling it) only once no wgmma group in flight reads it; when the roles finish, every
  fill was released;
* a stage a cp.async copy fills is read only once a `pipe.async_wait` retired the copy's group, and
  a `pipe.async_commit` closes the copies of the stage it names;
* no deadlock: when every unfinished role waits for a phase that no other role can complete, the
  error names the wait and what its phase is missing.

Each rule raises the verifier's located error at the op that breaks it. A run that cannot go on (a
loop bound or condition read from memory, or more than MAX_STEPS ops) stops without an error: what
it checked until then stands.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from tkir import scalar, symexpr
from tkir.diagnostics import CompileError
from tkir.ir import Block, Operation, Value, parent_op
from tkir.target import MAX_GRID, NUM_SMS, WARP, WARPS_PER_WARPGROUP
from tkir.types import TileType, VectorType

TILES_PER_BLOCK = 4    # NUM_SMS in the model: a persistent block runs about this many tiles (a one-stage
                       # ring of one fill per tile, like persistent attention's q, goes round 2S+2 = 4 times)
MIN_ROUNDS = 2         # every ring runs at least MIN_ROUNDS * S + 2 iterations (the 2S+2)
SIZE_UNIT = 64         # sizes start at SIZE_UNIT * (2S + 2): a tile of up to 64 along a size gives 2S+2 steps
STREAM_K_SIZE = 2560   # stream-K's run: 40 k-steps of 64, enough for a tail of split tiles of at least
                       # 16 iterations each (passes/stream_k.py's default min_iters) on NUM_SMS SMs
SIZE_TRIES = 3         # then double, up to this many times, while a ring went round fewer than 2S+2 times
MAX_STEPS = 40_000     # ops evaluated per model run; a longer run (a persistent grid of many tiles) stops there
NOT_READS = frozenset({"pipe.copy", "pipe.stage", "tk.role", "scf.for", "scf.if", "scf.yield"})  # write or pass on


class _Undefined:
    """The value of a scalar computed with a division by zero (LLVM's sdiv/srem by 0: poison)."""

    def __repr__(self) -> str:
        return "undefined"


UNDEFINED = _Undefined()


class _Stop(Exception):
    """The model cannot go on (a loop bound or condition it cannot evaluate, its step budget spent):
    what it checked so far stands, the rest is not checked."""


READ_HAZARD = "read_hazard"  # set on the model's error for a read of a stage its role has released


def verify_pipeline(kernel: Operation, error: type[CompileError]) -> None:
    """Check `kernel`'s mbarrier pipeline, if it has one; raise `error` (located) at the first problem."""
    if not any(op.name in ("pipe.barriers", "pipe.async_copy") for op in kernel.walk()):
        return
    misplaced = _static_rules(kernel, error)
    if misplaced is not None:  # the model first: a read it proves unsafe says more than where the arrive sits
        try:
            _run_model(kernel, error)
        except CompileError as e:
            if getattr(e, READ_HAZARD, False):
                raise
        raise misplaced
    unwaited = _unwaited_arrival(kernel, error)
    _run_model(kernel, error)  # the model first: the race it may find says more than the missing wait
    if unwaited is not None:
        raise unwaited


def _run_model(kernel: Operation, error: type[CompileError]) -> None:
    loop_stages = {op.attrs["stages"] for op in kernel.walk() if op.name == "scf.for" and "stages" in op.attrs}
    rings = {id(op): op.result.type.n for op in kernel.walk() if op.name == "pipe.barriers"
             and op.result.type.n > 1 and op.result.type.n in loop_stages}  # the pipelined loops' rings
    turns: dict[int, int] = {}  # id(pipe.barriers) -> the most phases one run completed on the ring
    for scale in range(SIZE_TRIES):
        for sizes, block in _bindings(kernel, 2 ** scale):
            model = _Model(kernel, sizes, block, error)
            try:
                model.run()
            except _Stop:
                pass
            for bars in model.rings:
                turns[id(bars.op)] = max(turns.get(id(bars.op), 0), sum(bars.done.values()))
        if all(turns.get(k, 0) >= MIN_ROUNDS * n + 2 for k, n in rings.items()):
            return


# --- static rules ----------------------------------------------------------------------------------


def _static_rules(kernel: Operation, error: type[CompileError]) -> CompileError | None:
    """Raise the first static rule's error; return (not raise) the error of a deferred 'pipe.arrive' outside
    a loop body, which the model then runs as an immediate release."""
    misplaced = None
    for op in kernel.walk():
        for region in op.regions:
            _expect_bytes(region.block, error)
        if op.name == "scf.for":
            _loop_stages(op, error)
            deferred = [x for x in op.body.ops if x.name == "pipe.arrive" and x.attrs.get("deferred")]
            if len(deferred) > 1:
                raise error(deferred[1].loc, "a second deferred 'pipe.arrive' in one loop: the backend carries one "
                                             "previous stage per loop (the first is at line "
                                             f"{_line(deferred[0])})")
        elif op.name == "pipe.arrive" and op.attrs.get("deferred"):
            owner = parent_op(op)
            if (owner is None or owner.name != "scf.for") and misplaced is None:
                misplaced = error(op.loc, "a deferred 'pipe.arrive' releases the previous iteration's stage of its "
                                          "loop: it must sit directly in an scf.for body",
                                  hint="the backend carries that stage around the loop and releases the last one "
                                       "after it")
    return misplaced


def _unwaited_arrival(kernel: Operation, error: type[CompileError]) -> CompileError | None:
    """Every barrier array a role arrives on is waited on by some role: a release no one waits for guards
    nothing (a producer that refills the stages without waiting for their release; the fuzzer's deleted
    producer wait on attention_bwd_dkdv.tk's %empty_dos, which the q ring happened to keep in order)."""
    waited = {id(op.operands[0]) for op in kernel.walk() if op.name == "pipe.wait"}
    for op in kernel.walk():
        if op.name == "pipe.arrive" and id(op.operands[0]) not in waited:
            return error(op.loc, f"'pipe.arrive' on %{op.operands[0].name}, which no role waits on: the stages it "
                                 "would release are refilled without waiting for their release",
                         hint="the producer waits on the barrier the consumers arrive on before refilling a stage")
    return None


def _loop_stages(loop: Operation, error: type[CompileError]) -> None:
    """A pipelined loop's `stages` is the stage count of the rings its body uses (barrier arrays and
    ring buffers of two stages or more)."""
    want = loop.attrs.get("stages")
    if want is None:
        return
    rings: dict[int, str] = {}
    for x in loop.body.ops:
        if x.name in ("pipe.wait", "pipe.expect", "pipe.arrive"):
            rings.setdefault(x.operands[0].type.n, f"%{x.operands[0].name}")
        elif x.name in ("pipe.stage", "pipe.async_copy"):
            buf = x.operands[0 if x.name == "pipe.stage" else 1]
            n = buf.type.get("stages") if isinstance(buf.type, (TileType, VectorType)) else None
            if isinstance(n, int):
                rings.setdefault(n, f"%{buf.name}")
    rings.pop(1, None)
    if rings and want not in rings:
        n, name = next(iter(rings.items()))
        raise error(loop.loc, f"'scf.for' has stages = {want!r}, but the ring {name} its body uses has {n} stages",
                    hint="a pipelined loop's stages is its rings' stage count")


def _expect_bytes(blk: Block, error: type[CompileError]) -> None:
    """A `pipe.expect %bars, %s` announces the bytes of the TMA copies after it in its block that
    complete on the same barrier and stage (up to the next expect on that barrier)."""
    ops = blk.ops
    for i, op in enumerate(ops):
        if op.name != "pipe.expect":
            continue
        bars, s = op.operands[0], op.operands[1]
        copies = []
        for x in ops[i + 1:]:
            if x.name == "pipe.expect" and x.operands[0] is bars:
                break
            if x.name == "pipe.copy" and not x.attrs.get("cp_async") and x.operands[1] is bars and x.operands[2] is s:
                copies.append(x)
        if not copies:
            continue  # the copies are elsewhere: the model counts the bytes that land
        got = sum(_copy_bytes(c) for c in copies)
        if got != op.attrs["bytes"]:
            each = ", ".join(f"%{c.operands[0].name}: {_copy_bytes(c)}" for c in copies)
            raise error(op.loc, f"'pipe.expect' on %{bars.name} announces {op.attrs['bytes']} bytes, but the "
                                f"{len(copies)} cop{'ies' if len(copies) > 1 else 'y'} completing on it "
                                f"deliver{'s' * (len(copies) == 1)} {got} ({each})",
                        hint="mbarrier.expect_tx must count every byte the TMA copies of the phase deliver: fewer "
                             "completes the phase before the data lands, more never completes it")


def _copy_bytes(op: Operation) -> int:
    return int(op.attrs.get("bytes", op.operands[0].type.nbytes))


def _line(op: Operation) -> str:
    return str(op.loc.line) if op.loc is not None else "?"


# --- the sizes and blocks the model runs -----------------------------------------------------------


def _bindings(kernel: Operation, scale: int) -> Iterator[tuple[dict[str, int], tuple[int, int, int]]]:
    """(sizes, block index) of each model run: every size at `base` x `scale`, block 0; every size one
    more (ragged edges), the grid's last block; NUM_SMS so that a persistent block runs TILES_PER_BLOCK
    tiles. The first time (`scale` 1) also every size 1 (the paths of one partial tile: everything
    masked) and, for a stream-K kernel, long sizes on NUM_SMS SMs (its tail of split tiles runs only
    when the tiles do not divide over the SMs and K is long)."""
    from tkir.verify_sizes import kernel_sizes

    names = sorted(kernel_sizes(kernel))
    stages = max((op.attrs["stages"] for op in kernel.walk() if op.name == "scf.for"
                  and isinstance(op.attrs.get("stages"), int) and op.attrs["stages"] > 0), default=1)
    base = SIZE_UNIT * (MIN_ROUNDS * stages + 2) * scale
    grid0 = kernel.attrs["grid"][0]
    runs: list[tuple[int, bool, int | None]] = [(base, False, None), (base + 1, True, None)]
    if scale == 1:
        if any(op.name == "tk.partial_add" for op in kernel.walk()):
            runs.append((max(STREAM_K_SIZE, base), False, NUM_SMS))
        runs.append((1, False, NUM_SMS))
    for size, last, sms in runs:
        sizes = {n: size for n in names}
        try:  # the tiles of a persistent grid (its grid with one block per tile), then SMs for a few each
            if sms is None:
                tiles = symexpr.evaluate(grid0, {**sizes, "NUM_SMS": MAX_GRID[0]})
                sms = max(1, -(-tiles // TILES_PER_BLOCK))
            sizes["NUM_SMS"] = sms
            grid = [symexpr.evaluate(g, sizes) for g in kernel.attrs["grid"]]
        except (ValueError, ZeroDivisionError, OverflowError):  # symexpr.SymExprError is a ValueError
            continue
        if min(grid) >= 1:  # else no block runs at these sizes (a grid of N / 64 at N = 1)
            yield sizes, (grid[0] - 1 if last else 0, 0, 0)


def _stages_of(op: Operation) -> int:
    """The stages of a barrier array or of a ring buffer's allocation (1 for another tile)."""
    t = op.result.type
    if op.name == "pipe.barriers":
        return t.n
    n = t.get("stages") if isinstance(t, (TileType, VectorType)) else None
    return n if isinstance(n, int) else 1


# --- the model -------------------------------------------------------------------------------------


@dataclass
class _Bars:
    """An array of mbarriers in the model: each stage's completed phases, arrivals and bytes pending."""

    op: Operation
    n: int
    count: int
    done: dict[int, int] = field(default_factory=dict)
    arrived: dict[int, int] = field(default_factory=dict)
    tx: dict[int, int] = field(default_factory=dict)
    expects: dict[int, list[Operation]] = field(default_factory=dict)
    arrivers: dict[int, list[tuple[Operation, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:  # per stage, made when first used (an array may be long)
        self.done = defaultdict(int)
        self.arrived = defaultdict(int)
        self.tx = defaultdict(int)
        self.expects = defaultdict(list)
        self.arrivers = defaultdict(list)

    @property
    def name(self) -> str:
        return f"%{self.op.result.name}"

    def passes(self, s: int, parity: int) -> bool:
        return self.done[s] % 2 != parity % 2


@dataclass
class _Role:
    """One participant: a `tk.role` (or the block outside roles) and its state in the model."""

    op: Operation | None
    kind: str
    warps: int
    single_thread: bool
    waits: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)  # (bars, s) -> (n, first parity)
    last_arrival: dict[int, int] = field(default_factory=dict)  # id(bars) -> last stage arrived on
    seen: dict[tuple[int, int], int | None] = field(default_factory=dict)  # (buffer, s) -> fill phase acquired
    released_by: dict[tuple[int, int], Operation] = field(default_factory=dict)  # (buffer, s) -> its last release
    groups: list[tuple[Operation, frozenset]] = field(default_factory=list)  # wgmma groups in flight, oldest first
    deferred: list[dict] = field(default_factory=list)  # the enclosing loops' deferred-release state
    cp_open: list[tuple[int, int, Operation]] = field(default_factory=list)  # cp.async copies not yet committed
    cp_groups: list[list[tuple[int, int, Operation]]] = field(default_factory=list)  # committed, in flight

    @property
    def label(self) -> str:
        if self.op is None:
            return "the block"
        size = (f"{self.op.attrs['warps']} warps" if isinstance(self.op.attrs.get("warps"), int)
                else f"{self.op.attrs.get('warpgroups', 1)} warpgroup{'s' * (self.op.attrs.get('warpgroups', 1) != 1)}")
        return f"the {self.kind} role ({size})"

    def arrivals(self) -> int:
        """Arrivals of one `pipe.expect`/`pipe.arrive`: one thread of a TMA producer, else one per warp."""
        return 1 if self.single_thread or self.op is None else self.warps


class _Model:
    def __init__(self, kernel: Operation, sizes: dict[str, int], block: tuple[int, int, int],
                 error: type[CompileError]) -> None:
        self.kernel = kernel
        self.sizes = sizes
        self.block = block
        self.error = error
        self.env: dict[int, object] = {}
        self.steps = 0
        self.rings: list[_Bars] = []  # the barrier arrays made so far
        self.completed = False  # a phase completed since the running role last yielded
        self.grid = []
        for expr in kernel.attrs["grid"]:
            try:
                self.grid.append(symexpr.evaluate(expr, sizes))
            except (ValueError, ZeroDivisionError, OverflowError):
                self.grid.append(None)
        self.parity_x: dict[int, tuple[int, int]] = {}  # id(wait) -> (parity xor round parity, iteration)
        self.iteration_of: dict[int, Operation | None] = {}
        self.readers: dict[int, bool] = {}
        self.pending_fill: set[tuple[int, int]] = set()
        self.fill_bar: dict[int, Value] = {}      # id(buffer) -> the barrier its copies complete on
        self.fills: dict[int, list[Value]] = {}   # id(barrier) -> the buffers filled on it
        self.guards: dict[int, list[Value]] = {}  # id(barrier) -> the buffers a producer refills after waiting on it
        self.filled_tiles: set[int] = set()       # non-ring tiles a copy fills directly
        self.cp_bufs = {id(op.operands[1]) for op in kernel.walk() if op.name == "pipe.async_copy"}
        self.cp_filled: set[tuple[int, int]] = set()  # (ring buffer, stage) a cp.async copy was issued into
        self.deferred_loops: set[int] = {id(op) for op in kernel.walk() if op.name == "scf.for" and any(
            x.name == "pipe.arrive" and x.attrs.get("deferred") for x in op.body.ops)}
        self.async_loops: set[int] = {id(op) for op in kernel.walk() if op.name == "scf.for" and any(
            x.name == "tk.mma" and x.attrs.get("async_groups") for x in op.body.ops)}
        self._map_rings(kernel.body, None)

    # -- what each barrier guards ------------------------------------------------------------------

    def _map_rings(self, blk: Block, waited: Value | None) -> None:
        """Which buffers each barrier fills (the copies' barrier) and guards (the producer's last wait
        before the copy: it refills the buffer once that barrier says the consumers released it)."""
        for op in blk.ops:
            if op.name == "pipe.wait":
                waited = op.operands[0]
            elif op.name == "pipe.copy":
                dst = op.operands[0]
                buf = dst.owner.operands[0] if isinstance(dst.owner, Operation) and dst.owner.name == "pipe.stage" \
                    else dst
                if buf is dst:
                    self.filled_tiles.add(id(buf))
                self.fill_bar[id(buf)] = op.operands[1]
                _add(self.fills, op.operands[1], buf)
                if waited is not None:
                    _add(self.guards, waited, buf)
            for r in op.regions:
                self._map_rings(r.block, waited)

    # -- running -----------------------------------------------------------------------------------

    def run(self) -> None:
        for a in self.kernel.body.args:
            self.env[id(a)] = None
        block_role = _Role(None, "block", 0, True)
        ops = self.kernel.body.ops
        i = 0
        while i < len(ops):
            if ops[i].name == "tk.role":
                j = i
                while j < len(ops) and ops[j].name == "tk.role":
                    j += 1
                self._schedule([(self._role_of(r), r.body) for r in ops[i:j]])
                self._all_released()
                i = j
                continue
            j = i
            while j < len(ops) and ops[j].name != "tk.role":
                j += 1
            self._schedule([(block_role, _Slice(ops[i:j]))])
            i = j

    def _all_released(self) -> None:
        """When the roles are done, every fill of a stage the producer refills after a release was
        released (a persistent block's next tile would wait for the missing one forever)."""
        for key, bufs in self.guards.items():
            empty = self.env.get(key)
            if not isinstance(empty, _Bars):
                continue
            for buf in bufs:
                full = self.env.get(id(self.fill_bar.get(id(buf))))
                if not isinstance(full, _Bars) or full.n != empty.n:
                    continue
                for s in sorted({*full.done, *empty.done, *empty.arrived}):
                    if 0 < empty.arrived[s] < empty.count:
                        raise self.error(empty.op.loc, f"'pipe.barriers' {empty.name} has count = {empty.count}, but a "
                                                       f"phase of {empty.name}[{s}] receives only {empty.arrived[s]} "
                                                       "arrivals: the stage is never released")
                    if full.done[s] != empty.done[s]:
                        what = f"stage {s} of %{buf.name}" if buf.type.get("stages") else f"%{buf.name}"
                        raise self.error(empty.op.loc, f"{what} was filled {_times(full.done[s])} ({full.name}[{s}]) "
                                                       f"but released {_times(empty.done[s])} ({empty.name}[{s}]) "
                                                       "when the roles finish: each fill is released once",
                                         hint="the release of the last stage after the loop is missing or skipped; "
                                              "a persistent block's next tile would wait for it forever")

    def _role_of(self, op: Operation) -> _Role:
        kind = str(op.attrs.get("kind"))
        if isinstance(op.attrs.get("warps"), int):
            warps = int(op.attrs["warps"])
        else:
            warps = WARPS_PER_WARPGROUP * int(op.attrs.get("warpgroups") or 1)
        cp_async = any(x.name == "pipe.copy" and x.attrs.get("cp_async") for x in op.walk())
        return _Role(op, kind, warps, kind == "producer" and not cp_async)

    def _schedule(self, work: list[tuple[_Role, object]]) -> None:
        """Run the participants together, the first in program order (the producer) first: a role
        runs until it waits for a phase not yet complete or completes a phase, and then the first
        role that can go on runs. So a producer fills and refills stages as early as the protocol
        lets it, and a refill under a reader shows. Until all are done; none able to go on is a
        deadlock."""
        live = [[role, self._block(body, [], role), None] for role, body in work]
        while live:
            for entry in live:
                role, gen, waiting = entry
                if waiting is not None:
                    _, bars, s, parity, _ = waiting
                    if not bars.passes(s, parity):
                        continue
                try:
                    entry[2] = next(gen)
                except StopIteration:
                    live.remove(entry)
                break
            else:
                self._deadlock([(e[0], e[2]) for e in live])

    def _block(self, blk, args: list, role: _Role):
        env = self.env
        readers = self.readers
        for a, v in zip(blk.args, args, strict=False):
            env[id(a)] = v
        for op in blk.ops:
            self.steps += 1
            if self.steps > MAX_STEPS:
                raise _Stop
            name = op.name
            if role.groups and name != "scf.yield":
                self._use_waits(op, role)
            if readers.get(id(op), True):
                self._tile_reads(op, role)
            h = _SIMPLE.get(name)
            if h is not None:
                h(self, op, role)
                if self.completed:  # a phase completed: let the roles it frees run first
                    self.completed = False
                    yield None
            elif name == "scf.yield":
                return [env.get(id(v)) for v in op.operands]
            elif name == "scf.for":
                yield from self._for(op, role)
            elif name == "scf.if":
                yield from self._if(op, role)
            elif name == "pipe.wait":
                yield from self._wait(op, role)
            else:
                for r in op.results:
                    env[id(r)] = None
        return []

    def _val(self, v: Value) -> object:
        return self.env.get(id(v))

    def _int(self, v: Value, op: Operation | None = None, what: str = "") -> int:
        """The integer value of `v`; for an index or parity of `op` (`what`), one divided by zero is an
        error; anything else the model cannot evaluate stops it."""
        x = self.env.get(id(v))
        if type(x) is int:
            return x
        if x is UNDEFINED and op is not None:
            raise self.error(op.loc, f"'{op.name}' {what} %{v.name} is computed with a division by zero",
                             hint="sdiv and srem by 0 are undefined on the GPU")
        if not isinstance(x, int) or isinstance(x, bool):
            raise _Stop
        return x

    def _for(self, op: Operation, role: _Role):
        lo, hi, step = (self._int(v) for v in op.operands[:3])
        carried = [self._val(v) for v in op.operands[3:]]
        if step <= 0:
            raise _Stop
        deferred = id(op) in self.deferred_loops
        if deferred:
            role.deferred.append({"prev": None, "next": None, "bars": None})
        for k in range(lo, hi, step):
            carried = yield from self._block(op.body, [k, *carried], role)
            if deferred:
                st = role.deferred[-1]
                st["prev"], st["next"] = st["next"], None
        if id(op) in self.async_loops:
            role.groups.clear()  # the loop's results are waited for (wgmma.wait_group 0) after it
        if deferred:
            st = role.deferred.pop()
            if st["prev"] is not None:
                self._release(st["op"], st["bars"], st["prev"], role)
        for r, v in zip(op.results, carried, strict=False):
            self.env[id(r)] = v

    def _if(self, op: Operation, role: _Role):
        cond = self._val(op.operands[0])
        if cond is None or cond is UNDEFINED:
            raise _Stop
        out: list = []
        if cond:
            out = yield from self._block(op.regions[0].block, [], role)
        elif len(op.regions) > 1:
            out = yield from self._block(op.regions[1].block, [], role)
        for r, v in zip(op.results, out, strict=False):
            self.env[id(r)] = v

    # -- the barrier ops ---------------------------------------------------------------------------

    def _bars(self, op: Operation, idx: int = 0) -> _Bars:
        bars = self._val(op.operands[idx])
        if not isinstance(bars, _Bars):
            raise _Stop
        return bars

    def _stage(self, op: Operation, v: Value, n: int, what: str) -> int:
        s = self._int(v, op, "stage index")
        if not 0 <= s < n:
            raise self.error(op.loc, f"'{op.name}' uses stage {s} of {what}, which has {n} (0..{n - 1})")
        it_op = self._iteration(v)
        if it_op is not None:
            it = self._val(it_op.result)
            if isinstance(it, int) and it >= 0 and s != it % n:
                raise self.error(op.loc, f"'{op.name}' in iteration {it} uses stage {s} of {what}, but a "
                                         f"{n}-stage ring holds iteration {it} in stage {it} mod {n} = {it % n}",
                                 hint=f"the stage index is the iteration number mod the stage count ({n})")
        return s

    def _iteration(self, v: Value) -> Operation | None:
        """The op marked `iteration = true` that `v` is computed from (through arith ops), if any (a
        walk with a stack, not recursion: a chain of any length)."""
        key = id(v)
        if key in self.iteration_of:
            return self.iteration_of[key]
        found = None
        todo, seen = [v], set()
        while todo and found is None:
            x = todo.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            d = x.owner
            if isinstance(d, Operation) and d.name.startswith("arith."):
                if d.attrs.get("iteration"):
                    found = d
                else:
                    todo.extend(reversed(d.operands))
        self.iteration_of[key] = found
        return found

    def _wait(self, op: Operation, role: _Role):
        bars = self._bars(op)
        s = self._stage(op, op.operands[1], bars.n, bars.name)
        parity = self._int(op.operands[2], op, "parity")
        it_op = self._iteration(op.operands[2])
        it = self._val(it_op.result) if it_op is not None else None
        rnd = f" in iteration {it}" if isinstance(it, int) else ""
        if parity not in (0, 1):
            want = ""
            if isinstance(it, int) and it >= 0:
                rnd_p = it // bars.n % 2
                known = self.parity_x.get(id(op))
                want = (f" (iteration {it} is in round {it // bars.n} of the {bars.n}-stage ring: parity "
                        f"{rnd_p ^ known[0] if known else f'{rnd_p}, or {rnd_p ^ 1} for a barrier that starts free'})")
            raise self.error(op.loc, f"'pipe.wait' on {bars.name}[{s}]{rnd} waits at parity {parity}, but a phase "
                                     f"parity is 0 or 1{want}",
                             hint="the parity is the round (it / S) mod 2: the modulus is 2")
        if isinstance(it, int) and it >= 0:
            x = parity ^ (it // bars.n % 2)
            first = self.parity_x.setdefault(id(op), (x, it))
            if first[0] != x:
                want = (it // bars.n % 2) ^ first[0]
                raise self.error(op.loc, f"'pipe.wait' on {bars.name}[{s}] in iteration {it} waits at parity "
                                         f"{parity}, but in iteration {first[1]} it waited at parity "
                                         f"{first[1] // bars.n % 2 ^ first[0]}: the parity flips once per round "
                                         f"of the {bars.n}-stage ring, so iteration {it} (round {it // bars.n}) "
                                         f"waits at parity {want}",
                                 hint=f"parity = (it / {bars.n}) mod 2{' xor 1' if first[0] else ''}")
        key = (id(bars), s)
        n, p0 = role.waits.get(key, (0, parity))
        want_p = p0 ^ (n % 2)
        if parity != want_p:
            raise self.error(op.loc, f"'pipe.wait' on {bars.name}[{s}]{rnd} waits at parity {parity}, but "
                                     f"{role.label} waited on that stage at parity {want_p ^ 1} last time: each "
                                     "wait is for the next phase (each stage is filled and released once per "
                                     f"round), parity {want_p}")
        target = n + (1 - p0)  # the phases this wait needs completed
        if bars.done[s] <= target:
            while not bars.passes(s, parity):
                yield (op, bars, s, parity, target)
        if bars.done[s] != target:
            raise self.error(op.loc, f"'pipe.wait' on {bars.name}[{s}]{rnd} (parity {parity}) finds "
                                     f"{bars.done[s]} phases of that stage completed where {role.label} expects "
                                     f"{target}: a phase it never waited for completed (the stage was filled or "
                                     "released twice in one round)")
        role.waits[key] = (n + 1, p0)
        for buf in self.fills.get(id(op.operands[0]), ()):
            if bars.done[s] >= 1:
                role.seen[(id(buf), s)] = bars.done[s]

    def _arrive_on(self, op: Operation, bars: _Bars, s: int, n: int, role: _Role) -> None:
        if n > bars.count - bars.arrived[s]:
            who = "; ".join(f"'{o.name}' at line {_line(o)}: {k}" for o, k in [*bars.arrivers[s], (op, n)])
            raise self.error(bars.op.loc, f"'pipe.barriers' {bars.name} has count = {bars.count}, but a phase of "
                                          f"{bars.name}[{s}] receives more arrivals ({who}; {role.label} arrives "
                                          f"{n} time{'s' * (n != 1)} per '{op.name}')",
                             hint="the count is the arrivals of one phase: 1 for a TMA producer's arrive.expect_tx, "
                                  "one per consumer warp, one per producer thread and copy for cp.async")
        bars.arrived[s] += n
        bars.arrivers[s].append((op, n))
        if role.op is not None and bars.n > 1:
            last = role.last_arrival.get(id(bars))
            if last is not None and s != last and s != (last + 1) % bars.n:
                raise self.error(op.loc, f"'{op.name}' arrives on {bars.name}[{s}] after {role.label} arrived on "
                                         f"{bars.name}[{last}]: a role goes round the {bars.n}-stage ring in order, "
                                         f"once per stage per round (next: stage {(last + 1) % bars.n})")
            role.last_arrival[id(bars)] = s
        self._maybe_complete(bars, s)

    def _maybe_complete(self, bars: _Bars, s: int) -> None:
        if bars.arrived[s] == bars.count and bars.tx[s] == 0:
            self.completed = True
            bars.done[s] += 1
            bars.arrived[s] = 0
            bars.expects[s] = []
            bars.arrivers[s] = []
            for buf in self.fills.get(id(bars.op.result), ()):
                self.pending_fill.discard((id(buf), s))

    def _release(self, op: Operation, bars: _Bars, s: int, role: _Role) -> None:
        """`role` arrives on bars[s]; if the producer refills buffers after waiting on that barrier,
        the stage must no longer be read by a wgmma in flight."""
        for buf in self.guards.get(id(bars.op.result), ()):
            for mma, reads in role.groups:
                if (id(buf), s) in reads:
                    how = "async_groups = " + str(mma.attrs["async_groups"]) if mma.attrs.get("async_groups") \
                        else "defer_wait" if mma.attrs.get("defer_wait") else "in flight"
                    raise self.error(op.loc, f"'pipe.arrive' releases stage {s} of %{buf.name} ({bars.name}[{s}]) "
                                             f"while the wgmma group of the 'tk.mma' at line {_line(mma)} ({how}) "
                                             "may still read it",
                                     hint="release a stage read by an mma whose group stays in flight after its "
                                          "iteration with `deferred = true`, or after a tk.mma_wait of its result")
            held = role.seen.get((id(buf), s), "never")
            if role.kind != "producer" and (held is None or held == "never") and id(buf) in self.fill_bar:
                what = f"stage {s} of %{buf.name}" if buf.type.get("stages") else f"%{buf.name}"
                why = "before waiting for its fill" if held == "never" else \
                    "again before waiting for its next fill (it was released"
                rel = role.released_by.get((id(buf), s))
                if held is None and rel is not None:
                    why += f" at line {rel.loc.line})" if rel.loc is not None else ")"
                elif held is None:
                    why += ")"
                raise self.error(op.loc, f"'pipe.arrive' in {role.label} releases {what} ({bars.name}[{s}]) {why}: "
                                         "the producer may refill it before or while the role reads it",
                                 hint="a role releases a stage after its 'pipe.wait' for that stage's fill and "
                                      "after its last read of it")
            role.seen[(id(buf), s)] = None
            role.released_by[(id(buf), s)] = op
        self._arrive_on(op, bars, s, role.arrivals(), role)

    def _tile_reads(self, op: Operation, role: _Role) -> None:
        """A role's read of a stage view or of a tile a copy fills: after waiting for its latest fill."""
        flag = self.readers.get(id(op))
        if flag is None:
            flag = op.name not in NOT_READS and any(
                (isinstance(v.type, TileType) and v.type.space == "st")
                or (isinstance(v.type, VectorType) and v.type.space == "sv" and v.type.dtype != "i64")
                for v in op.operands)
            self.readers[id(op)] = flag
        if not flag:
            return
        for v in op.operands:
            val = self.env.get(id(v))
            if isinstance(val, tuple) and len(val) == 3 and val[0] == "view":
                if id(val[1]) in self.cp_bufs:
                    self._check_landed(op, val[1], val[2], role)
                self._check_read(op, val[1], val[2], role)
            elif id(v) in self.filled_tiles:
                self._check_read(op, v, 0, role)

    def _check_landed(self, op: Operation, buf: Value, s: int, role: _Role) -> None:
        """A read of a stage a cp.async copy fills: after a `pipe.async_wait` retired the copy's group."""
        key = (id(buf), s)
        if id(buf) in self.cp_bufs and key not in self.cp_filled:
            raise self.error(op.loc, f"'{op.name}' reads stage {s} of %{buf.name}, which no cp.async copy has filled",
                             hint="every stage a loop reads is filled by a 'pipe.async_copy' first (the prologue "
                                  "fills the first, each iteration the one it reads later)")
        for group in [role.cp_open, *role.cp_groups]:
            for b, st, cp in group:
                if (b, st) == key:
                    when = "not yet committed" if group is role.cp_open else \
                        f"its group is one of the {len(role.cp_groups)} committed groups still in flight"
                    raise self.error(op.loc, f"'{op.name}' reads stage {s} of %{buf.name} while the cp.async copy "
                                             f"into it at line {_line(cp)} is in flight ({when})",
                                     hint="a stage is read after a 'pipe.async_wait' whose `pending` leaves only "
                                          "the groups of later stages in flight")

    def _check_read(self, op: Operation, buf: Value, s: int, role: _Role) -> None:
        bar = self.fill_bar.get(id(buf))
        if bar is None or role.op is None or role.kind == "producer":
            return
        bars = self.env.get(id(bar))
        if not isinstance(bars, _Bars):
            return
        seen = role.seen.get((id(buf), s), "never")
        what = f"stage {s} of %{buf.name}" if buf.type.get("stages") else f"%{buf.name}"
        if seen == "never" or seen is None:
            rel = role.released_by.get((id(buf), s))
            why = "without waiting on" if seen == "never" else \
                f"after releasing it ('{rel.name} %{rel.operands[0].name}'" \
                f"{f' at line {rel.loc.line}' if rel.loc is not None else ''}; the producer may " \
                "refill it from then on) and before waiting again on"
            err = self.error(op.loc, f"'{op.name}' in {role.label} reads {what} {why} {bars.name}[{s}], the "
                                     "barrier its copies complete on",
                             hint="every read of a stage needs the role's 'pipe.wait' for the fill of that round")
            setattr(err, READ_HAZARD, True)
            raise err
        if (id(buf), s) in self.pending_fill:
            raise self.error(op.loc, f"'{op.name}' in {role.label} reads {what} while a copy refills it (fill "
                                     f"{bars.done[s] + 1} on {bars.name}[{s}] is in flight)",
                             hint="the producer refills a stage only after waiting for its release")
        if seen != bars.done[s]:
            raise self.error(op.loc, f"'{op.name}' in {role.label} reads {what} after a copy refilled it (the role "
                                     f"waited for fill {seen} on {bars.name}[{s}]; fill {bars.done[s]} has landed "
                                     "since)",
                             hint="the producer refills a stage only after waiting for its release")

    def _use_waits(self, op: Operation, role: _Role) -> None:
        """A use of a `defer_wait` mma's result waits for its group (and every older one)."""
        for v in op.operands:
            val = self.env.get(id(v))
            if isinstance(val, tuple) and len(val) == 2 and val[0] == "mma":
                for i, (mma, _) in enumerate(role.groups):
                    if mma is val[1]:
                        del role.groups[:i + 1]
                        break

    def _deadlock(self, blocked: list[tuple[_Role, tuple]]) -> None:
        blocked = [(r, w) for r, w in blocked if w is not None]
        if not blocked:
            raise _Stop

        def others(role: _Role) -> str:
            return "; ".join(f"{r.label} at line {_line(w[0])} on {w[1].name}[{w[2]}] (parity {w[3]})"
                             for r, w in blocked if r is not role)

        # a phase short of arrivals that came (the count is wrong for its participants), then one whose
        # announced bytes never land (a copy is missing), then the earliest phase waited for
        for role, (op, bars, s, _parity, _target) in blocked:
            got = bars.arrived[s]
            if 0 < got < bars.count and bars.tx[s] == 0:
                also = others(role)
                raise self.error(bars.op.loc, f"'pipe.barriers' {bars.name} has count = {bars.count}, but a phase "
                                              f"of {bars.name}[{s}] receives only {got} arrivals: {role.label} waits "
                                              f"for it forever at line {_line(op)} (deadlock)",
                                 hint=f"also blocked: {also}" if also else None)
        role, (op, bars, s, parity, target) = min(blocked, key=lambda e: (e[1][1].tx[e[1][2]] <= 0, e[1][4]))
        missing = f"{bars.arrived[s]} of its {bars.count} arrivals"
        if bars.tx[s] > 0:
            missing += f" and {bars.tx[s]} announced bytes still to land"
        also = others(role)
        raise self.error(op.loc, f"deadlock: 'pipe.wait' on {bars.name}[{s}] at parity {parity} in {role.label} "
                                 f"never passes: phase {target} of that stage has {missing}, and no role can go on",
                         hint=(f"also blocked: {also}" if also else "no other role runs") +
                              "; a release (pipe.arrive) or fill (pipe.expect and its copies) is missing or skipped")


class _Slice:
    """Some ops of the kernel body, run as one block (what lies between the roles)."""

    def __init__(self, ops: list[Operation]) -> None:
        self.ops = ops
        self.args: list[Value] = []


def _times(n: int) -> str:
    return {0: "0 times", 1: "once", 2: "twice"}.get(n, f"{n} times")


def _add(d: dict[int, list[Value]], key: Value, v: Value) -> None:
    lst = d.setdefault(id(key), [])
    if all(x is not v for x in lst):
        lst.append(v)


# --- ops that never block ----------------------------------------------------------------------------


def _const(m: _Model, op: Operation, role: _Role) -> None:
    m.env[id(op.results[0])] = op.attrs.get("value")


def _binary(name: str):
    def run(m: _Model, op: Operation, role: _Role) -> None:
        a, b = m.env.get(id(op.operands[0])), m.env.get(id(op.operands[1]))
        out: object = None
        if a is UNDEFINED or b is UNDEFINED:
            out = UNDEFINED
        elif isinstance(a, (int, float)) and isinstance(b, (int, float)):
            try:
                out = scalar.binary(name, a, b)
            except ZeroDivisionError:
                out = UNDEFINED
            except (OverflowError, ValueError):
                out = None
        m.env[id(op.results[0])] = out
    return run


def _cmp(m: _Model, op: Operation, role: _Role) -> None:
    a, b = m.env.get(id(op.operands[0])), m.env.get(id(op.operands[1]))
    if a is UNDEFINED or b is UNDEFINED:
        m.env[id(op.results[0])] = UNDEFINED
        return
    m.env[id(op.results[0])] = None if a is None or b is None else bool(scalar.COMPARE[str(op.attrs["pred"])](a, b))


def _cast(m: _Model, op: Operation, role: _Role) -> None:
    a = m.env.get(id(op.operands[0]))
    try:
        m.env[id(op.results[0])] = a if a is None or a is UNDEFINED else scalar.convert(a, op.result.type.dtype)
    except (OverflowError, ValueError):  # inf or NaN to an integer
        m.env[id(op.results[0])] = None


def _size(m: _Model, op: Operation, role: _Role) -> None:
    m.env[id(op.results[0])] = m.sizes.get(op.attrs["name"])


def _block_id(m: _Model, op: Operation, role: _Role) -> None:
    d = int(op.attrs.get("dim", 0))
    m.env[id(op.results[0])] = m.block[d] if d < 3 else None


def _grid_dim(m: _Model, op: Operation, role: _Role) -> None:
    d = int(op.attrs.get("dim", 0))
    m.env[id(op.results[0])] = m.grid[d] if d < len(m.grid) else 1


def _barriers(m: _Model, op: Operation, role: _Role) -> None:
    bars = m.env[id(op.results[0])] = _Bars(op, op.result.type.n, int(op.attrs["count"]))
    m.rings.append(bars)


def _pipe_stage(m: _Model, op: Operation, role: _Role) -> None:
    buf = op.operands[0]
    n = buf.type.get("stages") if isinstance(buf.type, (TileType, VectorType)) else None
    if not isinstance(n, int):
        raise _Stop
    s = m._stage(op, op.operands[1], n, f"%{buf.name}")
    m.env[id(op.results[0])] = ("view", buf, s)


def _expect(m: _Model, op: Operation, role: _Role) -> None:
    bars = m._bars(op)
    s = m._stage(op, op.operands[1], bars.n, bars.name)
    bars.tx[s] += int(op.attrs["bytes"])
    bars.expects[s].append(op)
    m._arrive_on(op, bars, s, role.arrivals(), role)


def _copy(m: _Model, op: Operation, role: _Role) -> None:
    bars = m._bars(op, 1)
    s = m._stage(op, op.operands[2], bars.n, bars.name)
    dst = op.operands[0]
    val = m.env.get(id(dst))
    buf = val[1] if isinstance(val, tuple) and len(val) == 3 else dst
    if op.attrs.get("cp_async"):  # every thread of the role arrives once its chunks land
        m._arrive_on(op, bars, s, WARP * max(role.warps, 1), role)
        return
    nbytes = _copy_bytes(op)
    if nbytes > bars.tx[s]:
        if bars.expects[s]:
            exp = bars.expects[s][-1]
            announced = sum(int(e.attrs["bytes"]) for e in bars.expects[s])
            raise m.error(exp.loc, f"'pipe.expect' on {bars.name}[{s}] announces {announced} bytes, but the copies "
                                   f"completing on that phase deliver more (the 'pipe.copy' at line {_line(op)} "
                                   f"brings {nbytes} with {bars.tx[s]} still announced)",
                          hint="mbarrier.expect_tx must count every byte the phase's TMA copies deliver")
        raise m.error(op.loc, f"'pipe.copy' completes {nbytes} bytes on {bars.name}[{s}], but no 'pipe.expect' "
                              "announced them for that phase")
    m.pending_fill.add((id(buf), s))
    bars.tx[s] -= nbytes
    m._maybe_complete(bars, s)


def _arrive(m: _Model, op: Operation, role: _Role) -> None:
    bars = m._bars(op)
    s = m._stage(op, op.operands[1], bars.n, bars.name)
    if op.attrs.get("deferred"):
        if not role.deferred:  # outside a loop: a static error, raised after the model; no release here
            return
        st = role.deferred[-1]
        if st["prev"] is not None:
            m._release(op, st["bars"], st["prev"], role)
        st["next"], st["bars"], st["op"] = s, bars, op
        return
    m._release(op, bars, s, role)


def _async_copy(m: _Model, op: Operation, role: _Role) -> None:
    cond = m.env.get(id(op.operands[0]))
    if cond is None or cond is UNDEFINED:
        raise _Stop
    if not cond:
        return
    buf = op.operands[1]
    s = m._stage(op, op.operands[2], _stages_of(buf.owner) if isinstance(buf.owner, Operation) else 1,
                 f"%{buf.name}")
    role.cp_open.append((id(buf), s, op))
    m.cp_filled.add((id(buf), s))


def _async_commit(m: _Model, op: Operation, role: _Role) -> None:
    s = m._int(op.operands[0], op, "stage index")
    wrong = [cp for b, st, cp in role.cp_open if st != s]
    if wrong:
        raise m.error(op.loc, f"'pipe.async_commit' closes the group that fills stage {s}, but the cp.async copy at "
                              f"line {_line(wrong[0])} fills another stage",
                      hint="a group holds the copies of one stage: its wait retires exactly that stage")
    role.cp_groups.append(role.cp_open)
    role.cp_open = []


def _async_wait(m: _Model, op: Operation, role: _Role) -> None:
    pending = int(op.attrs["pending"])
    if len(role.cp_groups) > pending:
        del role.cp_groups[:len(role.cp_groups) - pending]


def _mma(m: _Model, op: Operation, role: _Role) -> None:
    reads = set()
    for v in op.operands:
        val = m.env.get(id(v))
        if isinstance(val, tuple) and len(val) == 3 and val[0] == "view":
            reads.add((id(val[1]), val[2]))
        elif id(v) in m.filled_tiles:
            reads.add((id(v), 0))
    role.groups.append((op, frozenset(reads)))
    if op.attrs.get("defer_wait"):
        m.env[id(op.results[0])] = ("mma", op)
        return
    depth = int(op.attrs.get("async_groups") or 0)
    del role.groups[:max(len(role.groups) - depth, 0)]
    m.env[id(op.results[0])] = None


def _alloc(m: _Model, op: Operation, role: _Role) -> None:
    m.env[id(op.results[0])] = None


def _nothing(m: _Model, op: Operation, role: _Role) -> None:
    pass


_SIMPLE = {
    "arith.const": _const,
    "arith.cmp": _cmp,
    "arith.cast": _cast,
    "tk.size": _size,
    "tk.block_id": _block_id,
    "tk.grid_dim": _grid_dim,
    "tk.alloc": _alloc,
    "tk.mma": _mma,
    "pipe.barriers": _barriers,
    "pipe.stage": _pipe_stage,
    "pipe.expect": _expect,
    "pipe.copy": _copy,
    "pipe.arrive": _arrive,
    "pipe.async_copy": _async_copy,
    "pipe.async_commit": _async_commit,
    "pipe.async_wait": _async_wait,
    "pipe.turn_init": _nothing,
    "pipe.turn_wait": _nothing,
    "pipe.turn_pass": _nothing,
    **{f"arith.{n}": _binary(n) for n in scalar.BINARY_NAMES},
}
