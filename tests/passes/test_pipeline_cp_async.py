"""pipeline-cp-async (the mma.sync path's multi-stage cp.async main loop) without a GPU.

* The interpreter runs gemm and attention compiled for sm_80 through the default pipeline (the IR
  after the pass, ring buffers and all) at ragged sizes and matches the companions' references; its
  cp.async model fills a stage with NaN while a copy is in flight, so a schedule that reads a stage
  too early, or refills one that is still to be read, fails the check (tested by breaking the IR).
* The IR round-trips through the printer and parser; the verifier refuses malformed async ops.
* The SASS of the pipelined loop: one group of LDGSTS per iteration (and S-1 in the prologue),
  `DEPBAR.LE SB0, S-2` then `BAR.SYNC` at the top of the loop, ldmatrix (LDSM) before the first
  mma.sync (HMMA) and between them, the copies issued between the HMMAs, no local memory.
* sm_90a (TMA, and `--no-tma` with wgmma) is not touched; the launch keeps cp.async's requirements.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import tkir
import tkir.verifier
from tkir.backend.lower import compile_module
from tkir.backend.toolchain import local_memory_ops, sass_count
from tkir.backend.values import LoweringError
from tkir.diagnostics import CompileError
from tkir.parser import parse_module
from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.passmanager import Options
from tkir.printer import print_module
from tkir.tools.examples import check_interpreted, load_companion
from tkir.verifier import VerifyError, verify

# the one-role cp.async loop this file tests: a gemm's loop would otherwise get cp.async producer warps
# (plan-occupancy{producer_warps}; tests/filecheck/passes/pipeline-sm80-producer.tk, tests/gpu/test_gpu_sm80.py)
PIPELINE = ["plan-occupancy{producer_warps=0}" if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE]
ONE_ROLE = ",".join(PIPELINE)
SM80 = {"target": "sm_80"}
# The gemm shape recommended for mma.sync (docs/experiments.md): 8 warps of 32 x 128 accumulators.
GEMM_SM80 = {"BM": 256, "BN": 128, "BK": 64, "STAGES": 3}
NO_PIPE = ",".join(p for p in PIPELINE if p != "pipeline-cp-async")
# the rotated loop's ablation (pipeline-cp-async{rotate=0}): the barrier at the top of the iteration
# the loop without the rotation and without step_ahead (the fragment distance of the backend's default)
NO_ROTATE = ",".join("pipeline-cp-async{rotate=0,step_ahead=false}" if p == "pipeline-cp-async" else p
                     for p in PIPELINE)
# the default before step_ahead: rotated by one unit, fragments one unit ahead (step_ahead's ablation)
NO_STEP_AHEAD = ",".join("pipeline-cp-async{step_ahead=false}" if p == "pipeline-cp-async" else p for p in PIPELINE)

INTERP_CASES = [
    ("gemm", dict(M=1000, N=744, K=520), {}),                       # ragged M, N, K: zero-filled edges
    ("gemm", dict(M=300, N=200, K=136), GEMM_SM80),
    ("gemm", dict(M=128, N=256, K=40), {}),                         # one iteration: prologue groups 1, 2 empty
    ("gemm", dict(M=256, N=128, K=200), {"BM": 256, "BN": 128, "BK": 32, "STAGES": 4}),
    ("attention_fwd", dict(B=1, H=2, N=300), {}),                   # split-masks splits the pipelined loop
    ("attention_fwd", dict(B=1, H=2, N=200), {"D": 64, "CAUSAL": 1}),
    ("attention_fwd", dict(B=1, H=1, N=100), {"STAGES": 3, "CAUSAL": 1}),
    ("linear", dict(M=200, N=136, K=520), {"ACT": 1}),
]


def _compile(name: str, consts: dict, **kw: object) -> tkir.api.CompiledKernel:
    return tkir.compile(f"examples/{name}.tk", **SM80, **{"passes": ONE_ROLE, **kw}, **consts)


@pytest.mark.parametrize("name, sizes, consts", INTERP_CASES,
                         ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in {**s, **c}.items())}" for n, s, c in INTERP_CASES])
def test_pipelined_sm80_ir_matches_reference(name: str, sizes: dict, consts: dict) -> None:
    k = _compile(name, consts)
    loops = [op for op in k.module.kernel.walk() if op.name == "scf.for"]
    assert loops and all(op.body.ops[0].name == "pipe.async_wait" for op in loops)  # really pipelined:
    assert not any(op.name == "tk.load" and not op.results for lp in loops for op in lp.walk())  # no in-place loads
    for r in check_interpreted(k.module, load_companion(f"examples/{name}.tk"), sizes, consts, seed=3):
        assert r.ok, f"{name} {sizes} {consts}: {r}"


def _broken(text: str, old: str, new: str) -> list:
    assert old in text
    module = parse_module(text.replace(old, new))
    return check_interpreted(module, load_companion("examples/gemm.tk"), dict(M=256, N=256, K=512), {}, seed=1)


def test_a_stage_read_before_its_copy_lands_fails_the_check() -> None:
    text = print_module(_compile("gemm", {}).module)
    # wait for one group fewer: iteration k reads stage k % 4 while its copy is still in flight
    assert not any(r.ok for r in _broken(text, "pipe.async_wait {pending = 2}", "pipe.async_wait {pending = 3}"))
    assert all(r.ok for r in _broken(text, "pipe.async_wait {pending = 2}", "pipe.async_wait {pending = 1}"))


def test_a_copy_into_the_stage_being_read_fails_the_check() -> None:
    text = print_module(_compile("gemm", {}).module)
    # refill the stage this iteration reads (instead of the one the previous iteration read)
    text = text.replace("%s_next = arith.rem %k_next, %cp_stages", "%s_next = arith.rem %k, %cp_stages")
    assert not any(r.ok for r in _broken(text, "pipe.async_wait {pending = 2}", "pipe.async_wait {pending = 2}"))


def test_pipelined_ir_round_trips() -> None:
    for name, consts in [("gemm", {}), ("attention_fwd", {"CAUSAL": 1})]:
        text = print_module(_compile(name, consts).module)
        again = parse_module(text)
        verify(again)
        assert print_module(again) == text


@pytest.mark.parametrize("old, new, message", [
    ("pipe.async_copy %more, %a,", "pipe.async_copy %k, %a,", "condition is i1"),
    ("pipe.async_copy %more, %a, %s_next,", "pipe.async_copy %more, %a_s, %s_next,", "ring buffer"),
    ("pipe.async_wait {pending = 2}", "pipe.async_wait {pending = -1}", "pending = N >= 0"),
    ("pipe.async_copy %more, %a, %s_next, %A, %bx, %k_next", "pipe.async_copy %more, %a, %s_next, %A, %bx",
     "coordinates"),
])
def test_verifier_refuses_malformed_async_ops(old: str, new: str, message: str) -> None:
    text = print_module(_compile("gemm", {}).module)
    assert old in text
    if "%a_s," in new:  # the view is defined after the copies: define the copy's operand first
        text = text.replace(old, "%a_s0 = pipe.stage %a, %s : st<bf16, 128, 64, swizzle=128, align=1024>\n    " + old)
        new = new.replace("%a_s,", "%a_s0,")
    with pytest.raises(VerifyError, match=re.escape(message)):
        verify(parse_module(text.replace(old, new)))


# --- SASS ---------------------------------------------------------------------------------------


def _loop(sass: str, pending: int) -> list[str]:
    """The opcodes of the pipelined loop's body: from its `DEPBAR.LE SB0, pending` to the back edge (a
    one-shot copy before the loop, attention's Q, waits with DEPBAR too, but no HMMA follows it there)."""
    lines = sass.splitlines()
    starts = [i for i, ln in enumerate(lines) if re.search(rf"DEPBAR\.LE SB0, {pending:#x}\b", ln)]
    for start in starts:
        body = []
        for ln in lines[start:]:
            m = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", ln)
            if m:
                body.append(m.group(1))
                if m.group(1) in ("BRA", "CALL"):  # the back edge (ptxas may write it as CALL.REL.NOINC)
                    break
        if "HMMA" in body:
            return body
    raise AssertionError(f"no loop waits with DEPBAR.LE SB0, {pending}")


