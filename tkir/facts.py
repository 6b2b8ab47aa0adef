"""Facts the passes record in the IR, as small frozen dataclasses: the occupancy plan, and the
readers every fact's `from_attr` shares.

A fact lives in the IR as a plain attribute dict (what the printer prints and the parser reads back,
so the IR text and its round trip are those of any other attribute). Code never reads that dict
itself: a writer stores `fact.to_attr()`, a reader calls `Fact.from_attr(attr, loc)` (or a helper
such as `OccupancyPlan.of(kernel)`), which checks every key and value and raises a `FactError`
naming the attribute and what is wrong with it, located where the caller says (a .tkir file written
by hand may hold anything).

* `OccupancyPlan` (kernel attr `occupancy`, written by plan-occupancy, read by pipeline, the
  backend, tkir.tools.report and the launch description): stages, blocks per SM, shared memory, threads,
  the roles (`RolePlan`), the register budget of the computing role (`RegisterBudget`) and the shared
  memory breakdown (`SharedBreakdown`). Hand-written IR may leave out everything but `stages` and
  `roles`; plan-occupancy always writes all of it.
* `min_blocks_per_sm = B` (kernel attr, from `@blocks_per_sm(B)` with B >= 1; read with
  `requested_blocks_per_sm(kernel)`): the floor of resident blocks per SM the user asks ptxas for
  (`.minnctapersm`); plan-occupancy checks that B blocks fit and the backend emits it.
* `RegisterLayout` (type attr `layout` of register tiles and vectors) is in tkir/layout.py, beside
  the fragment math that interprets it.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, ClassVar, Self

from tkir.diagnostics import CompileError
from tkir.target import MAX_BLOCKS_PER_SM, MAX_THREADS_PER_BLOCK, SMEM_PER_BLOCK, WARP, WARPGROUP
from tkir.types import format_attr_value

if TYPE_CHECKING:
    from tkir.ir import Loc, Operation

# passes/multicast.py writes {ctas = C} on a kernel: clusters of C CTAs along x share the tiles they load
# (persistent pairs the cluster's tiles; the backend and the launch form the clusters)
MULTICAST_ATTR = "tma_multicast"
# multicast{auto=true}'s fill rule, {blocks = "<size expr>", at_least = B}: a call whose exact sizes launch fewer
# blocks runs its bucket's kernel compiled without multicast (passes/multicast.py writes it, tkir/api.py reads it)
MULTICAST_FILL_ATTR = "multicast_fill"
ROLE_NAMES = ("producer", "consumer", "compute")  # plan-occupancy's roles (docs/passes.md)
MIN_BLOCKS_ATTR = "min_blocks_per_sm"  # kernel attr: what `@blocks_per_sm(B)`, B >= 1, records
# The most K iterations per block a Stream-K split may ask for (`@stream_k(1, min_iters=I)`, the kernel attr
# `stream_k_min_iters`, `stream-k{min_iters=I}`): the schedule multiplies it by the blocks (one per SM) in
# i32, which 2**20 x 2**10 blocks still fits; more than any split would ask
MAX_STREAM_K_MIN_ITERS = 1 << 20


class FactError(CompileError, ValueError):
    """A recorded fact whose attribute does not have the fact's form (or a fact built with values
    that cannot be): the message names the attribute and the problem. A ValueError too, so callers
    that fall back on a layout they cannot interpret (plan-occupancy, tkir.tools.report) keep doing so."""


def malformed(what: str, attr: object, problem: str, loc: Loc | None = None) -> FactError:
    """The error for attribute `what` holding `attr`: `malformed <what> {...}: <problem>`."""
    try:
        text = format_attr_value(attr)
    except TypeError:
        text = repr(attr)
    return FactError(loc, f"malformed {what} {text}: {problem}")


def check_keys(d: dict, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    """Raise FactError (unlocated: the caller wraps it with `malformed`) on a missing or unknown key."""
    for k in required:
        if k not in d:
            raise FactError(None, f"'{k}' is missing")
    for k in d:
        if k not in required and k not in optional:
            raise FactError(None, f"unknown key '{k}' (expected {', '.join(required + optional)})")


def count(d: dict, key: str, minimum: int = 0) -> int | None:
    """d[key] as an int >= minimum, None when absent; FactError otherwise (booleans are not counts)."""
    v = d.get(key)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int):
        raise FactError(None, f"'{key}' must be an integer, not {format_attr_value(v)}")
    if v < minimum:
        raise FactError(None, f"'{key}' must be at least {minimum}, not {v}")
    return v


def require(d: dict, key: str, minimum: int = 0) -> int:
    """d[key] as an int >= minimum (present: `check_keys` ran first)."""
    v = count(d, key, minimum)
    if v is None:
        raise FactError(None, f"'{key}' is missing")
    return v


def table(attr: object, key: str | None = None) -> dict:
    """`attr` (the value of `key`, or the whole attribute) if it is an attribute dict, else FactError."""
    if not isinstance(attr, dict):
        raise FactError(None, ("" if key is None else f"'{key}' is ") + "not a {key = value, ...} dict")
    return attr


# --- the blocks per SM the user asks for ------------------------------------------------------------


def blocks_per_sm_problem(v: object) -> str | None:
    """Why `v` cannot be a kernel's `min_blocks_per_sm` (an integer 1..MAX_BLOCKS_PER_SM), or None."""
    if isinstance(v, bool) or not isinstance(v, int):
        return f"'{MIN_BLOCKS_ATTR}' must be an integer, not {format_attr_value(v)}"
    if not 1 <= v <= MAX_BLOCKS_PER_SM:
        return f"'{MIN_BLOCKS_ATTR}' must be 1..{MAX_BLOCKS_PER_SM} (resident blocks per SM), not {v}"
    return None


