"""The backend's rooms: what rule families share has a home of its own, not a sibling family.

Read with `ast` and as text, over every module of backend/:

* no rule family (rules_*.py) imports another, at module level, inside a function or under
  `if TYPE_CHECKING:` (what two share lives in idioms.py, exchange.py, fragments.py or a small module
  of its own; the scf.for rule reaches other families through loop hooks, backend.rules.LOOP_HOOKS);
* the backend's modules import each other in no cycle, function-level and TYPE_CHECKING imports counted;
* the PTX of barriers and async-proxy fences is spelled only in idioms.py (`grep -rn
  "bar.sync\\|fence.proxy.async" backend/` finds nothing else), and no other module writes a named-barrier
  id: they come from the table NAMED_BARRIERS.

Each check is a function of the sources, run here on backend/ and on a small violating example (so
it can fail). Then: the named-barrier table, and the text of some idiom emitters.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tkir.backend import idioms
from tkir.backend.idioms import NAMED_BARRIERS, NamedBarriers
from tkir.backend.llvm_text import LLVMWriter

BACKEND = Path(__file__).resolve().parents[2] / "backend"
PACKAGE = "tkir.backend"
IDIOMS = "idioms"
# grep's pattern of the done-when criterion: `.` is any character, so `bar_sync` matches it too
SPELLED_ONLY_IN_IDIOMS = re.compile(r"bar.sync|fence.proxy.async")
# a named-barrier instruction with a literal id: `bar.sync 8`, `bar.arrive 9, 256`, `barrier.sync 1`
LITERAL_BARRIER_ID = re.compile(r"\b(?:bar|barrier)\.(?:sync|arrive|red)(?:\.\w+)*\s+\d")
BARRIER_EMITTERS = ("named_barrier_sync", "named_barrier_arrive")
ID_HINTS = ("barid", "turn_bar")  # the LLVM value names of computed barrier ids


def _sources() -> dict[str, str]:
    """Module name (relative to the package) -> source, for every module of backend/."""
    return {p.stem: p.read_text(encoding="utf-8") for p in sorted(BACKEND.glob("*.py"))}


def imports_of(name: str, source: str, modules: set[str]) -> set[str]:
    """The backend modules `name` imports anywhere in its source (module level, functions, TYPE_CHECKING)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative to the package backend/ is
                base = ".".join([PACKAGE, *([base] if base else [])])
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        else:
            continue
        for t in targets:
            if t.startswith(PACKAGE + "."):
                mod = t[len(PACKAGE) + 1:].split(".")[0]
                if mod in modules and mod != name:
                    out.add(mod)
    return out


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    return {n: imports_of(n, s, set(sources)) for n, s in sources.items()}


def family_imports(sources: dict[str, str]) -> list[tuple[str, str]]:
    """(family, family it imports) for every import of one rules_* module by another."""
    graph = import_graph(sources)
    return sorted((a, b) for a, bs in graph.items() for b in bs
                  if a.startswith("rules_") and b.startswith("rules_"))


