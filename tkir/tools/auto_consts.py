"""Consts the compiler chooses: `<BQ=auto>` in a kernel header, or `-D BQ=auto`.

    @tune(BQ=[192, 128, 64], BKV=[128, 64])
    kernel attention_fwd<BQ=auto, BKV=auto, D=128, ...>(...)

An `auto` const takes one of the values its `@tune` annotation lists, or, where none lists it, one of
DEFAULT_CANDIDATES (tile extents: a user's `<BM=auto, BN=auto>` without any annotation). `resolve(...)` tries the
space's points (the other consts fixed: -D overrides, else header defaults; points a `where` drops
are skipped) from the most work per block to the least, i.e. by the product of the auto consts'
values (ties: the widest wgmma instructions first, then the order written), and keeps the first one the
pipeline accepts up to and including plan-occupancy: its shared memory, its register split (setmaxnreg,
consumer warpgroups) and every check before it. It is the largest tile the register and shared-memory
budget allows, chosen without running anything: the same rule ThunderKittens and FlashAttention-3 apply by
hand (FA3's tile table per head dim). Measured faster tiles come from `tkc tune`, which times the same space.

A point the pipeline accepts but that plans fewer than MIN_WARPS_PER_SM resident warps per SM (blocks
per SM x warps per block) is passed over for the next one that plans at least that many; it is kept
only when no later point does. One warp per scheduler issues mma.sync at half the rate two do (the
register-operand ceiling on the H200: 309 TFLOP/s at 4 warps per SM, 597 at 8; docs/experiments.md,
"The mma.sync path"). On sm_80, attention at head dim 128 then takes BQ 128 x BKV 64 (4 warps, 2 blocks per
SM: 1.00x FA2) over 192 x 64 (6 warps, one block per SM: 0.71x). Warp-specialized sm_90a kernels plan
12 or more warps per block, so their choice does not change.

The decision is recorded on the kernel, `auto = {BQ = 128, BKV = 128}`, with every point tried
before it and why it was refused (`auto_refused`), so `tkc compile` output and `tkc report` show it.

**At problem sizes** (`resolve(..., sizes=...)`: `tkir.compile(path, sizes={...})`, `tkc compile --size`,
and every call of a kernel compiled with auto consts, which chooses per size bucket), the cost model
(tkir.tools.tune_model, the roofline per block times waves that `tkc tune` ranks by) predicts every point
the pipeline accepts at the sizes' bucket (each size rounded up to a power of two, as the tuning cache
keys). The size-free choice above stays unless another point is predicted more than CLEAR_WIN faster; then
the model's best wins (predictions within TIE_FRACTION of it tie, broken by the size-free order). A kernel with no
tensor work whose size-free point runs fewer blocks than there are SMs at these sizes (a row kernel at N = 1 or 128)
takes the point with the most blocks (up to one per SM), then the least work a block: such a grid is a few memory
round trips whatever the tile (the model's floor), and a bigger tile only adds masked rows and leaves SMs idle.
`accept(consts)` (the backend and ptxas: a point that spills) may still turn the winner down; then the next
in the ranking is taken. The IR records the sizes the choice was made for (`auto_sizes`), its prediction
and why (`auto_predicted`) and the runner-up (`auto_runner_up`): gemm_fp8.tk at M = 64, N = K = 4096 takes
64 x 128 tiles split along K over the SMs (stream-K), and at 4096^3 the 128 x 256 whole tiles of the
size-free rule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator

from tkir.diagnostics import CompileError
from tkir.ir import Module
from tkir.target import NUM_SMS
from tkir.verify_sizes import check_problem_sizes

AUTO = "auto"
STOP_AFTER = "plan-occupancy"  # the last pass a candidate must survive
MIN_WARPS_PER_SM = 8  # two per scheduler (4 schedulers per SM, HOPPER.md §1): see the module docstring
DEFAULT_CANDIDATES = (256, 128, 64, 32, 16)  # an auto const no @tune lists: tile extents (multiples of 16, the
#                                             mma's k and the TMA box granule; HOPPER.md); the pipeline refuses
#                                             the ones a kernel cannot use (registers, shared memory, wgmma shapes)
CLEAR_WIN = 0.25      # at problem sizes the cost model overrides the budget rule only where it predicts a point
#                       more than 25% faster: its errors against `tkc tune`'s timings are often 10-20% (its
#                       Spearman rho is printed by every tuning run), so smaller predicted gains are noise
SPILL_LIMIT_BYTES = 64     # drop a point whose ptxas spills more than this: a few spilled words (plan-occupancy's
#                            register budget a little under ptxas's need) cost little; more means a mis-planned point
WGMMA_MAX_N = 256     # wgmma.mma_async's widest instruction, m64n256k16 (PTX ISA, "Matrix shape" of wgmma)
TIE_FRACTION = 0.05   # predictions within 5% of the model's best tie (the budget rule's order decides)
# the word `auto` outside comments and strings (which the first two alternatives consume)
_AUTO_WORD = re.compile(r'"[^"\n]*"|//[^\n]*|\bauto\b')


def size_bucket(sizes: dict[str, int]) -> dict[str, int]:
    """Each size rounded up to a power of two: the shapes that share a tuned configuration (the tuning cache's
    key, tkir/tools/tune.py) and one choice of the auto consts."""
    return {k: 1 << max(0, int(v) - 1).bit_length() for k, v in sizes.items()}


def auto_names(path: str, overrides: dict[str, object]) -> list[str]:
    """The consts of the .tk kernel at `path` whose value is `auto` (header default or override)."""
    from tkir.frontend.parse import parse_source
    from tkir.source_text import read_source

    text = read_source(path)
    if AUTO not in overrides.values() and not mentions_auto(text):
        return []  # the common case: no extra parse on the compile path
    kernel = parse_source(text, str(path))
    return [c.name for c in kernel.consts if overrides.get(c.name, c.value) == AUTO]


def mentions_auto(text: str) -> bool:
    """Whether .tk source text has the word `auto` outside its comments and strings: where it has not,
    no const is auto (attention_fwd.tk's comments mention it)."""
    return any(m.group() == AUTO for m in _AUTO_WORD.finditer(text))


def _warps_per_sm(module: Module) -> int | None:
    """Resident warps per SM that plan-occupancy planned for the module's kernel (None: no plan)."""
    from tkir.facts import OccupancyPlan
    from tkir.target import WARP

    plan = OccupancyPlan.of(module.kernel)
    if plan is None or not plan.threads or not plan.blocks_per_sm:
        return None
    return plan.blocks_per_sm * plan.threads // WARP


def resolve(path: str, overrides: dict[str, object], names: list[str],
            trial: Callable[[dict[str, object]], Module], *, sizes: dict[str, int] | None = None,
            front: Callable[[dict[str, object]], Module] | None = None, target: str = "sm_90a",
            accept: Callable[[dict[str, object]], str | None] | None = None
            ) -> tuple[dict[str, object], dict, list[str]]:
    """(the consts with every auto one chosen, the choice, the refused points with their reasons).
    `trial(consts)` runs the pipeline on one point up to plan-occupancy (raising CompileError). With
    `sizes`, the cost model chooses at their bucket (`front(consts)`: the front end's module, which the
    model reads; `accept(consts)`: None, or why a winner is turned down) and the choice dict carries
    `sizes`, `predicted` and `runner_up` as well."""
    from tkir.frontend.parse import parse_source
    from tkir.frontend.tune import TuneSpace, check_tune
    from tkir.source_text import read_source

    text = read_source(path)
    kernel = parse_source(text, str(path))
    ann = next((a for a in kernel.annotations if a.name == "tune"), None)
    const_loc = {c.name: c.loc for c in kernel.consts}
    space = check_tune(kernel, ann, text) if ann is not None else None
    if space is None:
        space = TuneSpace(kernel.name, {c.name: c.value for c in kernel.consts}, {})
    for n in [n for n in names if n not in space.values]:  # an auto const no @tune lists: the compiler's own candidates
        space.values[n] = list(DEFAULT_CANDIDATES)
    fixed = {k: v for k, v in overrides.items() if v != AUTO}
    for k in space.values:  # tuned consts that are not auto stay at their value
        if k not in names and k not in fixed:
            fixed[k] = space.defaults[k]
    points = [p for p in space.points(fixed) if p.dropped is None]
    if accept is not None:  # asked with the consts the compile that follows is given: the same IR, one cache entry
        check = accept

        def accept(point: dict[str, object], limit: int | None = None) -> str | None:
            full = {**{k: v for k, v in overrides.items() if v != AUTO}, **{n: point[n] for n in names}}
            return check(full, limit)
    switches = {n for n in names if 0 in space.values[n]}  # SK=[0, 1]: an on/off choice, not a size
    # the budget rule's order: the most work per block first (the product of the auto consts that are sizes),
    # ties with the widest wgmma instructions first (_WidestFirst), then in the order the @tune lists are written
    work = [math.prod(float(p.consts[n]) for n in names if n not in switches) for p in points]
    order = sorted(range(len(points)), key=lambda i: -work[i])
    tried: dict[int, Module | CompileError] = {}

    def attempt(i: int) -> Module | CompileError:
        if i not in tried:
            try:
                tried[i] = trial(dict(points[i].consts))
            except CompileError as e:
                tried[i] = e
        return tried[i]

    order = _WidestFirst(order, work, attempt)

    # the size-free rule checks its pick against ptxas too (`accept`): plan-occupancy's register estimate can
    # accept a tile ptxas spills (a user's 128 x 256 attention tile: 840 B; attention_bwd_dkdv's 64-row query
    # block at D = 128: 32 B at 255 registers)
    picked, refused = _budget_pick(points, order, names, attempt, accept if sizes is None else None)
    if picked is not None and accept is not None:
        picked = order.spill_free_twin(picked, lambda i: accept(dict(points[i].consts), 0) is None)
    errors = [e for e in tried.values() if isinstance(e, CompileError)]
    if picked is None and len(errors) > 1 and len({e.message for e in errors}) == 1:
        raise errors[0]  # every point fails the same way (fp8 '@' on sm_80): that error, where it is
    if sizes is None or picked is None:
        if picked is None:
            why = "; ".join(refused) or "every point is dropped by the @tune 'where' conditions"
            raise CompileError(const_loc.get(names[0], kernel.loc),
                               f"no value of the auto consts {', '.join(names)} compiles: {why}", text,
                               hint="widen the @tune lists, or set the consts with -D")
        consts = dict(points[picked].consts)
        return consts, {n: consts[n] for n in names}, refused
    assert front is not None
    check_problem_sizes(front(dict(points[picked].consts)).kernel, sizes, text)
    return _resolve_at_sizes(kernel, text, const_loc, points, order, names, attempt, picked, front, sizes, target,
                             accept)


class _WidestFirst:
    """The budget rule's order, `order`, with each run of points of equal work per block (256 x 128 and 128 x
    256) re-ordered so that the point whose wgmma instructions are widest comes first (stable otherwise). Lazy:
    a run is compiled (`attempt`) only when iteration reaches it, so the size-free rule, which stops at its
    first accepted point, compiles no more runs than before.

    Why: on sm_90a a tile's matrix product runs as m64nNk16 instructions with N the accumulator's columns (up to
    WGMMA_MAX_N), so of two tiles of equal area the wider one reads fewer operand bytes from shared memory per
    FLOP, and its epilogue staging tile (rows x 128 columns, passes/create_tma.py) is smaller, leaving room for
    another pipeline stage. A Xᵀ·dY kernel with auto tiles took 256 x 128 (n128, 3 stages) at 0.84-0.88x cuBLAS
    and runs at 1.00-1.02x at 128 x 256 (n256, 4 stages); GEMM + bias + GELU 0.94-0.96x and 1.03-1.06x (H100,
    docs/experiments.md, "Wide wgmma tiles first"). Points without wgmma (sm_80's mma.sync, row kernels) keep
    their order. `spill_free_twin` then keeps the rule from choosing a point ptxas spills at where a narrower
    point of the same work does not spill: GEMM + bias + GELU's 128 x 256 tile ran 1.03-1.06x cuBLAS but spills 32
    B (its bias vector takes 64 registers a thread where 256 x 128's takes 32), so it keeps 256 x 128."""

    def __init__(self, order: list[int], work: list[float], attempt: Callable[[int], Module | CompileError]):
        self._runs = []
        for i in order:
            if self._runs and work[self._runs[-1][0]] == work[i]:
                self._runs[-1].append(i)
            else:
                self._runs.append([i])
        self._attempt = attempt
        self._widths: dict[int, int] = {}
        self._done: list[int] = []   # the runs sorted so far, in order
        self._next = 0               # the next run to sort

    def __iter__(self) -> Iterator[int]:
        k = 0
        while True:
            while k >= len(self._done):
                if self._next == len(self._runs):
                    return
                run = self._runs[self._next]
                self._next += 1
                widths: dict[int, int] = {}
                if len(run) > 1:
                    first = self._attempt(run[0])
                    if isinstance(first, CompileError) or _wgmma_width(first):  # a kernel without wgmma: no ranking
                        widths = {run[0]: _wgmma_width(first)}
                        widths.update({i: _wgmma_width(self._attempt(i)) for i in run[1:]})
                self._widths.update(widths)
                if len(set(widths.values())) > 1:  # wgmma points of different widths: the rule applies
                    run = sorted(run, key=lambda i: -widths[i])
                self._done.extend(run)
            yield self._done[k]
            k += 1

    def spill_free_twin(self, i: int, spill_free: Callable[[int], bool]) -> int:
        """`i`, or, where the width rule put `i` ahead of narrower points of the same work and ptxas spills at
        `i`, the first of those it assembles without spills (ptxas runs only in that case)."""
        run = next((r for r in self._runs if i in r), [i])
        narrower = [j for j in self._done if j in run and self._widths.get(j, 0) < self._widths.get(i, 0)]
        if not narrower or spill_free(i):
            return i
        return next((j for j in narrower if not isinstance(self._attempt(j), CompileError) and spill_free(j)), i)


def _wgmma_width(module: Module | CompileError) -> int:
    """The narrowest wgmma instruction N among the kernel's matrix products (0: no wgmma, or a point that fails)."""
    from tkir.layout import layout_of
    from tkir.types import TileType

    if isinstance(module, CompileError):
        return 0
    widths = []
    for op in module.kernel.walk():
        if op.name != "tk.mma" or not op.results:
            continue
        t = op.result.type
        lay = layout_of(t, op.loc) if isinstance(t, TileType) else None
        if lay is None or lay.kind != "wgmma_acc":
            return 0
        widths.append(min(t.cols, WGMMA_MAX_N))
    return min(widths, default=0)


def _budget_pick(points: list, order: Iterable[int], names: list[str], attempt: Callable[[int], Module | CompileError],
                 accept: Callable[[dict[str, object]], str | None] | None = None) -> tuple[int | None, list[str]]:
    """The size-free rule: the first point in `order` the pipeline accepts (and `accept`, when given, does not
    turn down) that plans at least MIN_WARPS_PER_SM warps per SM (else the first accepted one); the refused
    points with their reasons."""
    refused: list[str] = []
    few: tuple[int, list[str]] | None = None  # the first accepted point with too few warps per SM
    spilling: tuple[int, list[str]] | None = None  # the first point only ptxas turned down
    for i in order:
        label = _label(points[i].consts, names)
        module = attempt(i)
        if isinstance(module, CompileError):
            refused.append(f"{label}: {module.message.splitlines()[0]}")
            continue
        warps = _warps_per_sm(module)
        if warps is not None and warps < MIN_WARPS_PER_SM:
            if few is None:
                few = (i, list(refused))
            refused.append(f"{label}: compiles, but plans {warps} warps per SM (fewer than {MIN_WARPS_PER_SM})")
            continue
        turned = accept(dict(points[i].consts)) if accept is not None else None
        if turned:
            refused.append(f"{label}: {turned}")
            if spilling is None:
                spilling = (i, list(refused))
            continue
        return i, refused
    if few is not None:
        return few
    if spilling is not None:  # every point spills: the budget rule's own, as before (the backend warns of it)
        return spilling[0], refused
    return None, refused


def _resolve_at_sizes(kernel, text: str, const_loc: dict, points: list, order: Iterable[int], names: list[str],
                      attempt: Callable[[int], Module | CompileError], budget: int,
                      front: Callable[[dict[str, object]], Module], sizes: dict[str, int], target: str,
                      accept: Callable[[dict[str, object]], str | None] | None
                      ) -> tuple[dict[str, object], dict, list[str]]:
    """resolve() at problem sizes: the budget rule's point (`budget`), unless the cost model predicts another
    accepted point at the sizes' bucket faster by more than CLEAR_WIN; then the model's best (its ties, within
    TIE_FRACTION, broken by the budget rule's order). `accept` may turn the winner down: the next in the
    ranking (the rest by prediction) is taken."""
    from tkir.tools.tune_model import predict

    bucket = size_bucket(sizes)
    refused: list[str] = []
    scored: dict[int, tuple[float, object]] = {}  # point -> (predicted ms, prediction)
    for i in order:
        module = attempt(i)
        if isinstance(module, CompileError):
            refused.append(f"{_label(points[i].consts, names)}: {module.message.splitlines()[0]}")
            continue
        occ = module.kernel.attrs.get("occupancy") or {}
        pred = predict(front(dict(points[i].consts)), bucket, int(occ.get("blocks_per_sm", 1)),
                       int(occ.get("stages", 1)), stream_k=_stream_k_attr(module, target),
                       cluster=int(module.kernel.attrs.get("cluster") or 1))
        scored[i] = (pred.ms, pred)
    best = min(ms for ms, _ in scored.values())
    rank = {i: r for r, i in enumerate(order)}
    memory_bound = all(pred.tensor_flops_per_block == 0 for _, pred in scored.values())
    if memory_bound and scored[budget][1].blocks < NUM_SMS:
        # a grid under one block per SM, of a kernel with no tensor work: its time is a few memory round trips
        # whatever the tile (the model's floor), and a bigger tile only adds masked rows and idles SMs
        ranking = sorted(scored, key=lambda i: (-min(scored[i][1].blocks, NUM_SMS), scored[i][1].bytes_per_block,
                                                rank[i]))
        why = (f"the budget rule's point runs {scored[budget][1].blocks} block(s), under one per SM, with no tensor "
               "work: the most blocks, then the least work a block")
    elif best * (1 + CLEAR_WIN) < scored[budget][0]:
        tied = [i for i in scored if scored[i][0] <= best * (1 + TIE_FRACTION)]
        first = min(tied, key=lambda i: rank[i])
        why = f"the model predicts it {scored[budget][0] / scored[first][0]:.2f}x faster than the budget rule's"
        ranking = [first] + sorted((i for i in scored if i != first), key=lambda i: (scored[i][0], rank[i]))
    else:  # the budget rule's order, from its choice on
        why = "the budget rule's (no point predicted more than " + f"{CLEAR_WIN:.0%} faster)"
        ranking = [budget] + [i for i in order if i in scored and i != budget]
    for j, i in enumerate(ranking):
        consts = dict(points[i].consts)
        turned = accept(consts) if accept is not None else None
        if turned:
            refused.append(f"{_label(consts, names)}: {turned}")
            why = "the next in that order after the points turned down; " + why
            continue
        runner = ranking[j + 1] if j + 1 < len(ranking) else None
        choice = {"auto": {n: consts[n] for n in names}, "sizes": bucket,
                  "predicted": f"{_describe(*scored[i])}; {why}",
                  "runner_up": (f"{_label(points[runner].consts, names)}: {_describe(*scored[runner])}"
                                if runner is not None else "none")}
        return consts, choice, refused
    # every point spills: the first in the ranking, as without the check (the backend warns of it)
    i = ranking[0]
    consts = dict(points[i].consts)
    runner = ranking[1] if len(ranking) > 1 else None
    choice = {"auto": {n: consts[n] for n in names}, "sizes": bucket,
              "predicted": f"{_describe(*scored[i])}; every point spills in ptxas: kept the first, {why}",
              "runner_up": (f"{_label(points[runner].consts, names)}: {_describe(*scored[runner])}"
                            if runner is not None else "none")}
    return consts, choice, refused


def _label(consts: dict, names: list[str]) -> str:
    return " ".join(f"{n}={consts[n]}" for n in names)


def _describe(ms: float, pred) -> str:  # pred: a tkir.tools.tune_model.Prediction
    split = (f", {pred.split_tiles} tile(s) split along K over {pred.split_blocks} blocks"
             if pred.split_blocks else "")
    return (f"{1000 * ms:.1f} us predicted ({pred.blocks} blocks, {pred.waves} wave(s) at {pred.blocks_per_sm}/SM, "
            f"{pred.bound}-bound{split})")


def _stream_k_attr(module: Module, target: str) -> dict | None:
    """The `stream_k` attr the stream-k pass will give this kernel (it runs after plan-occupancy): kernels
    that ask (`@stream_k(1)`) on sm_90a, where the persistent loop it splits exists (passes/stream_k.py)."""
    from tkir.passes.stream_k import MAX_TAIL_PCT, MIN_ITERS, MIN_ITERS_ATTR, REQUEST_ATTR

    attrs = module.kernel.attrs
    if target != "sm_90a" or not attrs.get(REQUEST_ATTR):
        return None
    return {"min_iters": int(attrs.get(MIN_ITERS_ATTR) or MIN_ITERS), "max_tail_pct": MAX_TAIL_PCT}
