"""The cost model `tkc tune` ranks the points of a search space by before it times them.

A roofline per block, times waves:

* the work of one block, read off the front end's IR (before the passes, so loops are the ones the
  user wrote): every `tk.mma` counts 2·M·N·K tensor-core FLOP (half that for fp8 operands, which run at
  twice the rate), every element-wise op on a register
  tile one FP32 FLOP per element, every copy between global memory and a tile its bytes; each
  multiplied by the trip counts of the loops around it (loop bounds evaluated with the problem sizes;
  block ids taken as 0; a bound the model cannot evaluate counts one trip);
* the blocks: the product of the grid dims at these sizes (`blocks`), of which the occupancy plan
  keeps `blocks_per_sm` on each of the NUM_SMS SMs at once: `waves = ceil(blocks / (SMs x per SM))`;
* one wave lasts, per block, max(tensor time, FP32 time, feed time) when the loop is pipelined
  (`stages` >= 2: copies overlap the math) and their sum when it is not; each resident block gets an
  equal share of its SM's tensor cores, FP32 lanes and of the feed bandwidth (resident: at most
  ceil(blocks / SMs) per SM, so a lone block has its SM to itself);
* no kernel takes less than KERNEL_FLOOR_S (launch and memory latency: the one-block kernels of a
  decode step all sit there, so the model leaves their choice to the timings);
* an SM is fed no faster than the bytes it has in flight allow (Little's law): `stages` x the bytes
  one loop iteration loads x the blocks on it, over FEED_LATENCY_S. This is what ranks STAGES.

Stream-K (`stream_k`: the compiled kernel's attr, passes/stream_k.py): the model follows the
kernel's own decision. With T tiles of nk K iterations on P = NUM_SMS blocks, the last round's R
tiles (all T when T < P) are split over Q blocks (P after a full round, else min(P, R·nk/min_iters))
when each gets at least min_iters iterations and R fills at most max_tail percent of them; the split
part then takes (R / Q) of a tile's time at SK_PHASE_RATE of the data-parallel rate, plus the fix-up:
one f32 partial tile stored and about Q / R read by each owner, at an SM's share of the feed.

The feed bandwidth is the rate at which the SMs together can receive tiles: most of a GEMM's tile
loads hit in L2, so it is not the HBM bandwidth. NVIDIA does not publish it; FEED_BYTES_PER_S is an
estimate. The model is meant to rank, not to predict milliseconds: `tkc tune` prints the predicted
next to the measured rank (and Spearman's rho) so that how good it is can be read off every run.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from tkir import symexpr
from tkir.ir import Module, Operation
from tkir.passes.analysis import mma_flop, value_at_sizes
from tkir.target import FEED_BYTES_PER_S, NUM_SMS, PEAK_TENSOR_FLOPS
from tkir.types import DTYPE_BYTES, GlobalType, TileType, VectorType

PEAK_FP32_FLOPS = 66.9e12     # 132 SMs x 128 FP32 lanes x 2 x 1.98 GHz (H100 whitepaper lanes; clock read on the
#                              H200 by scripts/bench/claims.py: an FMA loop reached 64.8)
FEED_LATENCY_S = 1.5e-6       # a copy's round trip under load: an SM with B bytes in flight is fed at most
#                              B / FEED_LATENCY_S (Little's law). Fitted to one H200 sweep (gemm M=64,
#                              `tkc tune` at M = 64 on 2026-12-01: STAGES 3 -> 6 took 34.6 -> 21.6 us)
KERNEL_FLOOR_S = 3.3e-6       # no kernel is timed faster than this: a block that copies one 768-wide bf16 row
#                              through registers took 3.33-3.36 us under tkir.bench's timing on the H200
#                              (launch, one DRAM round trip each way; docs/experiments.md)
SK_PHASE_RATE = 0.75          # stream-K iterations ran at about 75% of the data-parallel rate on the H200
#                              (partials, less L2 sharing between blocks at different K offsets;
#                              docs/experiments.md, the stream-k measurements)
ELEMENTWISE = frozenset({"tk.add", "tk.sub", "tk.mul", "tk.div", "tk.max", "tk.min", "tk.exp", "tk.exp2",
                         "tk.log", "tk.log2", "tk.sqrt", "tk.rsqrt", "tk.tanh", "tk.sigmoid", "tk.erf"})


@dataclass
class Prediction:
    ms: float
    blocks: int
    blocks_per_sm: int
    waves: int
    wave_efficiency: float       # blocks / (waves x SMs x per SM): the last wave's idle share
    tensor_flops_per_block: float
    fp32_flops_per_block: float
    bytes_per_block: float
    inflight_bytes_per_sm: float  # stages x the bytes one iteration of the pipelined loop loads, x blocks per SM
    bound: str                   # "tensor", "fp32" or "feed": what limits a block in the model
    split_blocks: int = 0        # stream-K: the blocks the split tiles are spread over (0: no split)
    split_tiles: int = 0         # stream-K: the tiles split along K (the last round, or all when few)

    def as_dict(self) -> dict:
        return asdict(self)


def predict(front: Module, sizes: dict[str, int], blocks_per_sm: int, stages: int,
            stream_k: dict | None = None, cluster: int = 1) -> Prediction:
    """The model's time for the kernel of `front` (the front end's IR of one point) at `sizes`;
    `stream_k` is the compiled kernel's `stream_k` attr ({min_iters, max_tail_pct}) when the stream-k
    pass rewrote it; `cluster` its `cluster` attr (cluster-rows: each block runs as that many CTAs, each
    doing an equal share of the block's work, and `blocks_per_sm` counts CTAs)."""
    kernel = next(iter(front.kernels()))
    env = {**sizes, "NUM_SMS": NUM_SMS}
    blocks = max(1, cluster)
    for g in kernel.attrs.get("grid", []):
        blocks *= max(1, symexpr.evaluate(g, env))
    work = _Work()
    _walk(kernel.body.ops, 1.0 / max(1, cluster), sizes, work)
    work.iter_bytes /= max(1, cluster)
    # blocks share an SM only with blocks that are there: fewer blocks than the plan's SMs x per SM (one
    # partial wave: N = 1 rows) each get an SM's share divided among the blocks actually on it
    per_sm = max(1, min(blocks_per_sm, math.ceil(blocks / NUM_SMS)))
    share = NUM_SMS * per_sm
    t_tensor = work.tensor / (PEAK_TENSOR_FLOPS / share)
    t_fp32 = work.fp32 / (PEAK_FP32_FLOPS / share)
    inflight = per_sm * max(1, stages) * work.iter_bytes
    feed_per_sm = FEED_BYTES_PER_S / NUM_SMS
    if inflight > 0:  # too few bytes in flight cannot keep the feed busy (Little's law)
        feed_per_sm = min(feed_per_sm, inflight / FEED_LATENCY_S)
    t_feed = work.bytes / (feed_per_sm / per_sm)
    parts = {"tensor": t_tensor, "fp32": t_fp32, "feed": t_feed}
    bound = max(parts, key=parts.get)
    per_block = max(parts.values()) if stages >= 2 else sum(parts.values())
    waves = math.ceil(blocks / share)
    ms = max(waves * per_block, KERNEL_FLOOR_S) * 1e3
    split = _stream_k_split(stream_k, blocks, work.k_trips) if stream_k else None
    if split is not None:
        rounds, tiles, q = split
        fixup = (1 + q / tiles) * work.acc_elems * 4 / (FEED_BYTES_PER_S / NUM_SMS)
        ms = (rounds * per_block + tiles / q * per_block / SK_PHASE_RATE + fixup) * 1e3
        launched = NUM_SMS if rounds else q
        return Prediction(ms=ms, blocks=launched, blocks_per_sm=per_sm, waves=rounds + 1,
                          wave_efficiency=1.0, tensor_flops_per_block=work.tensor,  # the split fills the round
                          fp32_flops_per_block=work.fp32, bytes_per_block=work.bytes,
                          inflight_bytes_per_sm=inflight, bound=bound, split_blocks=q, split_tiles=tiles)
    return Prediction(ms=ms, blocks=blocks, blocks_per_sm=per_sm, waves=waves,
                      wave_efficiency=blocks / (waves * share), tensor_flops_per_block=work.tensor,
                      fp32_flops_per_block=work.fp32, bytes_per_block=work.bytes,
                      inflight_bytes_per_sm=inflight, bound=bound)


def _stream_k_split(attr: dict, tiles: int, nk: int) -> tuple[int, int, int] | None:
    """(full rounds, split tiles, blocks they are split over) as the stream-K kernel decides at run
    time (passes/stream_k.py, one block per SM), or None when it does not split."""
    min_iters, max_tail = int(attr.get("min_iters", 16)), int(attr.get("max_tail_pct", 60))
    rounds, rem = divmod(tiles, NUM_SMS)
    q = NUM_SMS if rounds else max(1, min(NUM_SMS, rem * nk // min_iters))
    if rem == 0 or nk < 1 or rem * nk < q * min_iters or 100 * rem > max_tail * q:
        return None
    return rounds, rem, q


class _Work:
    def __init__(self) -> None:
        self.tensor = 0.0
        self.fp32 = 0.0
        self.bytes = 0.0
        self.iter_bytes = 0.0  # the most bytes one iteration of a loop loads (what a pipeline stage holds)
        self.k_trips = 0       # trips of the loop around the (first) tk.mma: the K loop
        self.acc_elems = 0     # elements of the largest mma accumulator (a stream-K partial tile)


def _walk(ops: list[Operation], trips: float, sizes: dict[str, int], work: _Work) -> None:
    for op in ops:
        if op.name == "scf.for":
            lo, hi, step = (value_at_sizes(v, sizes, block_id=0) for v in op.operands[:3])
            n = 1 if None in (lo, hi, step) or step <= 0 else max(0, -(-(hi - lo) // step))
            if not work.k_trips and any(x.name == "tk.mma" for x in op.regions[0].block.ops):
                work.k_trips = n
            _walk(op.regions[0].block.ops, trips * n, sizes, work)
            loads = sum(_bytes(_tile_of(x)) for x in op.regions[0].block.ops
                        if x.name == "tk.load" and any(isinstance(v.type, GlobalType) for v in x.operands))
            work.iter_bytes = max(work.iter_bytes, loads)
            continue
        for r in op.regions:  # scf.if: both branches counted (an upper bound)
            _walk(r.block.ops, trips, sizes, work)
        if op.name == "tk.mma":
            acc = op.result.type
            work.tensor += trips * mma_flop(op)  # in bf16-rate FLOP: the fp8 (k32) forms run at twice the rate
            work.acc_elems = max(work.acc_elems, acc.rows * acc.cols)
        elif op.name in ("tk.load", "tk.store") and any(isinstance(v.type, GlobalType) for v in op.operands):
            work.bytes += trips * _bytes(_tile_of(op))
        elif op.name in ELEMENTWISE and op.results and isinstance(op.result.type, TileType | VectorType):
            work.fp32 += trips * _elements(op.result.type)


def _tile_of(op: Operation) -> TileType | VectorType:
    """The tile a global copy fills or reads."""
    if op.results:
        return op.result.type
    return next(v.type for v in op.operands if isinstance(v.type, TileType | VectorType))


def _elements(t: TileType | VectorType) -> int:
    return t.rows * t.cols if isinstance(t, TileType) else t.n


def _bytes(t: TileType | VectorType) -> int:
    return _elements(t) * DTYPE_BYTES[t.dtype]


def spearman(xs: list[float], ys: list[float]) -> float | None:
    """Spearman's rank correlation (average ranks for ties); None for fewer than 2 points or no spread."""
    if len(xs) < 2:
        return None
    rx, ry = ranks(xs), ranks(ys)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry, strict=True))
    vx = sum((a - mx) ** 2 for a in rx)
    vy = sum((b - my) ** 2 for b in ry)
    return None if vx == 0 or vy == 0 else cov / math.sqrt(vx * vy)


def ranks(xs: list[float]) -> list[float]:
    """1-based ranks, smallest first; tied values share their average rank."""
    order = sorted(range(len(xs)), key=lambda i: xs[i])
    out = [0.0] * len(xs)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and xs[order[j + 1]] == xs[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out
