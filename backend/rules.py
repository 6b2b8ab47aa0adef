"""The backend's rule table: which function lowers an op, keyed by (op name, target, condition).

Every lowering rule is a small free function `fn(cx, op)` in one of the `rules_*` modules, registered
with `@rule("tk.load", targets=..., when=...)`. `select` picks the one rule whose op name matches,
whose targets include the kernel's target and whose condition (a predicate on the lowering context
and the op: operand memory space, register layout, ...) holds. No rule: a located error naming the
op, the target and the operand forms. More than one: an internal error (conditions must be
disjoint), which tests/backend/test_backend_rules.py checks over every example.

A rule family is one module; `RULE_MODULES` lists them (importing them fills the table). Families do
not import each other: what two share lives in backend.idioms, backend.exchange, backend.fragments or a
small module of its own, and a family that adds to how `scf.for` lowers a loop registers a loop hook
here (`@loop_hook`) instead of being imported by the scf.for rule.

This module imports no lowering context (backend.context imports it to select rules): a rule's `cx`
is a backend.context.LoweringContext, of which the table itself reads only `RuleContext`.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from tkir.backend.values import LoweringError
from tkir.target import TARGETS

if TYPE_CHECKING:
    from tkir.ir import Operation, Value

RULE_MODULES = ("rules_core", "rules_pipe", "rules_registers", "rules_memory", "rules_sm80", "rules_epilogue",
                "rules_wgmma", "rules_streamk")


class RuleContext(Protocol):
    """What the table reads of the lowering context a rule is selected for."""

    target: str

    def describe(self, v: Value) -> str: ...


# a rule and a condition take (backend.context.LoweringContext, the op)
RuleFn = Callable[[Any, "Operation"], None]
Condition = Callable[[Any, "Operation"], bool]


@dataclass(frozen=True)
class Rule:
    op: str
    fn: RuleFn
    targets: tuple[str, ...]
    when: Condition | None
    family: str

    @property
    def name(self) -> str:
        return f"{self.family}.{self.fn.__name__}"

    def applies(self, cx: RuleContext, op: Operation) -> bool:
        return cx.target in self.targets and (self.when is None or self.when(cx, op))


RULES: dict[str, list[Rule]] = {}


def rule(*ops: str, targets: tuple[str, ...] = TARGETS, when: Condition | None = None) -> Callable[[RuleFn], RuleFn]:
    """Register `fn` as the rule for each op name in `ops` on `targets` where `when(cx, op)` holds."""

    def register(fn: RuleFn) -> RuleFn:
        family = fn.__module__.rsplit(".", 1)[-1]
        for name in ops:
            RULES.setdefault(name, []).append(Rule(name, fn, tuple(targets), when, family))
        return fn

    return register


def load_rules() -> dict[str, list[Rule]]:
    for m in RULE_MODULES:
        importlib.import_module(f"tkir.backend.{m}")
    return RULES


def select(cx: RuleContext, op: Operation) -> Rule:
    """The one rule that lowers `op` here, or a located error that says what has no rule."""
    candidates = RULES.get(op.name, [])
    hits = [r for r in candidates if r.applies(cx, op)]
    if len(hits) == 1:
        return hits[0]
    if len(hits) > 1:
        raise LoweringError(op.loc, f"backend ({cx.target}): rules {', '.join(r.name for r in hits)} all "
                                    f"claim '{op.name}' (internal error: conditions must be disjoint)")
    forms = ", ".join(cx.describe(v) for v in op.operands)
    what = f"'{op.name}'" + (f" on ({forms})" if forms else "")
    raise LoweringError(op.loc, f"backend ({cx.target}): no lowering rule for {what}")


# --- loop hooks: what families add to the lowering of scf.for -------------------------------------


class LoopCarry(Protocol):
    """What a loop hook keeps for one loop while the scf.for rule lowers it: i32 values carried around
    the loop, one phi each (named `hint`), from `initial()` on entry and `latch(cx)` on the back edge;
    `enter(cx, phis)` runs in the loop's header with the phis' names (before the body is lowered),
    `leave(cx)` in its exit block after the loop's results are set."""

    hint: str

    def initial(self) -> list[str]: ...

    def enter(self, cx: Any, phis: list[str]) -> None: ...

    def latch(self, cx: Any) -> list[str]: ...

    def leave(self, cx: Any) -> None: ...


# hook(cx, loop) runs before the loop's preheader branch (the code it emits goes before the loop) and
# returns the loop's LoopCarry, or None where it has nothing to do with this loop
LoopHook = Callable[[Any, "Operation"], "LoopCarry | None"]
LOOP_HOOKS: list[LoopHook] = []


def loop_hook(fn: LoopHook) -> LoopHook:
    """Register `fn` with the scf.for rule (called for every loop, in registration order)."""
    LOOP_HOOKS.append(fn)
    return fn