@pytest.mark.parametrize("consts, stages, per_iter", [({}, 4, 12), (GEMM_SM80, 3, 12),
                                                      ({"BM": 256, "BN": 128, "BK": 32, "STAGES": 4}, 4, 6)],
                         ids=["default", "256x128x64", "256x128x32"])
def test_sm80_gemm_loop_sass(consts: dict, stages: int, per_iter: int) -> None:
    k = _compile("gemm", consts, passes=NO_ROTATE)
    sass = k.asm["sass"]
    # (BM + BN) x BK x 2 B of A and B per iteration in 16-byte chunks over 256 threads; S-1 groups ahead
    assert sass_count(sass, "LDGSTS") == stages * per_iter
    body = _loop(sass, stages - 2)
    assert body.count("LDGSTS") == per_iter and body.count("LDGDEPBAR") == 1  # one commit per iteration
    assert body.index("BAR") < body.index("LDSM") < body.index("HMMA")       # wait, barrier, then fragments
    first, last = body.index("HMMA"), len(body) - 1 - body[::-1].index("HMMA")
    inner = body[first:last]
    assert inner.count("LDSM") >= body.count("LDSM") // 2   # fragments loaded between the mma.syncs
    # the copies between the mma.syncs too: each tile's copies are one run (ptxas separates a run of
    # LDGSTS from the ldmatrix before it once, not each copy), handed out after a unit's mma.syncs; ptxas
    # may lift the first run above the first HMMA, which waits for its fragments anyway
    assert inner.count("LDGSTS") >= 1
    # ptxas's three dead `@!PT LDS RZ, [RZ]` before an LDGSTS that follows an ldmatrix: once per run, so
    # 3 per tile (A and B), not 3 per copy (once 21 of them in a 4-warp loop with one copy per unit)
    assert body.count("LDS") <= 3 * 2
    assert not local_memory_ops(sass) and k.asm["ptxas"].spill_stores == 0


