"""The fuzzer's quick run: 1,000 generated and mutated inputs, none of which may end in a traceback, a
hang, a crash, an accepted-wrong (a protocol edit or an out-of-range value that compiled) or a
ptxas-rejected (docs/fuzzing.md; the long run is `python3 scripts/fuzz.py --count 20000`).

The run is deterministic (seed QUICK_SEED) and is checked not to be vacuous: every input kind is
present, a fair share of the inputs compiles, each stage (front end, passes, LLVM, PTX, ptxas) is
reached by a fair share of them, and the known-wrong inputs are all refused.
"""

from __future__ import annotations

import random

import pytest

from tkir.tools.fuzz import campaign, corpus, grammar_gen, inputs, limits, mutate, oracle, protocol

QUICK_SEED = 14
QUICK_COUNT = 1000
QUICK_JOBS = 2
# the least share of the inputs that must complete each stage (the quick run gives about twice these)
MIN_STAGE_SHARE = {"front": 0.20, "passes": 0.12, "llvm": 0.07, "ptx": 0.07}
# the least share of the inputs that reached PTX that must go through ptxas too: one in inputs.PTXAS_SHARE of
# those that ask for PTX asks for a cubin (some ask for tkir, llvm or launch), so about 1/6 of them
MIN_PTXAS_SHARE = 0.10
MIN_KNOWN_WRONG = 40  # known-wrong inputs (protocol edits, out-of-range values) the run must refuse


@pytest.fixture(scope="module")
def quick_run() -> campaign.Summary:
    return campaign.run(QUICK_COUNT, QUICK_SEED, jobs=QUICK_JOBS)


def test_quick_run_has_no_traceback_hang_or_crash(quick_run: campaign.Summary) -> None:
    s = quick_run
    assert sum(s.classes.values()) >= 1000
    bad = {c: s.classes[c] for c in (*oracle.FAILURES, "unlocated")}
    assert {"accepted-wrong", "ptxas-rejected"} <= set(oracle.FAILURES)
    assert bad == {c: 0 for c in bad} and s.mismatches == 0, s.table()


def test_quick_run_is_not_vacuous(quick_run: campaign.Summary) -> None:
    s = quick_run
    n = sum(s.classes.values())
    assert set(s.by_kind) == {k for k, _ in inputs.KINDS}, s.table()
    assert s.classes["ok"] >= 0.10 * n and s.classes["diagnosed"] >= 0.30 * n, s.table()
    for stage, share in MIN_STAGE_SHARE.items():
        assert s.stages[stage] >= share * n, f"{stage}: {s.stages[stage]} of {n}\n{s.table()}"
    assert s.stages["ptxas"] >= MIN_PTXAS_SHARE * s.stages["ptx"], s.table()
    # every protocol edit is refused (an accepted one would be an accepted-wrong, failing the test above)
    assert s.by_kind["ir-protocol"]["diagnosed"] == sum(s.by_kind["ir-protocol"].values()), s.table()
    assert s.by_kind["ir-protocol"]["diagnosed"] + s.by_kind["param-limits"]["diagnosed"] >= MIN_KNOWN_WRONG
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


def test_every_protocol_edit_applies_to_some_pipeline() -> None:
    """Each named edit finds a site in some pipelined dump of the corpus and changes the text."""
    pipelined = [d for d in corpus.dumps() if protocol.has_pipeline(d.text)]
    for name, edit in protocol.EDITS.items():
        hits = 0
        for i, d in enumerate(pipelined[::3]):
            lines = d.text.split("\n")
            out = edit(lines, random.Random(i))
            hits += out is not None and out != lines
        assert hits, name


def test_known_wrong_inputs() -> None:
    """Protocol edits are always known wrong; a limit value outside i32 is known wrong, 1 is not."""
    found = [inputs.make_input(5, i) for i in range(400)]
    assert all(f.meta["wrong"] for f in found if f.kind == "ir-protocol")
    assert any(f.kind == "param-limits" and f.meta["wrong"] for f in found)
    assert any(f.kind == "param-limits" and not f.meta["wrong"] for f in found)
    assert not limits.in_i32(2 ** 31) and limits.in_i32(-(2 ** 31)) and not limits.in_i32(-(2 ** 31) - 1)
    assert ("persistent", "group_m") in limits.int_params() and ("stream-k", "min_iters") in limits.int_params()


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
    assert oracle.classify(0, None, False, "", "", "f.tk", text, wrong=True) == "accepted-wrong"
    assert oracle.classify(1, None, False, "", "f.tk:1:1: error: x\n", "f.tk", text, wrong=True) == "diagnosed"
    assert oracle.classify(1, None, False, "", "tkc compile: error: ptxas failed for sm_90a:\n", "f.tk",
                           text) == "ptxas-rejected"
    assert oracle.classify(1, None, False, "", "tkc tune: error: --size M=0: a size is a positive integer\n",
                           "f.tk", text, option="--size") == "diagnosed"
    assert oracle.classify(2, None, False, "", "tkc compile: error: --group-m was removed\n", "f.tk", text,
                           option="--group-m") == "diagnosed"
    assert oracle.classify(2, None, False, "", "tkc compile: error: --group-m was removed\n", "f.tk", text) == "crash"