def import_cycles(sources: dict[str, str]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph = import_graph(sources)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for u in sorted(graph[v]):
            if u not in index:
                visit(u)
                low[v] = min(low[v], low[u])
            elif u in on:
                low[v] = min(low[v], index[u])
        if low[v] == index[v]:
            comp = []
            while True:
                u = stack.pop()
                on.discard(u)
                comp.append(u)
                if u == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def idiom_spellings(sources: dict[str, str]) -> list[str]:
    """`module:line` of every barrier / async-proxy-fence spelling outside idioms.py (code, comments and
    docstrings alike, as grep sees them)."""
    return [f"{name}:{i}" for name, src in sources.items() if name != IDIOMS
            for i, line in enumerate(src.splitlines(), 1) if SPELLED_ONLY_IN_IDIOMS.search(line)]


def literal_barrier_ids(sources: dict[str, str]) -> list[str]:
    """`module:line` of every named-barrier id written outside the table: a barrier instruction with a
    number in any string, a barrier emitter called with a number, or an id computed as `add i32 x, N`
    under a barrier id's name."""
    out = []
    for name, src in sources.items():
        if name == IDIOMS:
            continue
        out += [f"{name}:{i}" for i, line in enumerate(src.splitlines(), 1) if LITERAL_BARRIER_ID.search(line)]
        for node in ast.walk(ast.parse(src)):
            if not isinstance(node, ast.Call):
                continue
            fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if fn in BARRIER_EMITTERS and len(node.args) > 1 and _is_number(node.args[1]):
                out.append(f"{name}:{node.lineno}")
            hint = node.args[1] if fn == "op" and len(node.args) > 1 else None
            if isinstance(hint, ast.Constant) and hint.value in ID_HINTS:
                out.append(f"{name}:{node.lineno}")
    return out


def _is_number(e: ast.expr) -> bool:
    if isinstance(e, ast.Constant):
        return isinstance(e.value, int)
    if isinstance(e, ast.BinOp):
        return _is_number(e.left) and _is_number(e.right)
    return isinstance(e, ast.UnaryOp) and _is_number(e.operand)


# --- the checks on backend/ -------------------------------------------------------------------------


def test_the_scan_sees_the_rule_families_and_their_homes() -> None:
    sources = _sources()
    assert {"rules_core", "rules_pipe", "rules_memory", "rules_registers", "rules_sm80", "rules_wgmma",
            "rules_epilogue", "rules_streamk", "idioms", "exchange", "rules", "context"} <= set(sources)
    graph = import_graph(sources)
    assert "rules" in graph["rules_core"] and "idioms" in graph["rules_pipe"] and "exchange" in graph["rules_memory"]


def test_no_rule_family_imports_another() -> None:
    assert family_imports(_sources()) == []


def test_backend_imports_form_no_cycle() -> None:
    assert import_cycles(_sources()) == []


def test_barriers_and_proxy_fences_are_spelled_only_in_idioms() -> None:
    sources = _sources()
    assert idiom_spellings(sources) == []
    assert SPELLED_ONLY_IN_IDIOMS.search(sources[IDIOMS])  # the scan does find them where they are


def test_named_barrier_ids_come_from_the_table() -> None:
    assert literal_barrier_ids(_sources()) == []


# --- each check fails on a source that breaks its rule ----------------------------------------------


def test_a_family_importing_a_family_is_found_at_any_depth() -> None:
    for src in ("from tkir.backend.rules_b import f\n",
                "def g():\n    from tkir.backend.rules_b import f\n",
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tkir.backend import rules_b\n",
                "from .rules_b import f\n"):
        assert family_imports({"rules_a": src, "rules_b": "", "idioms": ""}) == [("rules_a", "rules_b")], src
    assert family_imports({"rules_a": "from tkir.backend.idioms import f\n", "rules_b": "", "idioms": ""}) == []


def test_a_lazy_import_cycle_is_found() -> None:
    sources = {"a": "from tkir.backend import b\n", "b": "def f():\n    import tkir.backend.a\n", "c": ""}
    assert import_cycles(sources) == [["a", "b"]]
    assert import_cycles({"a": "from tkir.backend import b\n", "b": "", "c": ""}) == []


def test_a_barrier_spelled_outside_idioms_is_found() -> None:
    sources = {IDIOMS: "", "rules_x": 'w.asm("void", ["bar.sync 0;"], [], [])\n',
               "rules_y": "# before wgmma: fence.proxy.async\n", "rules_z": "bar_sync(w, b, 128)\n",
               "rules_ok": "named_barrier_sync(w, b, 128)\nfence_async_proxy(w)\n"}
    assert idiom_spellings(sources) == ["rules_x:1", "rules_y:1", "rules_z:1"]


def test_a_literal_barrier_id_is_found() -> None:
    sources = {IDIOMS: 'X = "bar.sync 8, 256;"\n',
               "rules_x": 'w.asm("void", ["bar.arrive 9, 256;"], [], [])\n',
               "rules_y": "named_barrier_sync(w, 8, 128)\nnamed_barrier_arrive(cx.w, 8 + 1, 256)\n",
               "rules_z": 'bar = w.op(f"add i32 {wg}, 1", "barid")\n',
               "rules_ok": 'named_barrier_sync(w, NAMED_BARRIERS.id("role"), 128)\n'}
    assert literal_barrier_ids(sources) == ["rules_x:1", "rules_y:1", "rules_y:2", "rules_z:1"]


# --- the named-barrier table -----------------------------------------------------------------------


def test_the_table_gives_no_id_twice_and_stays_within_the_hardware() -> None:
    ids = [i for use in NAMED_BARRIERS.uses.values() for i in use.ids]
    assert len(ids) == len(set(ids))
    assert all(0 <= i < idioms.NAMED_BARRIER_IDS for i in ids)
    assert NAMED_BARRIERS.id("block") == 0  # __syncthreads: llvm.nvvm.barrier0 is bar.sync 0
    assert all(use.reason for use in NAMED_BARRIERS.uses.values())


def test_the_table_keeps_the_ids_the_kernels_use() -> None:
    """The emitted PTX names these ids (the md5 lists pin it): a use moving is a code change."""
    assert {n: (u.first, u.count) for n, u in NAMED_BARRIERS.uses.items()} == {
        "block": (0, 1), "warpgroup": (1, 7), "role": (8, 1), "turn": (9, 7)}


def test_two_uses_never_share_an_id() -> None:
    table = NamedBarriers()
    table.reserve("block", 1, "the CTA", first=0)
    table.reserve("a", 4, "four ids", first=1)
    with pytest.raises(ValueError, match="shares ids with a"):
        table.reserve("b", 2, "overlaps a", first=4)
    with pytest.raises(ValueError, match="reserved twice"):
        table.reserve("a", 1, "again")
    assert table.reserve("c", 3, "the lowest free run").ids == range(5, 8)


def test_over_allocation_is_an_error() -> None:
    table = NamedBarriers(total=16)
    table.reserve("block", 1, "the CTA", first=0)
    table.reserve("many", 14, "ids 1..14")
    with pytest.raises(ValueError, match="a CTA has 16"):
        table.reserve("two", 2, "only id 15 is left")
    with pytest.raises(ValueError, match="a CTA has 16"):
        table.reserve("past", 1, "id 16", first=16)
    assert table.reserve("last", 1, "id 15").first == 15
    with pytest.raises(ValueError, match="has 14 ids"):
        table.id("many", 14)
    with pytest.raises(ValueError, match="asks for 0"):
        table.reserve("none", 0, "no id")


def test_a_computed_id_adds_the_uses_first_id() -> None:
    w = LLVMWriter()
    name = NAMED_BARRIERS.emit_id(w, "turn", "%wg", "turn_bar")
    assert w.lines == [f"  {name} = add i32 %wg, 9"]


# --- the idiom emitters' text ----------------------------------------------------------------------


def _emitted(emit) -> list[str]:
    w = LLVMWriter()
    emit(w)
    return w.lines


def test_barrier_emitters() -> None:
    assert _emitted(idioms.block_barrier) == ["  call void @llvm.nvvm.barrier0()"]
    assert _emitted(lambda w: idioms.named_barrier_sync(w, NAMED_BARRIERS.id("role"), 256)) == [
        '  call void asm sideeffect "bar.sync 8, 256;", "~{memory}"()']
    assert _emitted(lambda w: idioms.named_barrier_sync(w, "%id", 128)) == [
        '  call void asm sideeffect "bar.sync $0, 128;", "r,~{memory}"(i32 %id)']
    assert _emitted(lambda w: idioms.named_barrier_arrive(w, "%id", 256)) == [
        '  call void asm sideeffect "bar.arrive $0, 256;", "r,~{memory}"(i32 %id)']
    assert _emitted(idioms.cluster_barrier) == [
        '  call void asm sideeffect "barrier.cluster.arrive.release;\\0Abarrier.cluster.wait.acquire;", "~{memory}"()']


def test_fence_and_group_emitters() -> None:
    assert _emitted(idioms.fence_async_proxy) == [
        '  call void asm sideeffect "fence.proxy.async.shared::cta;", "~{memory}"()']
    assert _emitted(lambda w: idioms.fence_acq_rel(w, "gpu")) == [
        '  call void asm sideeffect "fence.acq_rel.gpu;", "~{memory}"()']
    assert _emitted(lambda w: idioms.cp_async_wait(w, 2)) == [
        '  call void asm sideeffect "cp.async.wait_group 2;", "~{memory}"()']
    assert _emitted(lambda w: idioms.bulk_wait(w, 1, read=True)) == [
        '  call void asm sideeffect "cp.async.bulk.wait_group.read 1;", "~{memory}"()']
    assert _emitted(lambda w: idioms.bulk_wait(w, 0)) == [
        '  call void asm sideeffect "cp.async.bulk.wait_group 0;", "~{memory}"()']
    assert _emitted(idioms.wgmma_commit_group) == ["  call void @llvm.nvvm.wgmma.commit_group.sync.aligned()"]


def test_mbarrier_emitters_follow_the_target() -> None:
    assert _emitted(lambda w: idioms.mbarrier_arrive(w, "sm_90a", "%b")) == [
        '  call void asm sideeffect "mbarrier.arrive.shared::cta.b64 _, [$0];", "r,~{memory}"(i32 %b)']
    assert _emitted(lambda w: idioms.mbarrier_arrive(w, "sm_80", "%b")) == [
        '  call void asm sideeffect "{\\0A.reg .b64 state;\\0Ambarrier.arrive.shared.b64 state, [$0];\\0A}", '
        '"r,~{memory}"(i32 %b)']
    assert _emitted(lambda w: idioms.mbarrier_init(w, "sm_80", "%b", 4)) == [
        '  call void asm sideeffect "mbarrier.init.shared.b64 [$0], $1;", "r,r,~{memory}"(i32 %b, i32 4)']


def test_mbarrier_wait_is_a_loop_around_one_test() -> None:
    """CHECK-style: the wait block tests the phase, loops back while it has not completed."""
    for target, test in (("sm_90a", "try_wait.parity.shared::cta"), ("sm_80", "test_wait.parity.shared")):
        lines = _emitted(lambda w, target=target: idioms.mbarrier_wait_parity(w, target, "%bar", "%ph"))
        assert re.fullmatch(r"  br label %(wait\.\d+)", lines[0])
        loop = lines[0].split("%")[1]
        assert lines[1] == f"{loop}:"
        assert f"mbarrier.{test}.b64 p, [$1], $2;" in lines[2] and "(i32 %bar, i32 %ph)" in lines[2]
        done = lines[2].split(" = ")[0].strip()
        assert lines[3].endswith(f"icmp eq i32 {done}, 0")
        again = lines[3].split(" = ")[0].strip()
        ready = re.fullmatch(rf"  br i1 {re.escape(again)}, label %{re.escape(loop)}, label %(ready\.\d+)",
                             lines[4])
        assert ready and lines[5] == f"{ready[1]}:" and len(lines) == 6


def test_the_tied_wgmma_wait_returns_the_values_after_it() -> None:
    w = LLVMWriter()
    out = idioms.wgmma_wait_group_tied(w, ["%a", "%b"], 1)
    assert w.lines[0].endswith('asm sideeffect "wgmma.wait_group.sync.aligned 1;", "=f,=f,0,1,~{memory}"'
                               "(float %a, float %b)")
    assert [ln.split(" = ")[0].strip() for ln in w.lines[1:]] == out