def _back_edge_loop(sass: str) -> tuple[list[str], list[str]]:
    """(the opcodes before the loop, the opcodes of the loop body) of the SASS loop that holds HMMAs: from
    its label to the branch back to it."""
    lines = sass.splitlines()
    ops: list[tuple[int, str, str]] = []  # (line, opcode, text)
    for i, ln in enumerate(lines):
        m = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", ln)
        if m:
            ops.append((i, m.group(1), ln))
    for i, ln in enumerate(lines):
        lab = re.match(r"\s*(\.L_x_\d+):", ln)
        if not lab:
            continue
        back = [j for j, (n, op, text) in enumerate(ops) if n > i and op == "BRA" and f"({lab.group(1)})" in text]
        first = next(j for j, (n, _, _) in enumerate(ops) if n > i)
        if back and "HMMA" in [op for _, op, _ in ops[first:back[0]]]:
            return [op for _, op, _ in ops[:first]], [op for _, op, _ in ops[first:back[0] + 1]]
    raise AssertionError("no loop with HMMAs and a back edge")


@pytest.mark.parametrize("consts, stages", [({}, 4), (GEMM_SM80, 3), ({"BM": 256, "BN": 128, "BK": 32, "STAGES": 4}, 4)],
                         ids=["default", "256x128x64", "256x128x32"])