def requested_blocks_per_sm(kernel: Operation) -> int | None:
    """The kernel's `min_blocks_per_sm` (`@blocks_per_sm(B)`, B >= 1), None when it asks for nothing;
    a FactError located at the kernel when the attribute is not an integer 1..MAX_BLOCKS_PER_SM."""
    v = kernel.attrs.get(MIN_BLOCKS_ATTR)
    if v is None:
        return None
    problem = blocks_per_sm_problem(v)
    if problem:
        raise FactError(kernel.loc, problem)
    return v


def compute_warpgroups(kernel: Operation) -> int:
    """The warpgroups of a kernel without roles (`@warpgroups(...)`'s counts summed; 1 without any): the
    block that infer-layouts spreads its tiles over (plan-occupancy, cluster-rows)."""
    wg = kernel.attrs.get("warpgroups")
    if isinstance(wg, dict):
        n = sum(v for v in wg.values() if isinstance(v, int))
        if n > 0:
            return n
    return 1


# --- the occupancy plan ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RolePlan:
    """One role of the block: its size (`warpgroups`, or `warps` for an sm_80 compute role) and the
    registers per thread plan-occupancy gives it (setmaxnreg's value for warp-specialized roles)."""

    regs: int
    warpgroups: int | None = None
    warps: int | None = None

    def __post_init__(self) -> None:
        if (self.warpgroups is None) == (self.warps is None):
            raise FactError(None, "a role has 'warpgroups' or 'warps', exactly one of them")

    @property
    def threads(self) -> int:
        if self.warpgroups is not None:
            return WARPGROUP * self.warpgroups
        assert self.warps is not None  # __post_init__
        return WARP * self.warps

    def to_attr(self) -> dict[str, object]:
        size = {"warpgroups": self.warpgroups} if self.warpgroups is not None else {"warps": self.warps}
        return {**size, "regs": self.regs}

    @classmethod
    def from_attr(cls, attr: object) -> RolePlan:
        d = table(attr)
        check_keys(d, ("regs",), ("warpgroups", "warps"))
        return cls(regs=require(d, "regs"), warpgroups=count(d, "warpgroups", 1), warps=count(d, "warps", 1))


