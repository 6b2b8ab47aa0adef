"""The backend's rule table (backend/rules.py): every op has a rule per target, rules are selected by
(op, target, condition) and never by method names, and a missing or ambiguous rule is a located error."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tkir.backend import rules
from tkir.backend.context import LoweringContext
from tkir.backend.values import LoweringError
from tkir.ir import Loc, Operation
from tkir.ops import OPS

BACKEND = Path(rules.__file__).parent
NOT_LOWERED = {"tk.kernel", "tma.desc"}  # the driver's business (signature, tensor-map parameters)
# wgmma-level ops that only passes for sm_90a create (persistent stream-K, the staged TMA epilogue,
# TMA stores); sm_80 kernels never contain them
SM90_ONLY = {"tk.store_staged", "tk.partial_store", "tk.partial_add", "tma.store"}


def test_every_op_has_a_rule_on_each_target() -> None:
    table = rules.load_rules()
    for name in OPS:
        if name in NOT_LOWERED:
            continue
        targets = {t for r in table.get(name, []) for t in r.targets}
        want = {"sm_90a"} if name in SM90_ONLY else set(rules.TARGETS)
        assert want <= targets, f"{name}: rules for {sorted(targets)}, want {sorted(want)}"


def test_every_rule_names_a_known_op() -> None:
    for name, rs in rules.load_rules().items():
        assert name in OPS, f"rule for unknown op {name}: {[r.name for r in rs]}"


def test_no_rule_is_found_by_method_name_or_super() -> None:
    for path in BACKEND.glob("rules*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                assert node.func.id not in ("getattr", "super"), f"{path.name}:{node.lineno}"
            assert not (isinstance(node, ast.ClassDef) and node.name.endswith("Rules")), path.name


class _Cx:
    target = "sm_90a"

    def describe(self, v) -> str:
        return "x"


def test_missing_rule_is_a_located_error() -> None:
    rules.load_rules()
    op = Operation("tk.no_such_op", loc=Loc("k.tk", 3, 7))
    with pytest.raises(LoweringError) as e:
        rules.select(_Cx(), op)  # type: ignore[arg-type]
    assert "k.tk:3:7" in str(e.value) and "no lowering rule for 'tk.no_such_op'" in str(e.value)


def test_overlapping_rules_are_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(rules.RULES, "tk.test_op", [])

    def a(cx: LoweringContext, op: Operation) -> None: ...

    def b(cx: LoweringContext, op: Operation) -> None: ...

    rules.rule("tk.test_op")(a)
    rules.rule("tk.test_op", when=lambda cx, op: True)(b)
    with pytest.raises(LoweringError, match="all claim 'tk.test_op'"):
        rules.select(_Cx(), Operation("tk.test_op"))  # type: ignore[arg-type]


def test_target_selects_the_rule() -> None:
    table = rules.load_rules()
    mma = {r.targets: r.name for r in table["tk.mma"]}
    assert mma == {("sm_80",): "rules_sm80._op_tk_mma", ("sm_90a",): "rules_wgmma._op_tk_mma"}
