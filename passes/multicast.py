"""multicast: two blocks of a cluster share the tiles they both load, each loading half and multicasting it.

A pipelined GEMM-like kernel (after `pipeline`/`early-release`, before `persistent`) on a 2-D grid of
output tiles loads, in each K iteration, tiles that depend on the block's tile row (A: `A[block.x, k]`)
and tiles that do not (B: `B[k, block.y]`). Two blocks with the same tile column and neighbouring tile
rows read the same B tiles. Here they run as one thread-block cluster of CTAS = 2 CTAs along the rows
(PTX `.reqnctapercluster 2, 1, 1`), and each loads half of every shared tile (its rows `rank * R / 2 ..`)
with `cp.async.bulk.tensor ... .multicast::cluster`, which writes it into both CTAs' shared memory at the
same offset and completes both CTAs' barriers (HOPPER.md §4.4; CUTLASS's SM90 TMA multicast, cluster
shape 2 x 1). Each CTA still receives whole tiles, so the bytes its full barrier expects are unchanged;
each B tile leaves L2 once per cluster instead of once per block. Rewrites:

* each such `pipe.copy` gets `multicast = {ctas = 2, desc = @<desc>_mc}`: a descriptor whose box has half
  the rows (the copy's `desc` stays the whole tile's: the interpreter and the checks read the tile whole);
* the empty barriers of the rings those copies fill get `cluster = 2`: a consumer's release of a stage
  arrives on that barrier in both CTAs (the partner's half lands in this CTA's stage, so the partner's
  producer must wait for this CTA's consumers too), and the barrier counts the arrivals of both;
* the producer, after its last iteration, waits once more on each stage's empty barrier (a loop after
  the K loop, `multicast_drain`), so no CTA exits while its partner may still arrive on its barriers;
  `persistent` keeps that loop after its tile loop, from the tile loop's final iteration count;
* the grid's rows become even, `2 * cdiv(TM, 2)`: with an odd TM the last cluster's second CTA loads
  A rows past the end (TMA fills zeros, counting the whole box) and its TMA store writes nothing;
* the kernel attr `tma_multicast = {ctas = 2}`: the backend launches clusters of 2 along x and meets
  the cluster after the barriers' init; `persistent` keeps each cluster's tiles in one tile column
  (an even group, tile pairs (2i, 2i + 1), an even grid).

It declines (a `multicast_skipped` remark) a kernel on sm_80 (no clusters), one that streams K
(stream-k's blocks wait on each other), one without a copy independent of the tile row, one whose
shared copy cannot split its rows in whole swizzle atoms, and one whose size bucket has a single tile
row (M = 1 decode shapes: the second CTA would only load zeros).

**When it pays** (`auto`, the default pipeline's `multicast{auto=true}`): multicast saves L2 -> SM traffic,
which limits a GEMM only when nearly every SM draws on it at once. So, for a kernel compiled for a size bucket
(`problem_sizes`), it rewrites only a grid of one wave (at most the plan's blocks per SM on every SM) that fills
at least MIN_FILL of those slots, with a K loop of at most MAX_ROUNDS iterations a stage (the first fill of every
block's stages, issued at once, is then at least half the traffic: what multicast measured faster on), with at
least MIN_HALF_BYTES of every shared tile multicast by each CTA, and only where the roofline of that wave (the
cost model's rates, tkir/target.py: the tiles every block loads an iteration, together, at FEED_BYTES_PER_S,
against one block's tensor work at its SM's share of PEAK_TENSOR_FLOPS) predicts at least MIN_GAIN from sending
the shared tiles once per cluster.
The decision and its numbers are the kernel attr `multicast_why` (or `multicast_skipped`), which `tkc report`
prints. A bucket's kernel serves smaller sizes too (768^3 calls run 1024^3's), so the pass also writes the fill
rule, `multicast_fill = {blocks = "<size expr>", at_least = B}`: a call through the per-size choice (tkir/api.py)
whose sizes launch fewer than B blocks runs the bucket's kernel compiled with `multicast{ctas=1}`. Without
problem sizes it decides nothing (no remark). Ablation: `-multicast` or `multicast{ctas=1}`;
`multicast{auto=false}` rewrites every kernel it applies to (the A/B of docs/experiments.md).
"""