class _CountTable:
    """A fact that is a flat table of integer counts: its dataclass fields, printed in order under
    the attribute key ATTR_KEY of the enclosing fact."""

    ATTR_KEY: ClassVar[str] = ""

    def to_attr(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_attr(cls, attr: object) -> Self:
        d = table(attr, cls.ATTR_KEY)
        keys = tuple(f.name for f in fields(cls))
        check_keys(d, keys)
        return cls(*(require(d, k) for k in keys))


@dataclass(frozen=True)
class RegisterBudget(_CountTable):
    """Registers per thread of the computing role at its peak (passes/plan_occupancy.py's docstring)."""

    ATTR_KEY: ClassVar[str] = "budget"

    acc_regs: int
    live_tile_regs: int
    addr_regs: int
    overhead: int

    @property
    def total(self) -> int:
        return self.acc_regs + self.live_tile_regs + self.addr_regs + self.overhead


@dataclass(frozen=True)
class SharedBreakdown(_CountTable):
    """Where a block's shared memory goes: one stage of the ring buffers, the tiles outside them,
    the mbarriers, and the pad that aligns the dynamic shared base."""

    ATTR_KEY: ClassVar[str] = "smem"

    stage_bytes: int
    fixed_bytes: int
    barrier_bytes: int
    align_pad: int


@dataclass(frozen=True)
class OccupancyPlan:
    """The kernel attr `occupancy` that plan-occupancy writes (docs/ir.md, "Recorded facts")."""

    stages: int
    roles: tuple[tuple[str, RolePlan], ...]
    blocks_per_sm: int | None = None
    smem_bytes: int | None = None
    threads: int | None = None
    budget: RegisterBudget | None = None
    smem: SharedBreakdown | None = None

    ATTR = "occupancy"
    KEYS = ("stages", "blocks_per_sm", "smem_bytes", "threads", "roles", "budget", "smem")  # printed order

    def __post_init__(self) -> None:
        if self.stages < 1:
            raise FactError(None, f"'stages' must be at least 1, not {self.stages}")
        names = [n for n, _ in self.roles]
        if not names:
            raise FactError(None, "'roles' is empty")
        for n in names:
            if n not in ROLE_NAMES:
                raise FactError(None, f"unknown role '{n}' (expected {', '.join(ROLE_NAMES)})")
        if len(set(names)) != len(names):
            raise FactError(None, "a role appears twice")
        if self.threads is not None and (self.threads > MAX_THREADS_PER_BLOCK or self.threads % WARP):
            raise FactError(None, f"'threads' must be whole warps, at most {MAX_THREADS_PER_BLOCK}, not {self.threads}")
        if self.blocks_per_sm is not None and self.blocks_per_sm > MAX_BLOCKS_PER_SM:
            raise FactError(None, f"'blocks_per_sm' must be at most {MAX_BLOCKS_PER_SM}, not {self.blocks_per_sm}")
        if self.smem_bytes is not None and self.smem_bytes > SMEM_PER_BLOCK:
            raise FactError(None, f"'smem_bytes' must be at most {SMEM_PER_BLOCK}, not {self.smem_bytes}")

    def role(self, name: str) -> RolePlan | None:
        return next((r for n, r in self.roles if n == name), None)

    def to_attr(self) -> dict[str, object]:
        """The attribute dict, keys in KEYS order (absent facts left out)."""
        out: dict[str, object] = {"stages": self.stages, "blocks_per_sm": self.blocks_per_sm,
                                  "smem_bytes": self.smem_bytes, "threads": self.threads,
                                  "roles": {n: r.to_attr() for n, r in self.roles},
                                  "budget": None if self.budget is None else self.budget.to_attr(),
                                  "smem": None if self.smem is None else self.smem.to_attr()}
        return {k: v for k, v in out.items() if v is not None}

    @classmethod
    def from_attr(cls, attr: object, loc: Loc | None = None) -> OccupancyPlan:
        """The plan an `occupancy` attribute holds; FactError at `loc` when it is malformed."""
        try:
            d = table(attr)
            check_keys(d, ("stages", "roles"), cls.KEYS)
            roles = []
            for name, spec in table(d["roles"], "roles").items():
                try:
                    roles.append((name, RolePlan.from_attr(spec)))
                except FactError as e:
                    raise FactError(None, f"role '{name}': {e.message}") from None
            budget = None if d.get("budget") is None else RegisterBudget.from_attr(d["budget"])
            smem = None if d.get("smem") is None else SharedBreakdown.from_attr(d["smem"])
            return cls(stages=require(d, "stages", 1), roles=tuple(roles), blocks_per_sm=count(d, "blocks_per_sm"),
                       smem_bytes=count(d, "smem_bytes"), threads=count(d, "threads", 1), budget=budget, smem=smem)
        except FactError as e:
            raise malformed(f"{cls.ATTR} attribute", attr, e.message, loc) from None

    @classmethod
    def of(cls, kernel: Operation) -> OccupancyPlan | None:
        """The kernel's plan, None before plan-occupancy; a FactError located at the kernel when its
        `occupancy` attribute is malformed."""
        attr = kernel.attrs.get(cls.ATTR)
        return None if attr is None else cls.from_attr(attr, kernel.loc)
