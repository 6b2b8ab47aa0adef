"""The backend's rule table: which function lowers an op, keyed by (op name, target, condition).

Every lowering rule is a small free function `fn(cx, op)` in one of the `rules_*` modules, registered
with `@rule("tk.load", targets=..., when=...)`. `select` picks the one rule whose op name matches,
whose targets include the kernel's target and whose condition (a predicate on the lowering context
and the op: operand memory space, register layout, ...) holds. No rule: a located error naming the
op, the target and the operand forms. More than one: an internal error (conditions must be
disjoint), which tests/test_backend_rules.py checks over every example.

A rule family is one module; `RULE_MODULES` lists them (importing them fills the table).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tkir.backend.values import LoweringError

if TYPE_CHECKING:
    from tkir.backend.context import LoweringContext
    from tkir.ir import Operation

TARGETS = ("sm_90a", "sm_80")
RULE_MODULES = ("rules_core", "rules_pipe", "rules_registers", "rules_memory", "rules_sm80", "rules_epilogue",
                "rules_wgmma", "rules_streamk")

RuleFn = Callable[["LoweringContext", "Operation"], None]
Condition = Callable[["LoweringContext", "Operation"], bool]


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

    def applies(self, cx: LoweringContext, op: Operation) -> bool:
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


def select(cx: LoweringContext, op: Operation) -> Rule:
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