from __future__ import annotations

from tkir.facts import MULTICAST_ATTR, MULTICAST_FILL_ATTR
from tkir.ir import Block, Module, Operation, Region, Value
from tkir.passes.analysis import MULTICAST_DRAIN_ATTR, const_is, loop_trip_count, mma_flop, value_at_sizes
from tkir.passes.builder import OpBuilder
from tkir.passmanager import Options, ParamError, Pass, param
from tkir.symexpr import SymExprError, evaluate
from tkir.target import FEED_BYTES_PER_S, NUM_SMS, PEAK_TENSOR_FLOPS
from tkir.types import I32, Symbol, TileType
from tkir.verify_tma import SWIZZLE_ATOM_ROWS

ATTR = MULTICAST_ATTR             # kernel attr: {ctas = C}, read by persistent and the backend
SKIPPED_ATTR = "multicast_skipped"
DRAIN_ATTR = MULTICAST_DRAIN_ATTR  # the producer's loop after the K loop (persistent keeps it after the tile loop)
CTAS = 2                         # CUTLASS's SM90 GEMMs multicast over clusters of 2 (cluster shape 2 x 1 x 1)
WHY_ATTR = "multicast_why"       # auto: the prediction that made the pass rewrite the kernel
# auto's rule, from one H100 A/B of gemm.tk at its auto consts over 19 shapes (docs/experiments.md, "TMA
# multicast"): it won only where one wave of 64 x 128 tiles filled the SMs (1000^3: 128 blocks, 1.14x; 900 x
# 1000 x 1000, 1.09x) and lost 2-9% elsewhere: a partly filled wave (768^3, 72 blocks, 0.93x; 512^3), several
# tiles a block (persistent rounds: 1024 x 2048 x 1024, 0.97x) and wide tiles whose tensor work hides the feed
# (2048 x 2048 x 512 with 128 x 256 tiles, predicted 1.12x by the roofline below, measured 0.91x).
MIN_FILL = 0.75                  # the wave fills at least this share of the SMs' block slots
MIN_GAIN = 1.4                   # the roofline's predicted gain that pays for the cluster (coupled CTAs,
#                                 releases to both, the drain): 1.50 where it won (64 x 128 tiles), 1.33 where
#                                 128 x 128 tiles lost (1024 x 2048 x 1024 0.97x, 512 x 4096 x 4096 0.95x)
MAX_ROUNDS = 2                   # K iterations per stage at most: the burst of every block filling its stages at
#                                 once is then at least half the kernel's traffic (1000^3: 16 iterations of 8
#                                 stages, won; gemm_fp8 M = 256, N = K = 4096: 32, 0.89x; 512 x 4096 x 4096: 64,
#                                 0.95x); in the steady state the loads spread out and the feed did not limit
MIN_HALF_BYTES = 8192            # the least a CTA multicasts of each shared tile an iteration: SwiGLU's two 64 x 64
#                                 B tiles (halves of 4 KB) lost 4.7% at T = 1000, DM = 512, F = 504, where the
#                                 64 x 128 tiles of GEMM + bias + GELU (halves of 8 KB) won 4.4% (H100, A/B)
FILL_ATTR = MULTICAST_FILL_ATTR  # auto: the blocks below which a call runs the bucket's kernel without multicast