def test_sm80_gemm_rotated_loop_sass(consts: dict, stages: int) -> None:
    """The rotated loop (pipeline-cp-async's default: rotated by a whole k16 step, 4 units of a 64-column warp
    tile, step_ahead): the wait and the barrier inside the body, between mma.syncs, every copy of the iteration
    issued before the wait, the next k-tile's fragments loaded after the barrier; before the loop the first
    iteration's wait, barrier and fragments."""
    k = _compile("gemm", consts)
    assert "frag_rotate = 4" in k.ir and "frag_ahead = 4" in k.ir
    sass = k.asm["sass"]
    pre, body = _back_edge_loop(sass)
    assert body.count("BAR") == 1 and body.count("DEPBAR") == 1
    bar, dep = body.index("BAR"), body.index("DEPBAR")
    assert dep < bar
    assert "HMMA" in body[:bar] and "HMMA" in body[bar:]          # mma.syncs on both sides of the barrier
    assert "LDSM" in body[bar:]                                   # the next k-tile's first fragments
    assert "LDGSTS" not in body[dep:] and body[:dep].count("LDGDEPBAR") == 1  # copies and commit first
    pre_bar = len(pre) - 1 - pre[::-1].index("BAR")
    assert "DEPBAR" in pre[:pre_bar] and "LDSM" in pre[pre_bar:]  # the prologue's wait, barrier, fragments
    assert not local_memory_ops(sass) and k.asm["ptxas"].spill_stores == 0


def test_bad_rotate_is_a_parameter_error() -> None:
    passes = ",".join("pipeline-cp-async{rotate=-1}" if p == "pipeline-cp-async" else p for p in PIPELINE)
    with pytest.raises(Exception, match="rotate=-1 must be >= 0"):
        _compile("gemm", {}, passes=passes)


@pytest.mark.parametrize("consts", [{}, {"CAUSAL": 1}, {"D": 64}], ids=str)
def test_sm80_attention_loop_sass(consts: dict) -> None:
    k = _compile("attention_fwd", consts)
    sass = k.asm["sass"]
    body = _loop(sass, 0)  # 2 stages: wait_group 0
    # K and V: 64 x D x 2 B each over 128 threads
    per_iter = 2 * 64 * consts.get("D", 128) * 2 // 16 // 128
    assert body.count("LDGSTS") == per_iter
    assert body.index("BAR") < body.index("LDSM") < body.index("HMMA")
    assert not local_memory_ops(sass)


def test_frag_ahead_zero_loads_each_unit_right_before_its_mma() -> None:
    passes = ",".join("pipeline-cp-async{fragments_ahead=0}" if p == "pipeline-cp-async" else p
                      for p in PIPELINE)
    # the loop's old order: not rotated, a step's A right before its first mma.sync (a_ahead=false)
    k = _compile("gemm", GEMM_SM80, passes=passes.replace("pipeline-cp-async{", "pipeline-cp-async{rotate=0,a_ahead=false,"))
    assert "frag_ahead = 0" in k.ir
    ptx = k.asm["ptx"]
    loop = ptx[ptx.index("cp.async.wait_group 1"):]
    order = re.findall(r"ldmatrix|mma\.sync", loop)
    # without prefetch the first mma.sync directly follows the first unit's ldmatrix (A of the 4 m16 blocks
    # of a 64-row warp tile of infer-layouts' 4 x 2 warp grid, one B pair); with the default one unit
    # ahead a second B pair comes first
    assert order.index("mma.sync") == 5
    default = _compile("gemm", GEMM_SM80, passes=NO_ROTATE.replace("{rotate=0,", "{rotate=0,a_ahead=false,")).asm["ptx"]
    order = re.findall(r"ldmatrix|mma\.sync", default[default.index("cp.async.wait_group 1"):])
    assert order.index("mma.sync") == 6
    # and the next k16 step's A (16 registers here) is loaded right before that step's first mma.sync,
    # after the B pair of its second unit (rules_sm80.A_AHEAD_MAX_REGS): 4 units per step
    units = [len(u) for u in "".join("A" if x == "ldmatrix" else "m" for x in order[:60]).split("m") if u]
    assert units[:4] == [6, 1, 1, 1] and units[4] == 5


def test_bad_frag_ahead_is_a_located_backend_error() -> None:
    text = print_module(_compile("gemm", {}, passes=NO_STEP_AHEAD).module).replace("tk.mma %a_s, %b_s, %acc.2 {",
                                                              "tk.mma %a_s, %b_s, %acc.2 {frag_ahead = -1, ")
    assert "frag_ahead = -1" in text
    with pytest.raises(LoweringError, match="frag_ahead = -1"):
        compile_module(parse_module(text), Options(target="sm_80"))


