"""The fuzzer's quick run (issue 14): 1,000 generated and mutated inputs, none of which may end in a
traceback, a hang or a crash (docs/fuzzing.md; the long run is `python3 scripts/fuzz.py --count 20000`).

The run is deterministic (seed QUICK_SEED) and is checked not to be vacuous: every input kind is
present, a fair share of the inputs compiles, and each stage (front end, passes, LLVM, PTX, ptxas)
is reached by a fair share of them.
"""

from __future__ import annotations

import random

import pytest

from tkir.tools.fuzz import campaign, corpus, grammar_gen, inputs, mutate, oracle

QUICK_SEED = 14
QUICK_COUNT = 1000
QUICK_JOBS = 2
# the least share of the inputs that must complete each stage (the quick run gives about twice these)
MIN_STAGE_SHARE = {"front": 0.20, "passes": 0.12, "llvm": 0.07, "ptx": 0.07}
MIN_PTXAS = 2  # inputs that went through ptxas (one in inputs.PTXAS_EVERY asks for it; the run gives 4)


@pytest.fixture(scope="module")
def quick_run() -> campaign.Summary:
    return campaign.run(QUICK_COUNT, QUICK_SEED, jobs=QUICK_JOBS)


def test_quick_run_has_no_traceback_hang_or_crash(quick_run: campaign.Summary) -> None:
    s = quick_run
    assert sum(s.classes.values()) >= 1000
    bad = {c: s.classes[c] for c in (*oracle.FAILURES, "unlocated")}
    assert bad == {c: 0 for c in bad} and s.mismatches == 0, s.table()


def test_quick_run_is_not_vacuous(quick_run: campaign.Summary) -> None:
    s = quick_run
    n = sum(s.classes.values())
    assert set(s.by_kind) == {k for k, _ in inputs.KINDS}, s.table()
    assert s.classes["ok"] >= 0.10 * n and s.classes["diagnosed"] >= 0.30 * n, s.table()
    for stage, share in MIN_STAGE_SHARE.items():
        assert s.stages[stage] >= share * n, f"{stage}: {s.stages[stage]} of {n}\n{s.table()}"
    assert s.stages["ptxas"] >= MIN_PTXAS, s.table()
    assert s.checked_in_subprocess >= QUICK_COUNT // campaign.SUBPROCESS_EVERY
    assert s.by_kind["ir-dump"]["ok"] == sum(s.by_kind["ir-dump"].values()), "unmutated IR dumps must compile"


def test_inputs_depend_only_on_seed_and_index() -> None:
    a, b = inputs.make_input(7, 123), inputs.make_input(7, 123)
    assert (a.kind, a.text, a.argv) == (b.kind, b.text, b.argv)
    assert inputs.make_input(8, 123).text != a.text or inputs.make_input(8, 123).argv != a.argv


def test_generators_and_mutators_make_text() -> None:
    rng = random.Random(0)
    programs = [grammar_gen.generate(rng) for _ in range(20)]
    assert all(p.lstrip().startswith(("kernel", "@")) for p in programs)
    seed = corpus.examples()[0].text
    outs = {mutate.mutate(seed, random.Random(i))[0] for i in range(30)}
    assert len(outs) > 20 and seed not in outs
    assert "".join(t for _, t in mutate.tokenize(seed)) == seed  # the tokenizer covers every character


def test_classify() -> None:
    text = "a\nb\n"
    assert oracle.classify(0, None, False, "", "", "f.tk", text) == "ok"
    assert oracle.classify(1, None, False, "", "f.tk:2:3: error: x\n", "f.tk", text) == "diagnosed"
    assert oracle.classify(1, None, False, "", "f.tk:9:3: error: x\n", "f.tk", text) == "unlocated"  # past the end
    assert oracle.classify(1, None, False, "", "tkc compile: error: x\n", "f.tk", text) == "unlocated"
    assert oracle.classify(1, None, False, "", "Traceback (most recent call last):\n", "f.tk", text) == "traceback"
    assert oracle.classify(None, 11, False, "", "", "f.tk", text) == "crash"
    assert oracle.classify(2, None, False, "", "", "f.tk", text) == "crash"
    assert oracle.classify(None, 9, True, "", "", "f.tk", text) == "hang"
