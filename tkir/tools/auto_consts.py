"""Consts the compiler chooses: `<BQ=auto>` in a kernel header, or `-D BQ=auto`.

    @tune(BQ=[192, 128, 64], BKV=[128, 64])
    kernel attention_fwd<BQ=auto, BKV=auto, D=128, ...>(...)

An `auto` const takes one of the values its `@tune` annotation lists. `resolve(...)` tries the
space's points (the other consts fixed: -D overrides, else header defaults; points a `where` drops
are skipped) from the most work per block to the least, i.e. by the product of the auto consts'
values (ties: the order written), and keeps the first one the pipeline accepts up to and including
plan-occupancy: its shared memory, its register split (setmaxnreg, consumer warpgroups) and every
check before it. It is the largest tile the register and shared-memory budget allows, chosen without
running anything: the same rule ThunderKittens and FlashAttention-3 apply by hand (FA3's tile table
per head dim). Measured faster tiles come from `tkc tune`, which times the same space.

A point the pipeline accepts but that plans fewer than MIN_WARPS_PER_SM resident warps per SM (blocks
per SM x warps per block) is passed over for the next one that plans at least that many; it is kept
only when no later point does. One warp per scheduler issues mma.sync at half the rate two do (the
register-operand ceiling on the H200: 309 TFLOP/s at 4 warps per SM, 597 at 8; docs/experiments.md,
"The mma.sync path"). On sm_80, attention at head dim 128 then takes BQ 128 x BKV 64 (4 warps, 2 blocks per
SM: 1.00x FA2) over 192 x 64 (6 warps, one block per SM: 0.71x). Warp-specialized sm_90a kernels plan
12 or more warps per block, so their choice does not change.

The decision is recorded on the kernel, `auto = {BQ = 128, BKV = 128}`, with every point tried
before it and why it was refused (`auto_refused`), so `tkc compile` output and `tkc report` show it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from tkir.diagnostics import CompileError
from tkir.ir import Module

AUTO = "auto"
STOP_AFTER = "plan-occupancy"  # the last pass a candidate must survive
MIN_WARPS_PER_SM = 8  # two per scheduler (4 schedulers per SM, HOPPER.md §1): see the module docstring
# the word `auto` outside comments and strings (which the first two alternatives consume)
_AUTO_WORD = re.compile(r'"[^"\n]*"|//[^\n]*|\bauto\b')


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
            trial: Callable[[dict[str, object]], Module]) -> tuple[dict[str, object], dict, list[str]]:
    """(the consts with every auto one chosen, the choice, the refused points with their reasons).
    `trial(consts)` runs the pipeline on one point up to plan-occupancy (raising CompileError)."""
    from tkir.frontend.parse import parse_source
    from tkir.frontend.tune import check_tune
    from tkir.source_text import read_source

    text = read_source(path)
    kernel = parse_source(text, str(path))
    ann = next((a for a in kernel.annotations if a.name == "tune"), None)
    const_loc = {c.name: c.loc for c in kernel.consts}
    space = check_tune(kernel, ann, text) if ann is not None else None
    missing = [n for n in names if space is None or n not in space.values]
    if missing:
        n = missing[0]
        raise CompileError(const_loc.get(n, kernel.loc), f"const '{n}' is auto but no @tune lists its candidates",
                           text, hint=f"write @tune({n}=[...]) above the kernel, or set it with -D {n}=<value>")
    assert space is not None
    fixed = {k: v for k, v in overrides.items() if v != AUTO}
    for k in space.values:  # tuned consts that are not auto stay at their value
        if k not in names and k not in fixed:
            fixed[k] = space.defaults[k]
    points = [p for p in space.points(fixed) if p.dropped is None]
    order = sorted(range(len(points)), key=lambda i: -math.prod(float(points[i].consts[n]) for n in names))
    refused: list[str] = []
    few: tuple[dict, dict, list[str]] | None = None  # the first accepted point with too few warps per SM
    for i in order:
        consts = points[i].consts
        label = " ".join(f"{n}={consts[n]}" for n in names)
        try:
            module = trial(dict(consts))
        except CompileError as e:
            refused.append(f"{label}: {e.message.splitlines()[0]}")
            continue
        warps = _warps_per_sm(module)
        if warps is not None and warps < MIN_WARPS_PER_SM:
            if few is None:
                few = (dict(consts), {n: consts[n] for n in names}, list(refused))
            refused.append(f"{label}: compiles, but plans {warps} warps per SM (fewer than {MIN_WARPS_PER_SM})")
            continue
        return dict(consts), {n: consts[n] for n in names}, refused
    if few is not None:
        return few
    why = "; ".join(refused) or "every point is dropped by the @tune 'where' conditions"
    raise CompileError(const_loc.get(names[0], kernel.loc),
                       f"no value of the auto consts {', '.join(names)} compiles: {why}", text,
                       hint="widen the @tune lists, or set the consts with -D")