# --- what stays as it was --------------------------------------------------------------------------


@pytest.mark.parametrize("kw", [{}, {"no_tma": True}], ids=["tma", "no_tma"])
def test_sm90a_is_not_touched(kw: dict) -> None:
    k = tkir.compile("examples/gemm.tk", **kw)
    assert "pipe.async" not in k.ir


def test_launch_keeps_the_cp_async_row_alignment() -> None:
    k = _compile("gemm", {})
    assert {r.expr for r in k.launch.requires} == {"(K * 2) % 16", "(N * 2) % 16"}


def test_without_the_pass_the_loop_loads_in_place() -> None:
    k = _compile("gemm", GEMM_SM80, passes=NO_PIPE)
    assert "pipe.async" not in k.ir and "stages=" not in k.ir.split("scf.for")[0]
    assert sass_count(k.asm["sass"], "LDGSTS") == 12 and not local_memory_ops(k.asm["sass"])


@pytest.mark.parametrize("bk, stages", [(64, 4), (128, 2)])
def test_plan_occupancy_picks_the_stages_from_shared_memory(tmp_path, bk: int, stages: int) -> None:
    """Without @stages, plan-occupancy gives the loop the most stages (up to 4) whose ring buffers fit the
    227 KB a block may opt in to on the H200, and pipeline-cp-async keeps that many k-tiles in flight:
    256 x 128 tiles take 48 KB per stage at BK = 64 (4 fit) and 96 KB at BK = 128 (2 fit)."""
    src = open("examples/gemm.tk", encoding="utf-8").read()
    assert "@stages(STAGES)" in src
    path = tmp_path / "gemm.tk"
    path.write_text(src.replace("@stages(STAGES)", ""), encoding="utf-8")
    k = tkir.compile(str(path), target="sm_80", passes=ONE_ROLE, BM=256, BN=128, BK=bk)
    plan = k.module.kernel.attrs["occupancy"]
    assert plan["stages"] == stages and plan["smem_bytes"] <= 232_448
    assert f"stages={stages}>" in k.ir and f"pipe.async_wait {{pending = {stages - 2}}}" in k.ir
    assert k.ir.count("pipe.async_commit") == stages  # S - 1 in the prologue, one in the loop


# --- the held stage of overlap-mma's rotated loop on the mma.sync path --------------------------------------

def test_rotated_sm80_attention_matches_reference_and_needs_the_held_stage(monkeypatch) -> None:
    """attention on sm_80 at STAGES = 3 is rotated by overlap-mma (its P V reads block j-1's V stage during
    iteration j) and matches the reference in the interpreter at ragged N, causal and not. Rotated without
    the held stage (copies S-1 ahead, as for an unrotated loop), a copy refills that stage while it is still
    to be read: the interpreter's in-flight stages are NaN, so O is NaN."""
    from tkir.passes import pipeline_cp_async as pca
    from tkir.tools.examples import check_interpreted, load_companion

    path = "examples/attention_fwd.tk"
    comp = load_companion(path)
    for consts, n in ((dict(BQ=128, BKV=32, STAGES=3), 300), (dict(BQ=128, BKV=32, STAGES=4, CAUSAL=1), 200)):
        k = tkir.compile(path, target="sm_80", **consts)
        assert "cp_hold = 1" in k.ir and "%nonempty" in k.ir
        res = check_interpreted(k.module, comp, dict(B=1, H=1, N=n), consts, seed=4)
        assert all(r.ok for r in res), (consts, res)
    real = pca._pipeline

    def no_hold(kernel, loop, match, stages, hold=0):
        real(kernel, loop, match, stages, 0)
        loop.attrs["cp_hold"] = 1   # overlap-mma rotates it, but no stage was held
    monkeypatch.setattr(pca, "_pipeline", no_hold)
    consts = dict(BQ=128, BKV=32, STAGES=3)
    monkeypatch.setenv("TKIR_CACHE", "0")  # a cached compile would be the held one
    # the verifier's protocol model (tkir/verify_pipeline.py) refuses it: P V reads a stage being refilled
    with pytest.raises(CompileError, match=r"after pass 'overlap-mma': 'tk.mma' reads stage \d of %v while the "
                                           r"cp.async copy into it at line \d+ is in flight"):
        tkir.compile(path, target="sm_80", **consts)
    # and without the verifier's model, the interpreter sees it too
    monkeypatch.setattr(tkir.verifier, "verify_pipeline", lambda kernel, error: None)
    k = tkir.compile(path, target="sm_80", **consts)
    res = {r.output: r for r in check_interpreted(k.module, comp, dict(B=1, H=1, N=300), consts, seed=4)}
    assert not res["O"].ok and np.isnan(res["O"].rel_err)


