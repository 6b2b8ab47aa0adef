"""The verifier's pipeline rules (tkir/verify_pipeline.py): single edits of the mbarrier pipeline that
used to compile to PTX with exit 0 are located errors, and the pipelines the passes write verify.

Each case edits the IR after the default pipeline (what `tkc compile examples/gemm.tk` prints) and
expects `g.tkir:LINE:COL: error: ...` at the op the edit made wrong (or, for a deadlock, at the wait
that never passes). The first nine are an audit's edits: a copy's and an expect's byte count, the
empty barrier's arrival count, the phase parity modulus, the ring index modulus, a deleted wait, a
deleted arrive, a dropped `deferred`, TMA `elem_strides`; then the release of stage 0 predicated off,
which hangs every GEMM with more k-iterations than stages.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import tkir
import tkir.verify_pipeline as vp
from tkir.diagnostics import CompileError
from tkir.parser import parse_module
from tkir.tools.examples import load_companion
from tkir.verifier import VerifyError, verify

GEMM_CONSTS = load_companion("examples/gemm.tk").DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
GEMM = tkir.compile("examples/gemm.tk").ir
# attention_fwd.tk's BQ and BKV are auto; the edits below are written against its 64 x 64 tile (one consumer warpgroup)
ATTENTION_TILE = {"BQ": 64, "BKV": 64}
ATTENTION = tkir.compile("examples/attention_fwd.tk", **ATTENTION_TILE).ir
BASED = tkir.compile("examples/based.tk").ir  # pipeline-cp-async: cp.async groups, no mbarriers
STREAM_K = tkir.compile("examples/gemm.tk", **{**GEMM_CONSTS, "SK": 1}).ir  # a second producer and consumer loop: the split tiles
PERSISTENT = tkir.compile("examples/attention_fwd.tk", PERSIST=1, **ATTENTION_TILE).ir  # q refilled per tile after its release

# the consumer's mma, made synchronous (no wgmma group left in flight): its stage may be released at once
ASYNC_MMA = 'major = "MN"}], async_groups = 1} : rt<f32, 128, 256'
SYNC_MMA = 'major = "MN"}]} : rt<f32, 128, 256'
SKIP_STAGE_0 = ("        %nz = arith.cmp %s.1, %c0 {pred = ne} : i1\n        scf.if %nz {\n"
                "          pipe.arrive %empty, %s.1\n          scf.yield\n        }\n")
DEFERRED = "        pipe.arrive %empty, %s.1 {deferred = true}\n"


def _where(text: str, marker: str) -> tuple[int, int]:
    """(line, column) of the op on the first line containing `marker` (after a result's `= `)."""
    for i, line in enumerate(text.splitlines(), 1):
        if marker in line:
            body = line.lstrip()
            return i, len(line) - len(body) + 1 + (body.index("=") + 2 if body.startswith("%") else 0)
    raise AssertionError(marker)


# (id, base text, [(old, new), ...], marker of the line the error is at, words of the message)
CASES = [
    ("copy-bytes", GEMM, [("desc = @A_tma, boxes = 1, bytes = 16384}", "desc = @A_tma, boxes = 1, bytes = 8192}")],
     "pipe.copy %a_s", "'pipe.copy' has bytes = 8192, but it fills %a_s (st<bf16, 128, 64, swizzle=128, "
                       "align=1024>), 16384 B"),
    ("expect-bytes", GEMM, [("pipe.expect %full, %s {bytes = 49152}", "pipe.expect %full, %s {bytes = 32768}")],
     "pipe.expect %full", "'pipe.expect' on %full announces 32768 bytes, but the 2 copies completing on it "
                          "deliver 49152 (%a_s: 16384, %b_s: 32768)"),
    ("empty-count", GEMM, [("%empty = pipe.barriers {count = 8}", "%empty = pipe.barriers {count = 4}")],
     "%empty = pipe.barriers", "'pipe.barriers' %empty has count = 4, but a phase of %empty[0] receives more "
                               "arrivals"),
    ("parity-modulus", GEMM, [("%phase.1 = arith.rem %round.1, %two", "%phase.1 = arith.rem %round.1, %nstages")],
     "pipe.wait %full", "'pipe.wait' on %full[0] in iteration 8 waits at parity 2, but a phase parity is 0 or 1 "
                        "(iteration 8 is in round 2 of the 4-stage ring: parity 0)"),
    ("ring-modulus", GEMM, [("%s = arith.rem %it, %nstages", "%s = arith.rem %it, %two")],
     "pipe.wait %empty", "'pipe.wait' in iteration 2 uses stage 0 of %empty, but a 4-stage ring holds iteration 2 "
                         "in stage 2 mod 4 = 2"),
    ("deleted-wait", GEMM, [("        pipe.wait %full, %s.1, %phase.1\n", "")],
     "%acc.3 = tk.mma", "'tk.mma' in the consumer role (2 warpgroups) reads stage 0 of %a without waiting on "
                        "%full[0], the barrier its copies complete on"),
    ("deleted-arrive", GEMM, [(DEFERRED, "")],
     "pipe.wait %empty", "deadlock: 'pipe.wait' on %empty[0] at parity 0 in the producer role (1 warpgroup) never "
                         "passes: phase 1 of that stage has 0 of its 8 arrivals"),
    ("dropped-deferred", GEMM, [(DEFERRED, "        pipe.arrive %empty, %s.1\n")],
     "pipe.arrive %empty", "'pipe.arrive' releases stage 0 of %a (%empty[0]) while the wgmma group of the 'tk.mma' "
                           "at line"),
    ("elem-strides", GEMM, [("box = [64, 128], elem_strides = [1, 1]", "box = [64, 128], elem_strides = [2, 1]")],
     "tma.desc @A_tma", "@A_tma has elem_strides = [2, 1], but tkir's copies fill dense tiles: every element "
                        "stride must be 1"),
    ("stage-0-release-skipped", GEMM, [(ASYNC_MMA, SYNC_MMA), (DEFERRED, SKIP_STAGE_0)],
     "pipe.wait %empty", "deadlock: 'pipe.wait' on %empty[0] at parity 0 in the producer role (1 warpgroup) never "
                         "passes: phase 1 of that stage has 0 of its 8 arrivals"),
    # more edits of the same facts
    ("deleted-producer-wait", GEMM, [("        pipe.wait %empty, %s, %free_phase\n", "")],
     "pipe.wait %full", "'pipe.wait' on %full[0] in iteration 0 (parity 0) finds 10 phases of that stage completed "
                        "where the consumer role (2 warpgroups) expects 1"),
    ("deleted-expect", GEMM, [("        pipe.expect %full, %s {bytes = 49152}\n", "")],
     "pipe.copy %a_s", "'pipe.copy' completes 16384 bytes on %full[0], but no 'pipe.expect' announced them"),
    ("expect-too-many-bytes", GEMM, [("pipe.expect %full, %s {bytes = 49152}", "pipe.expect %full, %s {bytes = 65536}")],
     "pipe.expect %full", "announces 65536 bytes, but the 2 copies completing on it deliver 49152"),
    ("parity-per-iteration", GEMM, [("%phase.1 = arith.rem %round.1, %two", "%phase.1 = arith.rem %it.1, %two")],
     "pipe.wait %full", "'pipe.wait' on %full[1] in iteration 1 waits at parity 1, but in iteration 0 it waited at "
                        "parity 0: the parity flips once per round of the 4-stage ring"),
    ("parity-constant", GEMM, [("%two = arith.const {value = 2}", "%two = arith.const {value = 3}")],
     "pipe.wait %empty", "'pipe.wait' on %empty[0] in iteration 8 waits at parity -1, but a phase parity is 0 or 1"),
    ("ring-3-of-4-stages", GEMM, [("%nstages = arith.const {value = 4}", "%nstages = arith.const {value = 3}")],
     "pipe.wait %empty", "'pipe.wait' in iteration 3 uses stage 0 of %empty, but a 4-stage ring holds iteration 3 "
                         "in stage 3 mod 4 = 3"),
    ("ring-index-out-of-range", GEMM, [("%nstages = arith.const {value = 4}", "%nstages = arith.const {value = 5}")],
     "pipe.wait %empty", "'pipe.wait' uses stage 4 of %empty, which has 4 (0..3)"),
    ("empty-count-too-high", GEMM, [("%empty = pipe.barriers {count = 8}", "%empty = pipe.barriers {count = 16}")],
     "%empty = pipe.barriers", "'pipe.barriers' %empty has count = 16, but a phase of %empty[0] receives only 8 "
                               "arrivals: the producer role (1 warpgroup) waits for it forever"),
    ("full-count", GEMM, [("%full = pipe.barriers {count = 1}", "%full = pipe.barriers {count = 2}")],
     "%full = pipe.barriers", "'pipe.barriers' %full has count = 2, but a phase of %full[0] receives only 1 "
                              "arrivals"),
    ("deferred-in-an-if", GEMM, [(DEFERRED, SKIP_STAGE_0.replace("%s.1\n", "%s.1 {deferred = true}\n"))],
     "pipe.arrive %empty", "a deferred 'pipe.arrive' releases the previous iteration's stage of its loop: it must "
                           "sit directly in an scf.for body"),
    # attention: a ring per tile (early-release), rotated loops (overlap-mma), a one-shot barrier for q
    ("attention-last-v-release", ATTENTION, [("      pipe.arrive %empty_v, %37 {tile = \"v\"}\n", "")],
     "%empty_v = pipe.barriers", "stage 1 of %v was filled 3 times (%full_v[1]) but released twice "
                                 "(%empty_v[1]) when the roles finish"),
    ("attention-release-before-mma-wait",
     ATTENTION, [("        %s_done.2 = tk.mma_wait %s.7 : rt<f32, 64, 64, layout={kind = wgmma_acc, wg = 1}>\n"
                  "        pipe.arrive %empty_k, %s.6 {tile = \"k\"}\n",
                  "        pipe.arrive %empty_k, %s.6 {tile = \"k\"}\n"
                  "        %s_done.2 = tk.mma_wait %s.7 : rt<f32, 64, 64, layout={kind = wgmma_acc, wg = 1}>\n")],
     "pipe.arrive %empty_k, %s.6", "'pipe.arrive' releases stage 1 of %k (%empty_k[1]) while the wgmma group of "
                                   "the 'tk.mma' at line"),
    ("attention-deleted-q-wait", ATTENTION, [("    pipe.wait %once, %c0, %c0\n", "")],
     "%s.1 = tk.mma %q", "'tk.mma' in the consumer role (1 warpgroup) reads %q without waiting on %once[0]"),
    ("attention-empty-k-count", ATTENTION, [("%empty_k = pipe.barriers {count = 4}",
                                             "%empty_k = pipe.barriers {count = 8}")],
     "%empty_k = pipe.barriers", "'pipe.barriers' %empty_k has count = 8, but a phase of %empty_k[0] receives "
                                 "only 4 arrivals"),
    ("parity-divided-by-zero", GEMM, [("%phase.1 = arith.rem %round.1, %two", "%phase.1 = arith.rem %two, %round.1")],
     "pipe.wait %full", "'pipe.wait' parity %phase.1 is computed with a division by zero"),
    # paths the long runs do not take: attention's first key block masked (every size 1), stream-K's split tiles
    ("attention-masked-first-block-release", ATTENTION, [("        pipe.arrive %empty_k, %it.2 {tile = \"k\"}\n", "")],
     "%empty_k = pipe.barriers", "stage 0 of %k was filled once (%full_k[0]) but released 0 times (%empty_k[0])"),
    ("stream-k-split-tile-expect", STREAM_K, [("        pipe.expect %full, %s.1 {bytes = 49152}\n", "")],
     "pipe.copy %a_s.1", "'pipe.copy' completes 16384 bytes on %full[0], but no 'pipe.expect' announced them"),
    ("persistent-q-refilled-unreleased", PERSISTENT, [("      pipe.wait %once_empty, %c0, %once_free\n", "")],
     "%s.9 = tk.mma %q", "'tk.mma' in the consumer role (1 warpgroup) reads %q after a copy refilled it (the role "
                         "waited for fill 1 on %once[0]; fill 2 has landed since)"),
    ("persistent-q-parity-modulus", PERSISTENT, [("%two = arith.const {value = 2}", "%two = arith.const {value = 3}")],
     "pipe.wait %once_empty", "'pipe.wait' on %once_empty[0] waits at parity -1, but a phase parity is 0 or 1"),
    ("loop-stages", PERSISTENT, [("scf.for %c0, %kv_blocks, %c1 {stages = 2} {",
                                  "scf.for %c0, %kv_blocks, %c1 {stages = 3} {")],
     "scf.for %c0, %kv_blocks", "'scf.for' has stages = 3, but the ring %empty_k its body uses has 2 stages"),
    # based: every thread copies its stages with cp.async, commits one group per stage and waits for them
    ("based-wait-pending-1", BASED, [("pipe.async_wait {pending = 0}", "pipe.async_wait {pending = 1}")],
     "%6 = tk.mma %q_s", "'tk.mma' reads stage 0 of %q while the cp.async copy into it at line 28 is in flight (its "
                        "group is one of the 2 committed groups still in flight)"),
    ("based-next-stage-is-this-one", BASED, [("%s_next = arith.rem %k_next, %cp_stages",
                                              "%s_next = arith.rem %j, %cp_stages")],
     "%6 = tk.mma %q_s", "'tk.mma' reads stage 0 of %q while the cp.async copy into it at line 39 is in flight"),
    ("based-commit-other-stage", BASED, [("pipe.async_commit %s_next", "pipe.async_commit %s")],
     "pipe.async_commit %s", "'pipe.async_commit' closes the group that fills stage 0, but the cp.async copy at "
                             "line 39 fills another stage"),
    ("based-copy-into-another-tile", BASED, [("pipe.async_copy %more, %k, %s_next", "pipe.async_copy %more, %q, %s_next")],
     "%6 = tk.mma %q_s", "'tk.mma' reads stage 1 of %k, which no cp.async copy has filled"),
    ("based-ring-index", BASED, [("%cp_stages = arith.const {value = 2}", "%cp_stages = arith.const {value = 3}")],
     "pipe.async_copy %more, %q", "'pipe.async_copy' uses stage 2 of %q, which has 2 (0..1)"),
]


def _edit(base: str, edits: list[tuple[str, str]]) -> str:
    text = base
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


@pytest.mark.parametrize(("base", "edits", "marker", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_broken_pipeline_is_a_located_error(base: str, edits: list, marker: str, words: str) -> None:
    text = _edit(base, edits)
    with pytest.raises(CompileError) as info:
        verify(parse_module(text, "g.tkir"))
    line, col = _where(text, marker)
    first = info.value.format().splitlines()[0]
    assert first.startswith(f"g.tkir:{line}:{col}: error: "), first
    assert words in first, first


@pytest.mark.xfail(strict=True, reason="verify_pipeline's stream-K run (STREAM_K_SIZE on NUM_SMS SMs) splits no tile "
                   "at min_iters = 32, so the split tiles' protocol goes unchecked there; SKI = 32 is what "
                   "`-D SK=1` now takes in gemm.tk (auto)")
def test_a_broken_split_tile_is_refused_at_min_iters_32() -> None:
    """The stream-k-split-tile-expect edit above on gemm.tk at SK = 1, SKI = 32."""
    base = tkir.compile("examples/gemm.tk", **{**GEMM_CONSTS, "SK": 1, "SKI": 32}).ir
    text = _edit(base, [("        pipe.expect %full, %s.1 {bytes = 49152}\n", "")])
    with pytest.raises(CompileError, match="no 'pipe.expect' announced them"):
        verify(parse_module(text, "g.tkir"))


def test_the_audits_edits_fail_to_compile_from_the_command_line(tmp_path) -> None:
    """The same edits through `tkc compile FILE.tkir --passes=verify --emit ptx`: exit 1, the located
    message on stderr, no PTX written (they used to compile with exit 0)."""
    for name, base, edits, marker, words in CASES[:10]:
        f = tmp_path / f"{name}.tkir"
        text = _edit(base, edits)
        f.write_text(text)
        out = tmp_path / f"{name}.ptx"
        r = subprocess.run([sys.executable, "-m", "tkir.cli", "compile", str(f), "--passes=verify", "--emit", "ptx",
                            "-o", str(out)], capture_output=True, text=True)
        line, col = _where(text, marker)
        assert r.returncode == 1, (name, r.stderr[:300])
        assert r.stderr.startswith(f"{f}:{line}:{col}: error: ") and words in r.stderr, (name, r.stderr[:300])
        assert "Traceback" not in r.stderr and not out.exists(), name


def test_a_synchronous_mma_may_release_its_stage_at_once() -> None:
    """The accepted twin of the dropped-`deferred` case: with no wgmma group left in flight the release
    need not wait for the next iteration."""
    verify(parse_module(_edit(GEMM, [(ASYNC_MMA, SYNC_MMA), (DEFERRED, "        pipe.arrive %empty, %s.1\n")]),
                        "g.tkir"))


# the pipelines the passes write, with what the model must see of them: (source, consts, options)
PIPELINES = {
    "gemm": ("examples/gemm.tk", {}, {}),
    "gemm-stream-k": ("examples/gemm.tk", {**GEMM_CONSTS, "SK": 1}, {}),
    "gemm-bm64": ("examples/gemm.tk", {**GEMM_CONSTS, "BM": 64}, {}),
    "gemm-6-stages": ("examples/gemm.tk", {**GEMM_CONSTS, "STAGES": 6, "BN": 128}, {}),
    "gemm-sm80-producers": ("examples/gemm.tk", {}, {"target": "sm_80", "passes": (
        "canonicalize,legalize-mma,infer-layouts,select-swizzle,bank-conflicts,create-tma,"
        "plan-occupancy{producer_warps=4},pipeline,pipeline-cp-async,persistent,canonicalize")}),
    "linear": ("examples/linear.tk", {}, {}),
    "attention": ("examples/attention_fwd.tk", ATTENTION_TILE, {}),
    "attention-causal-d64": ("examples/attention_fwd.tk", {"CAUSAL": 1, "D": 64, **ATTENTION_TILE}, {}),
    "attention-persistent": ("examples/attention_fwd.tk", {"PERSIST": 1, **ATTENTION_TILE}, {}),
    "attention-3-stages": ("examples/attention_fwd.tk", {"STAGES": 3, "BQ": 128, "BKV": 32}, {}),
}


@pytest.mark.parametrize("name", list(PIPELINES))
def test_the_model_runs_every_ring_two_rounds_and_more(name: str) -> None:
    """tkir.compile verifies after every pass, so the pipelines compile; here the model of the final IR is
    run by hand to see that it is not vacuous: every ring of S stages completes at least 2S+2 phases in
    some run, no run stops early (an unevaluated bound or the step budget), and each run ends with every
    fill released."""
    path, consts, opts = PIPELINES[name]
    kernel = tkir.compile(path, **opts, **consts).module.kernel
    rings = {id(op): op.result.type.n for op in kernel.walk() if op.name == "pipe.barriers" and op.result.type.n > 1}
    assert rings, "no ring of two stages or more"
    turns: dict[int, int] = {}
    for sizes, block in vp._bindings(kernel, 1):
        model = vp._Model(kernel, sizes, block, VerifyError)
        model.run()  # a _Stop would fail the test
        for bars in model.rings:
            turns[id(bars.op)] = max(turns.get(id(bars.op), 0), sum(bars.done.values()))
    assert all(turns.get(k, 0) >= 2 * n + 2 for k, n in rings.items()), (turns, rings)


def test_a_release_before_the_fill_wait_is_a_located_error() -> None:
    """The fuzzer's `release_early` edit on attention_bwd_dkdv.tk's pipeline (it compiled with exit 0): the
    consumer's `pipe.arrive %empty_dos` moved above its `pipe.wait %full_dos`. The model's one interleaving never
    let the producer refill the stage between the early release and the reads, so a read after that wait looked
    fine; a role may now release a stage only while it holds that stage's fill."""
    ir = tkir.compile("examples/attention_bwd_dkdv.tk", target="sm_90a").ir
    lines = ir.split("\n")
    rel = next(i for i, ln in enumerate(lines) if ln.strip().startswith("pipe.arrive %empty_dos"))
    wait = next(i for i, ln in enumerate(lines) if ln.strip().startswith("pipe.wait %full_dos"))
    assert wait < rel
    lines.insert(wait, lines.pop(rel))
    text = "\n".join(lines)
    with pytest.raises(CompileError) as e:
        verify(parse_module(text, "dkdv.tkir"))
    assert e.value.loc is not None and e.value.loc.line == wait + 1
    assert "releases stage 0 of %dos (%empty_dos[0]) before waiting for its fill" in str(e.value), str(e.value)
    verify(parse_module(ir, "dkdv.tkir"))  # the unedited pipeline is accepted


def test_a_release_no_role_waits_for_is_a_located_error() -> None:
    """The fuzzer's `delete_wait` edit on attention_bwd_dkdv.tk's pipeline: the producer's `pipe.wait %empty_dos`
    deleted. The q ring's wait kept this kernel's refills in order by chance, so the model found no race; a
    barrier the consumers arrive on that nobody waits on is now refused where the arrive is."""
    ir = tkir.compile("examples/attention_bwd_dkdv.tk", target="sm_90a").ir
    lines = ir.split("\n")
    dropped = next(i for i, ln in enumerate(lines) if ln.strip().startswith("pipe.wait %empty_dos"))
    del lines[dropped]
    text = "\n".join(lines)
    arrive = next(i for i, ln in enumerate(lines) if ln.strip().startswith("pipe.arrive %empty_dos"))
    with pytest.raises(CompileError) as e:
        verify(parse_module(text, "dkdv.tkir"))
    assert e.value.loc is not None and e.value.loc.line == arrive + 1
    assert "'pipe.arrive' on %empty_dos, which no role waits on" in str(e.value), str(e.value)