class Multicast(Pass):
    name = "multicast"
    ctas: int = param(CTAS, "CTAs per cluster along the tile rows sharing the tiles loaded independently of the "
                            "tile row (2; 1: off, the ablation)")
    auto: bool = param(False, "rewrite only kernels compiled for a size bucket whose one-wave grid is predicted "
                              f"at least {MIN_GAIN}x faster (the default pipeline runs multicast{{auto=true}}); "
                              "false: every kernel the pass applies to")

    def __post_init__(self) -> None:
        if self.ctas not in (1, 2):
            raise ParamError("ctas", f"multicast: ctas={self.ctas}: clusters of 2 CTAs (or 1: off)")

    def run(self, module: Module, options: Options) -> None:
        if self.ctas == 1:
            return
        for kernel in module.kernels():
            if self.auto and not isinstance(kernel.attrs.get("problem_sizes"), dict):
                continue  # no size bucket to decide for: no rewrite, no remark
            why = _decline(module, kernel, options.target, self.ctas)
            if why is None and self.auto:
                why, gain = _pays(kernel, self.ctas)
                if why is None:
                    kernel.attrs[WHY_ATTR] = gain
                    kernel.attrs[FILL_ATTR] = _fill_rule(kernel, self.ctas)
            if why is not None:
                if why:
                    kernel.attrs[SKIPPED_ATTR] = why
                continue
            _rewrite(module, kernel, self.ctas)


def _roles(kernel: Operation) -> dict[str, Operation]:
    return {str(op.attrs.get("kind")): op for op in kernel.body.ops if op.name == "tk.role"}


def _kloop(role: Operation) -> Operation | None:
    loops = [op for op in role.body.ops if op.name == "scf.for"]
    return loops[0] if len(loops) == 1 else None


def _depends_on(v: Value, roots: set[Value], memo: dict[int, bool]) -> bool:
    """Whether `v` is computed from one of `roots` (through the ops defining it)."""
    if v in roots:
        return True
    if id(v) in memo:
        return memo[id(v)]
    memo[id(v)] = False
    d = v.owner
    out = isinstance(d, Operation) and any(_depends_on(x, roots, memo) for x in d.operands)
    memo[id(v)] = out
    return out


def shared_copies(kernel: Operation) -> list[Operation]:
    """The producer's K-loop TMA copies whose coordinates do not depend on the block's tile row (block_id
    dim 0): the tiles neighbouring blocks along the rows both load."""
    producer = _roles(kernel).get("producer")
    loop = _kloop(producer) if producer is not None else None
    if loop is None:
        return []
    rows = {op.result for op in kernel.walk() if op.name == "tk.block_id" and op.attrs.get("dim") == 0}
    memo: dict[int, bool] = {}
    return [op for op in loop.body.ops if op.name == "pipe.copy" and not op.attrs.get("cp_async")
            and not any(_depends_on(c, rows, memo) for c in op.operands[4:])]


def _decline(module: Module, kernel: Operation, target: str, ctas: int) -> str | None:
    """Why the kernel is left alone ("" for kernels this pass is not about), or None to rewrite it."""
    roles = _roles(kernel)
    grid = kernel.attrs.get("grid")
    if not isinstance(grid, list) or len(grid) != 2 or ATTR in kernel.attrs:
        return ""
    if target != "sm_90a":
        return f"{target} has no thread block clusters" if any(op.name == "tk.mma" for op in kernel.walk()) else ""
    if "producer" not in roles or "consumer" not in roles:
        return ""
    if kernel.attrs.get("stream_k_requested"):
        return "Stream-K: its blocks wait for each other's partial sums"
    if kernel.attrs.get("cluster"):
        return "the kernel already runs as a cluster (cluster-rows)"
    kloop = _kloop(roles["producer"])
    if kloop is None:
        return "the producer has more than one loop"
    if "stages" not in kloop.attrs:  # a tile loop around it: persistent ran first
        return "the producer's loop is not the pipelined K loop (run multicast before persistent)"
    copies = shared_copies(kernel)
    if not copies:
        return "no tile is loaded independently of the block's tile row"
    for c in copies:
        t = c.operands[0].type
        desc = module.lookup(c.attrs["desc"].name) if isinstance(c.attrs.get("desc"), Symbol) else None
        if not isinstance(t, TileType) or desc is None or t.rows % (ctas * SWIZZLE_ATOM_ROWS):
            return (f"the copy into '{c.operands[0].name}' cannot split its rows into {ctas} parts of whole "
                    f"{SWIZZLE_ATOM_ROWS}-row swizzle atoms")
    sizes = kernel.attrs.get("problem_sizes")
    if isinstance(sizes, dict):
        try:
            rows = evaluate(str(grid[0]), {k: int(v) for k, v in sizes.items()})
        except (SymExprError, ValueError, TypeError):
            rows = None
        if rows is not None and rows < ctas:
            return f"the size bucket has {rows} tile row(s): the cluster's other CTAs would load only zeros"
    return None