@pytest.mark.parametrize("a_ahead, mmas_before", [(None, 24), (True, 24), (False, 32)],
                         ids=["default", "a_ahead", "a_ahead-off"])
def test_a_ahead_loads_the_next_steps_a_with_the_unit_before(a_ahead: bool | None, mmas_before: int) -> None:
    """pipeline-cp-async{a_ahead}: a 64-row warp tile's next k16 step of A (4 ldmatrix) is loaded with the unit
    `ahead` of its first (before the step's last unit of 8 mma.sync), not right before its first mma.sync (the
    backend's own rule for steps of A over A_AHEAD_MAX_REGS registers, a_ahead=false). Unset, the pass asks for
    it where two steps of A fit the plan's registers (256 x 128 x 64, one block of 8 warps: 255). Without
    step_ahead (its ablation): step_ahead loads every fragment a whole step ahead, A with it
    (test_step_ahead_loads_a_whole_step_ahead)."""
    opt = "{step_ahead=false}" if a_ahead is None else f"{{step_ahead=false,a_ahead={str(a_ahead).lower()}}}"
    passes = ",".join(f"pipeline-cp-async{opt}" if p == "pipeline-cp-async" else p for p in PIPELINE)
    k = _compile("gemm", GEMM_SM80, passes=passes)
    assert f"a_ahead = {'false' if a_ahead is False else 'true'}" in k.ir
    ptx = k.asm["ptx"]
    toks = re.findall(r"ldmatrix\.sync\.aligned\.m8n8\.x4(?:\.trans)?|mma\.sync|bar\.sync", ptx)
    loop = toks[toks.index("mma.sync"):]  # the rotated loop starts on the first k16 step carried in
    first_a = loop.index("ldmatrix.sync.aligned.m8n8.x4")  # A (M x K): no .trans
    assert loop[:first_a].count("mma.sync") == mmas_before


def test_a_ahead_is_left_to_the_backend_without_register_room() -> None:
    """Two blocks of 8 warps per SM (128 registers a thread) leave no room for a second step of A: no a_ahead
    (the 32-row warps of gemm's default 128 x 256 tile over 8 warps take the backend's own rule anyway)."""
    k = _compile("gemm", {"BM": 128, "BN": 128, "BK": 32, "STAGES": 3})
    assert "blocks_per_sm = 2" in k.ir and "a_ahead" not in k.ir


@pytest.mark.parametrize("target, consts", [("sm_80", {}), ("sm_80", {"EPI": 1}), ("sm_90a", {}), ("sm_90a", {"EPI": 1})],
                         ids=str)
def test_rotate_filecheck_kernel_assembles_on_both_targets(target: str, consts: dict) -> None:
    """tests/filecheck/passes/pipeline-cp-async-rotate.tk's kernel (written for the rotated loop, not an example) through
    ptxas on both targets, without local memory; rotated only on sm_80 and only without the in-loop scale
    (tests/gpu/test_gpu_sm80.py runs it on the GPU)."""
    k = tkir.compile("tests/filecheck/passes/pipeline-cp-async-rotate.tk", target=target, **consts)
    assert ("frag_rotate = " in k.ir) == (target == "sm_80" and not consts.get("EPI"))
    assert ("HMMA" if target == "sm_80" else "HGMMA") in k.asm["sass"]
    assert not local_memory_ops(k.asm["sass"]) and k.asm["ptxas"].spill_stores == 0