def _pays(kernel: Operation, ctas: int) -> tuple[str | None, str]:
    """(why not, "") where `auto` leaves the kernel alone ("" when it has no size bucket to decide for), else
    (None, the prediction that decided it)."""
    sizes = kernel.attrs.get("problem_sizes")
    occ = kernel.attrs.get("occupancy")
    if not isinstance(sizes, dict) or not isinstance(occ, dict):
        return "", ""
    try:
        env = {k: int(v) for k, v in sizes.items()}
        rows, cols = (evaluate(str(g), env) for g in kernel.attrs["grid"])
    except (SymExprError, ValueError, TypeError):
        return "", ""
    blocks = ctas * -(-rows // ctas) * cols
    slots = NUM_SMS * max(1, int(occ.get("blocks_per_sm", 1)))
    if blocks > slots:
        return f"auto: {blocks} blocks at {_sizes(env)} are more than one wave ({slots})", ""
    if blocks < MIN_FILL * slots:
        return (f"auto: {blocks} blocks at {_sizes(env)} fill under {MIN_FILL:.0%} of the {slots} block slots "
                f"(the L2 feed does not limit a partly filled wave)"), ""
    roles = _roles(kernel)
    ploop, cloop = _kloop(roles["producer"]), _kloop(roles["consumer"])
    stages = int(ploop.attrs.get("stages") or 1) if ploop is not None else 1
    trips = value_at_sizes(ploop.operands[1], env) if ploop is not None and const_is(ploop.operands[0], 0) else None
    if trips is None or trips > MAX_ROUNDS * stages:
        return (f"auto: {trips if trips is not None else 'an unknown number of'} K iterations at {_sizes(env)} "
                f"are more than {MAX_ROUNDS} x the {stages} stages (the steady state, not the first fill, "
                f"sets the time)"), ""
    flop = sum(mma_flop(op) for op in (cloop.body.ops if cloop is not None else []) if op.name == "tk.mma")
    loads = [op for op in ploop.body.ops if op.name == "pipe.copy"] if ploop is not None else []
    total = sum(int(op.attrs.get("bytes", 0)) for op in loads)
    copies = shared_copies(kernel)
    shared = sum(int(op.attrs.get("bytes", 0)) for op in copies)
    small = [c for c in copies if int(c.attrs.get("bytes", 0)) < ctas * MIN_HALF_BYTES]
    if small:
        c = small[0]
        half = int(c.attrs.get("bytes", 0)) // ctas
        why = f"auto: the copy into '{c.operands[0].name}' would multicast {half} B a CTA, under {MIN_HALF_BYTES} B"
        return why, ""
    if not flop or not total:
        return "", ""
    tensor = flop * slots / PEAK_TENSOR_FLOPS            # one block's tensor work an iteration, at its SM's share
    feed = blocks * total / FEED_BYTES_PER_S             # the wave's tiles an iteration, all SMs together
    feed_mc = blocks * (total - shared * (ctas - 1) / ctas) / FEED_BYTES_PER_S
    gain = max(feed, tensor) / max(feed_mc, tensor)
    detail = (f"{blocks} blocks at {_sizes(env)}: an iteration's tiles {feed * 1e6:.2f} -> {feed_mc * 1e6:.2f} us "
              f"against {tensor * 1e6:.2f} us of tensor work, predicted {gain:.2f}x")
    if gain < MIN_GAIN:
        return f"auto: {detail}, under {MIN_GAIN}x", ""
    return None, detail


def _fill_rule(kernel: Operation, ctas: int) -> dict:
    """The blocks a call launches, as a size expression, and the fewest for which the bucket's decision holds:
    a kernel compiled for a size bucket serves every size up to it (768^3 runs 1024^3's kernel, 72 blocks of
    its 128), so the call-side choice (tkir/api.py) takes the kernel without multicast below that."""
    occ = kernel.attrs["occupancy"]
    rows, cols = (str(g) for g in kernel.attrs["grid"])
    slots = NUM_SMS * max(1, int(occ.get("blocks_per_sm", 1)))
    return {"blocks": f"{ctas} * cdiv({rows}, {ctas}) * ({cols})", "at_least": -(-int(MIN_FILL * 100) * slots // 100)}


def _sizes(env: dict[str, int]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in env.items())


def _rewrite(module: Module, kernel: Operation, ctas: int) -> None:
    roles = _roles(kernel)
    copies = shared_copies(kernel)
    for c in copies:
        c.attrs["multicast"] = {"ctas": ctas, "desc": _half_desc(module, kernel, c, ctas)}
    ploop = _kloop(roles["producer"])
    assert ploop is not None
    fulls = {c.operands[1] for c in copies}
    empties: list[Value] = []
    for op in ploop.body.ops:  # the producer waits on a ring's empty barrier before its expect on the full one
        if op.name == "pipe.wait" and op.operands[0] not in fulls and op.operands[0] not in empties:
            empties.append(op.operands[0])
    for e in empties:
        bars = e.owner
        assert isinstance(bars, Operation)
        bars.attrs["cluster"] = ctas
    _drain(roles["producer"], ploop, empties)
    grid = list(kernel.attrs["grid"])
    grid[0] = f"{ctas} * cdiv({grid[0]}, {ctas})"
    kernel.attrs["grid"] = grid
    kernel.attrs[ATTR] = {"ctas": ctas}


def _half_desc(module: Module, kernel: Operation, copy: Operation, ctas: int) -> Symbol:
    """The copy's descriptor with 1/ctas of the box's rows (a new module-level tma.desc, shared by copies
    of the same descriptor)."""
    whole = module.lookup(copy.attrs["desc"].name)
    assert whole is not None
    name = f"{whole.symbol}_mc"
    have = module.lookup(name)
    if have is None:
        attrs = dict(whole.attrs)
        box = list(attrs["box"])
        box[1] //= ctas
        attrs["box"] = box
        module.insert_before(kernel, Operation("tma.desc", attrs=attrs, symbol=name, loc=whole.loc))
    return Symbol(name)


def _drain(producer: Operation, kloop: Operation, empties: list[Value]) -> None:
    """After the K loop: wait on each empty barrier of the rings for the releases of the last `stages`
    iterations, as if producing `stages` more (the partner's consumers arrive here until then)."""
    stages = int(kloop.attrs.get("stages") or 1)
    blk = Block()
    i = blk.add_arg(Value(I32, "drain_i"))
    b = OpBuilder(blk)
    # the iterations the producer ran (pipeline's counter starts at 0 before persistent; persistent puts its
    # tile loop's final count here)
    total = loop_trip_count(b, kloop)
    it = b.op("arith.add", [i, total], rname="drain_it", attrs={"drain_base": True})
    n = b.const(stages, "drain_stages")
    s = b.op("arith.rem", [it, n], rname="drain_s")
    rnd = b.op("arith.div", [it, n], rname="drain_round")
    phase = b.op("arith.rem", [rnd, b.const(2)], rname="drain_phase")
    free = b.op("arith.sub", [b.const(1), phase], rname="drain_free")
    for e in empties:
        b.void("pipe.wait", [e, s, free])
    blk.append(Operation("scf.yield", []))
    kernel_body = producer.parent
    assert isinstance(kernel_body, Block)
    hb = OpBuilder(kernel_body, producer)  # the bounds before the roles: persistent moves the role's ops
    c0, cn = hb.const(0), hb.const(stages)
    loop = Operation("scf.for", [c0, cn, hb.const(1)], [], regions=[Region(blk)], attrs={DRAIN_ATTR: True})
    producer.body.append(loop)
