"""plan-occupancy: each example's plan against a hand count, and the located errors when nothing fits.

The examples run through the decided tk-level pipeline up to plan-occupancy. Hand counts use
HOPPER.md §7 (65,536 registers and 228 KB per SM, 232,448 B per block, 1 KB reserved per block) and
the counting rules in passes/plan_occupancy.py's docstring.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tkir.backend.launch import build_launch
from tkir.diagnostics import CompileError
from tkir.facts import OccupancyPlan, RegisterBudget, RolePlan, SharedBreakdown
from tkir.frontend import compile_file
from tkir.parser import parse_module
from tkir.passes.registry import load_registry
from tkir.passmanager import Options, PassManager
from tkir.tools.examples import load_companion

UP_TO_OCCUPANCY = ["canonicalize", "infer-layouts", "select-swizzle", "bank-conflicts", "create-tma",
                   "plan-occupancy"]
# sm_80 plans of one compute role: a gemm's loop would otherwise get cp.async producer warps
ONE_ROLE = [*UP_TO_OCCUPANCY[:-1], "plan-occupancy{producer_warps=0}"]


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROW_KERNELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "rows"  # the row kernels with every knob
GEMM_CONSTS = load_companion(str(EXAMPLES / "gemm.tk")).DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values


def _kernel(example: str) -> Path:
    """examples/NAME.tk, or for the row kernels their copy with every schedule knob (tests/data/rows)."""
    return (ROW_KERNELS if example in ("layernorm", "rmsnorm", "softmax") else EXAMPLES) / f"{example}.tk"


def _given(example: str, consts: dict) -> dict:
    """The consts the front end gets: gemm.tk's and attention_fwd.tk's auto ones are given their old header values
    (it cannot choose)."""
    old = {"gemm": GEMM_CONSTS, "attention_fwd": {"BQ": 64, "BKV": 64}}.get(example, {})
    return {**old, **consts}


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)


def plan_of(example: str, **consts: int) -> OccupancyPlan:
    module = compile_file(str(_kernel(example)), _given(example, consts))
    PassManager(load_registry(), UP_TO_OCCUPANCY).run(module, Options())
    plan = OccupancyPlan.of(module.kernel)
    assert plan is not None
    return plan


def run_text(text: str, passes: list[str], **options: object):
    """Parse IR text (from ./k.tkir, written so that diagnostics can show the source line) and run passes."""
    path = Path("k.tkir")
    path.write_text(text, encoding="utf-8")
    module = parse_module(text, str(path))
    PassManager(load_registry(), passes).run(module, Options(**options))
    return module


def test_gemm_hand_count() -> None:
    occ = plan_of("gemm")
    # a: 128 x 64 bf16 = 16384 B, b: 64 x 256 bf16 = 32768 B, both 128B-swizzled (1024-B aligned);
    # @stages(4) -> 4 x 49152 = 196608 B; the staged epilogue's C tile 128 x 128 bf16 = 32768 B once;
    # 4 stages x (full, empty) x 8 B = 64 B; 1024 B base padding.
    assert occ.smem == SharedBreakdown(stage_bytes=49152, fixed_bytes=32768, barrier_bytes=64, align_pad=1024)
    assert occ.smem_bytes == 196608 + 32768 + 64 + 1024 == 230464 <= 232448
    assert occ.stages == 4
    # consumers: acc 128 x 256 f32 over 2 x 128 threads = 128; 3 pointers x 2 + 2 wgmma descriptors x 2
    # + live scalars K/64, k, bx, by = 14; overhead 16 -> 158 -> 160 <= 232.
    assert occ.budget == RegisterBudget(acc_regs=128, live_tile_regs=0, addr_regs=14, overhead=16)
    # 384 threads launch with floor(65536 / 384 / 8) * 8 = 168 registers: pool 504 per thread of one
    # warpgroup; producer 40, consumers (504 - 40) / 2 = 232 (CUTLASS's pair).
    assert occ.roles == (("producer", RolePlan(regs=40, warpgroups=1)), ("consumer", RolePlan(regs=232, warpgroups=2)))
    assert 128 * (40 + 2 * 232) <= 65536
    assert occ.threads == 384
    # blocks: 233472 // round128(230464 + 1024) = 1; 65536 // (384 * 168) = 1
    assert occ.blocks_per_sm == 1


def test_attention_hand_count() -> None:
    occ = plan_of("attention_fwd")
    # q 64 x 128 bf16 = 16384 B once, the staged epilogue's O tile 64 x 128 bf16 = 16384 B once;
    # k, v 16384 B each per stage, @stages(2) -> 65536 B; barriers 2 x 2 x 8 = 32 B; 1024 B padding.
    assert occ.smem_bytes == 2 * 16384 + 2 * 32768 + 32 + 1024 == 99360
    assert occ.stages == 2
    # One consumer warpgroup (64 query rows = one m64). Peak inside the loop at row_sum(p):
    # accumulators o (64 x 128 f32 / 128 threads = 64) + m_new (2: rows g and g+8) = 66;
    # other tiles p (64 x 64 f32 = 32) + alpha, l * alpha, row_sum(p) (2 each) = 38;
    # addresses 4 pointers (K, V, O, L: Q's only copy precedes the loop, its address is dead) x 2 + 4
    # descriptor regs + kv_blocks, bx, by, bz, N = 17; overhead 16 -> 137.
    assert occ.budget == RegisterBudget(acc_regs=66, live_tile_regs=38, addr_regs=17, overhead=16)
    # 256 threads launch with min(65536 / 256, 248) = 248; the consumer keeps 248 >= 136.
    assert occ.roles == (("producer", RolePlan(regs=40, warpgroups=1)), ("consumer", RolePlan(regs=248, warpgroups=1)))
    assert occ.threads == 256 and occ.blocks_per_sm == 1


@pytest.mark.parametrize("example, warps", [("gemm", 8), ("attention_fwd", 4), ("rotary", 4), ("softmax", 16)])
def test_sm80_block_is_32_threads_per_layout_warp(example: str, warps: int) -> None:
    # on sm_80 infer-layouts spreads the tiles over `warps = W` (gemm: 128 accumulator rows / 16 = 8
    # warps of m16 blocks); the block must have exactly those 32 * W threads
    module = compile_file(str(_kernel(example)), _given(example, {}))
    PassManager(load_registry(), ONE_ROLE).run(module, Options(target="sm_80"))
    kernel = module.kernel
    assert kernel.attrs["warps"] == warps
    occ = OccupancyPlan.of(kernel)
    assert occ is not None and occ.threads == 32 * warps
    compute = occ.role("compute")
    assert compute is not None and compute.warps == warps
    assert build_launch(module, "sm_80").block == (32 * warps, 1, 1)


@pytest.mark.parametrize("infer", ["infer-layouts", "infer-layouts{mma_warps_n=1}"], ids=["grid", "one-d"])
@pytest.mark.parametrize("bm, bn", [(256, 128), (128, 256)])
def test_sm80_gemm_registers_read_the_warp_grid(infer: str, bm: int, bn: int) -> None:
    # a 256 x 128 (or 128 x 256) f32 accumulator over 8 warps is 128 registers per thread whether the
    # warps own whole rows (32 x 128 / 16 x 256) or 64 x 64 blocks of a 4 x 2 (2 x 4) grid: plan-occupancy
    # counts what tkir.layout's fragment map gives each thread; the peak is at the mma: + 3 pointers x 2,
    # 4 for shared-operand descriptors (as on sm_90a) and the live scalars K / BK, bx, by; 16 of
    # overhead; and the fragments it
    # loads: one k16 step of A, 4 per m16 block of the warp's tile (4 blocks of the grid's 64 rows, 2 or
    # 1 of whole-row warps' 32 or 16), and one B unit of 4. One 256-thread block per SM either way.
    module = compile_file(str(EXAMPLES / "gemm.tk"), {**GEMM_CONSTS, "BM": bm, "BN": bn, "BK": 64, "STAGES": 4})
    PassManager(load_registry(), [infer if p == "infer-layouts" else p for p in ONE_ROLE]).run(
        module, Options(target="sm_80"))
    acc = next(op for op in module.kernel.walk() if op.name == "tk.mma").result.type
    assert ("warps_n" in str(acc)) == (infer == "infer-layouts")
    occ = OccupancyPlan.of(module.kernel)
    fragments = 4 * (64 if infer == "infer-layouts" else bm // 8) // 16 + 4
    assert occ is not None
    assert occ.budget == RegisterBudget(acc_regs=128, live_tile_regs=fragments, addr_regs=13, overhead=16)
    assert occ.threads == 256 and occ.blocks_per_sm == 1


@pytest.mark.parametrize("infer, regs, blocks", [("infer-layouts", 80, 6), ("infer-layouts{mma_warps_n=1}", 72, 7)],
                         ids=["grid", "one-d"])
def test_sm80_small_gemm_counts_its_fragments(infer: str, regs: int, blocks: int) -> None:
    # 64 x 64 over 4 warps: 32 accumulator registers, 14 for addresses, 16 of overhead = 62; at the mma
    # a 2 x 2 grid's 32-row warp tile loads 2 A fragments + 1 B unit (12), a 16-row warp 1 + 1 (8):
    # 74 -> 80 registers (6 blocks of 128 threads per SM) or 70 -> 72 (7). Without the fragments the
    # plan asked for 64 (8 blocks), and ptxas spilled the grid's kernel to fit.
    module = compile_file(str(EXAMPLES / "gemm.tk"), {**GEMM_CONSTS, "BM": 64, "BN": 64, "BK": 32, "STAGES": 3})
    PassManager(load_registry(), [infer if p == "infer-layouts" else p for p in ONE_ROLE]).run(
        module, Options(target="sm_80"))
    occ = OccupancyPlan.of(module.kernel)
    assert occ is not None and occ.role("compute") == RolePlan(regs=regs, warps=4)
    assert occ.blocks_per_sm == blocks


def _sm80_plan(example: str, consts: dict, occupancy: str = "plan-occupancy") -> OccupancyPlan:
    module = compile_file(str(_kernel(example)), _given(example, consts))
    PassManager(load_registry(), [*UP_TO_OCCUPANCY[:-1], occupancy]).run(module, Options(target="sm_80"))
    plan = OccupancyPlan.of(module.kernel)
    assert plan is not None
    return plan


@pytest.mark.parametrize("bm, bn", [(256, 128), (128, 256)])
def test_sm80_gemm_gets_four_producer_warps(bm: int, bn: int) -> None:
    # a loop that only copies and multiplies: 4 producer warps (one per scheduler) beside the 8 of the
    # layouts, 384 threads = 3 warps per scheduler -> 65536 / 4 / 96 = 170 -> 168 registers; the
    # consumers' need is the one-role budget without the copy addresses (177 - 13 + 2 pointer = 166 -> 168)
    plan = _sm80_plan("gemm", {"BM": bm, "BN": bn, "BK": 64, "STAGES": 4}, "plan-occupancy{producer_warps=4}")
    assert plan.roles == (("producer", RolePlan(regs=168, warps=4)), ("consumer", RolePlan(regs=168, warps=8)))
    assert plan.threads == 384 and plan.blocks_per_sm == 1
    assert plan.smem is not None and plan.smem.barrier_bytes == 4 * 2 * 8  # full + empty per stage


@pytest.mark.parametrize("bm, bn", [(256, 128), (128, 256)])
def test_sm80_gemm_automatic_choice_is_one_role_at_equal_mma_warps(bm: int, bn: int) -> None:
    # producers would keep the same 8 mma warps per SM (one block): the one-role loop, which pipeline-cp-async
    # rotates, measured 5-7% faster on the H200 (docs/experiments.md), so the automatic choice is one role
    plan = _sm80_plan("gemm", {"BM": bm, "BN": bn, "BK": 64, "STAGES": 4})
    assert plan.role("producer") is None and plan.role("compute") is not None
    assert plan.threads == 256 and plan.blocks_per_sm == 1


GEMM_4W = """@warpgroups(consumers=1)
kernel g4<BM=128, BN=128, BK=32, STAGES=4>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N])
    grid(cdiv(M, BM), cdiv(N, BN))
{
    shared a: st<bf16, BM, BK>
    shared b: st<bf16, BK, BN>
    reg acc: rt<f32, BM, BN> = 0
    @stages(STAGES)
    for k in 0 .. cdiv(K, BK) {
        a = A[block.x, k]
        b = B[k, block.y]
        acc += a @ b
    }
    C[block.x, block.y] = bf16(acc)
}
"""


@pytest.mark.parametrize("occupancy, roles, blocks", [
    ("plan-occupancy", ("compute",), 2), ("plan-occupancy{producer_warps=4}", ("producer", "consumer"), 1)],
    ids=["auto", "asked"])
def test_sm80_producer_warps_only_where_they_keep_the_mma_warps_per_sm(tmp_path: Path, occupancy: str,
                                                                        roles: tuple, blocks: int) -> None:
    # a 4-warp 128 x 128 block: with 4 producer warps it is one block per SM (4 mma warps), where the one-role
    # loop fits two (8): the automatic choice keeps one role (H200: 283 against 374 TFLOP/s);
    # asked for, the producers are planned
    src = tmp_path / "g4.tk"
    src.write_text(GEMM_4W)
    module = compile_file(str(src), {})
    PassManager(load_registry(), [*UP_TO_OCCUPANCY[:-1], occupancy]).run(module, Options(target="sm_80"))
    plan = OccupancyPlan.of(module.kernel)
    assert plan is not None and tuple(n for n, _ in plan.roles) == roles and plan.blocks_per_sm == blocks
    loop = next(op for op in module.kernel.walk() if op.name == "scf.for")
    assert loop.attrs["stages"] == plan.stages == 4


@pytest.mark.parametrize("pw, threads, regs", [(1, 288, 168), (2, 320, 168), (4, 384, 168)])
def test_sm80_producer_warps_share_the_schedulers_registers(pw: int, threads: int, regs: int) -> None:
    # 9, 10 and 12 warps all put 3 on some scheduler: the same 168-register cap (65536 / 288 would be 224)
    plan = _sm80_plan("gemm", {"BM": 256, "BN": 128, "BK": 64, "STAGES": 4}, f"plan-occupancy{{producer_warps={pw}}}")
    assert plan.threads == threads and plan.role("producer") == RolePlan(regs=regs, warps=pw)


def test_sm80_explicit_producer_warps_get_the_busiest_schedulers_registers() -> None:
    # asked for 1 producer warp beside attention's 8 warps at head dim 256 (consumers need more than 168):
    # 9 warps put 3 on one scheduler, so the plan gives the fit, 168, not 65536 / 288 -> 224 (or 248)
    plan = _sm80_plan("attention_fwd", {"BQ": 128, "BKV": 64, "D": 256}, "plan-occupancy{producer_warps=1}")
    assert plan.threads == 288
    assert plan.role("producer") == RolePlan(regs=168, warps=1) and plan.role("consumer") == RolePlan(regs=168, warps=8)


def test_sm80_attention_keeps_one_role_unless_asked() -> None:
    # attention's loop does more than copy and multiply (softmax): no producer warps by default;
    # asked for, 4 producer and 4 consumer warps (2 per scheduler: 248 registers)
    assert _sm80_plan("attention_fwd", {"BQ": 128, "BKV": 64}).role("producer") is None
    plan = _sm80_plan("attention_fwd", {"BQ": 128, "BKV": 64}, "plan-occupancy{producer_warps=4}")
    assert plan.role("producer") == RolePlan(regs=plan.role("consumer").regs, warps=4)
    assert plan.threads == 256 and plan.role("consumer").regs <= 248


def test_sm80_producer_warps_past_1024_threads_is_a_located_error(tmp_path: Path) -> None:
    # a gemm loop over 8 warpgroups' worth of mma warps (32 warps, 1024 threads) leaves no room for
    # producer warps: asked for, that is an error at the kernel, not a silent fallback to one role
    src = (EXAMPLES / "gemm.tk").read_text(encoding="utf-8").replace("@stream_k(SK, min_iters=SKI)", "@warpgroups(consumers=8)")
    path = tmp_path / "gemm32.tk"
    path.write_text(src, encoding="utf-8")
    module = compile_file(str(path), {**GEMM_CONSTS, "BM": 512, "BN": 128, "BK": 32, "STAGES": 2})
    with pytest.raises(CompileError, match=r"32 warps \+ producer_warps=4 is 1152 threads per block") as e:
        PassManager(load_registry(), [*UP_TO_OCCUPANCY[:-1], "plan-occupancy{producer_warps=4}"]).run(
            module, Options(target="sm_80"))
    assert e.value.loc is not None and e.value.loc.line > 0


@pytest.mark.parametrize("pw", ["-1", "9"])
def test_producer_warps_out_of_range_is_refused(pw: str) -> None:
    from tkir.passmanager import PassError

    with pytest.raises(PassError, match=r"producer_warps=-?\d+ must be 0..8"):
        PassManager(load_registry(), [f"plan-occupancy{{producer_warps={pw}}}"])


def test_layernorm_hand_count() -> None:
    occ = plan_of("layernorm")
    # @warpgroups(consumers=4): row layout over 16 warps, one row each: a 16 x 1024 f32 tile is
    # 1024 / 32 lanes = 32 regs; a row vector 16 / 16 warps = 1; the W and Bias column vectors (bf16,
    # 4 chunks of 8 per lane) 16 each. Peak at row_sum(xf): xf 32 + sum 1 + w 16 + b 16 = 65.
    assert occ.budget == RegisterBudget(acc_regs=0, live_tile_regs=65, addr_regs=5, overhead=16)
    # addresses: X and Y (one tile type, the same coordinates) share one, W and Bias another: 2 x 2 + bx = 5;
    # 65 + 5 + 16 = 86 -> 88; 65536 // (512 x 88) = 1
    assert occ.roles == (("compute", RolePlan(regs=88, warpgroups=4)),)
    assert (occ.stages, occ.smem_bytes, occ.threads, occ.blocks_per_sm) == (1, 0, 512, 1)


def test_softmax_hand_count() -> None:
    occ = plan_of("softmax")
    # 16 warps, one row each: xf 32 + row_max 1 = 33; addresses: X and Y share one (2) + bx = 3;
    # 33 + 3 + 16 = 52 -> 56; 65536 // (512 x 56) = 2
    assert occ.budget == RegisterBudget(acc_regs=0, live_tile_regs=33, addr_regs=3, overhead=16)
    assert occ.roles == (("compute", RolePlan(regs=56, warpgroups=4)),)
    assert (occ.stages, occ.smem_bytes, occ.threads, occ.blocks_per_sm) == (1, 0, 512, 2)


def test_rotary_hand_count() -> None:
    occ = plan_of("rotary")
    # 16 x 64 tiles over 128 threads: bf16 4 regs, f32 8. The products and sums of the rotation are
    # one element-wise chain (they stream), and the f32 casts a, b, cf, sf of the four loaded tiles are
    # converted at their uses (_widened_at_use): x1, x2, c, s stay packed (4 each) to the last multiply;
    # peak: those 16 and a bf16 output tile (4) = 20. Addresses: X[.., 0], X[.., 1] and Y's two halves share one
    # (the halves are an immediate offset apart), Cos and Sin another, dead at the peak (their loads are done):
    # 2 + bx = 3; 20 + 3 + 16 = 39 -> 40; 65536 // (128 x 40) = 12 blocks (ptxas: 38 registers on sm_90a).
    assert occ.budget == RegisterBudget(acc_regs=0, live_tile_regs=20, addr_regs=3, overhead=16)
    assert occ.roles == (("compute", RolePlan(regs=40, warpgroups=1)),)
    assert (occ.stages, occ.smem_bytes, occ.threads, occ.blocks_per_sm) == (1, 0, 128, 12)


def test_stages_chosen_when_not_annotated(in_tmp: None) -> None:
    # gemm without @stages: 4 stages fit (197696 B), 5 would not (246864 B), the cap is 4 anyway;
    # with 256-wide K tiles one stage is 128 x 256 + 256 x 256 bf16 = 196608 B: only 1 fits.
    text = GEMM.format(bk=64, b_rows=64, stages="")
    module = run_text(text, ["create-tma", "plan-occupancy"])
    assert OccupancyPlan.of(module.kernel).stages == 4
    loop = next(op for op in module.kernel.walk() if op.name == "scf.for")
    assert loop.attrs["stages"] == 4
    text = GEMM.format(bk=256, b_rows=256, stages="")
    occ = OccupancyPlan.of(run_text(text, ["create-tma", "plan-occupancy"]).kernel)
    assert occ.stages == 1 and occ.smem_bytes == 196608 + 16 + 1024


GEMM = """\
tk.kernel @gemm {{grid = ["M / 128", "N / 256"], warpgroups = {{consumers = 2}}}} {{
  ^(%A: gl<bf16>[M, K], %B: gl<bf16>[K, N], %C: gl<bf16>[M, N])
  %a = tk.alloc : st<bf16, 128, {bk}, swizzle=128, align=1024>
  %b = tk.alloc : st<bf16, {b_rows}, 256, swizzle=128, align=1024>
  %acc = tk.fill {{value = 0.0}} : rt<f32, 128, 256>
  %kt = tk.size {{name = "K"}} : i32
  %c0 = arith.const {{value = 0}} : i32
  %c1 = arith.const {{value = 1}} : i32
  %bx = tk.block_id {{dim = 0}} : i32
  %by = tk.block_id {{dim = 1}} : i32
  %acc.1 = scf.for %c0, %kt, %c1, %acc {stages}: rt<f32, 128, 256> {{
    ^(%k: i32, %acc.2: rt<f32, 128, 256>)
    tk.load %a, %A, %bx, %k
    tk.load %b, %B, %k, %by
    %acc.3 = tk.mma %a, %b, %acc.2 : rt<f32, 128, 256>
    scf.yield %acc.3
  }}
  %out = tk.cast %acc.1 : rt<bf16, 128, 256>
  tk.store %C, %out, %bx, %by
}}
"""


def test_explicit_stages_that_do_not_fit_is_a_located_error(in_tmp: None) -> None:
    text = GEMM.format(bk=64, b_rows=64, stages="{stages = 5} ")
    with pytest.raises(CompileError) as e:
        run_text(text, ["create-tma", "plan-occupancy"])
    msg = e.value.format()
    assert msg.startswith("k.tkir:11:")  # the loop
    # 5 x 49152 + 5 x 2 x 8 + 1024 = 246864
    assert "error: shared memory: @stages(5) needs 246864 B > 232448 B per block" in msg
    assert "5 stages x st<bf16, 64, 256, swizzle=128, align=1024> needs 163840 B" in msg
    assert "^" in msg.splitlines()[2]


def test_tile_that_cannot_fit_names_the_largest_consumer(in_tmp: None) -> None:
    text = """\
tk.kernel @k {grid = ["M / 128"]} {
  ^(%A: gl<bf16>[M, K], %B: gl<bf16>[K, N])
  %a = tk.alloc : st<bf16, 128, 64, swizzle=128, align=1024>
  %b = tk.alloc : st<bf16, 256, 512, swizzle=128, align=1024>
  %kt = tk.size {name = "K"} : i32
  %c0 = arith.const {value = 0} : i32
  %c1 = arith.const {value = 1} : i32
  scf.for %c0, %kt, %c1 {
    ^(%k: i32)
    tk.load %a, %A, %c0, %k
    tk.load %b, %B, %k, %c0
    scf.yield
  }
}
"""
    with pytest.raises(CompileError) as e:
        run_text(text, ["create-tma", "plan-occupancy"])
    msg = e.value.format()
    # b = 256 x 512 bf16 = 262144 B on its own: one stage cannot fit; the error points at its alloc
    assert msg.startswith("k.tkir:4:")
    assert "shared memory: 1 stage x st<bf16, 256, 512, swizzle=128, align=1024> needs 262144 B" in msg
    assert "> 232448 B" in msg
    assert msg.splitlines()[1] == "  %b = tk.alloc : st<bf16, 256, 512, swizzle=128, align=1024>"
    assert msg.splitlines()[2] == "       ^"


def test_consumer_registers_that_do_not_fit(in_tmp: None) -> None:
    # 256 x 256 f32 accumulator over 2 consumer warpgroups = 256 registers per thread; with addresses
    # 14 and overhead 16: 286 -> 288 > 240, the most consumers get (producer at 24: (504 - 24) / 2)
    text = GEMM.format(bk=64, b_rows=64, stages="{stages = 2} ")
    for small, big in (("rt<f32, 128, 256>", "rt<f32, 256, 256>"), ("st<bf16, 128, 64,", "st<bf16, 256, 64,"),
                       ("rt<bf16, 128, 256>", "rt<bf16, 256, 256>")):
        text = text.replace(small, big)
    with pytest.raises(CompileError) as e:
        run_text(text, ["create-tma", "plan-occupancy"])
    msg = e.value.format()
    assert "error: registers: 2 consumer warpgroups: 288 per thread needed > 240 available" in msg
    assert "acc_regs 256" in msg
    assert "largest: %acc.2 rt<f32, 256, 256> = 256 per thread" in msg
    assert msg.startswith("k.tkir:11:")  # the loop that carries the accumulator


def test_compute_registers_that_do_not_fit(in_tmp: None) -> None:
    text = """\
tk.kernel @big {grid = ["N / 64"]} {
  ^(%X: gl<f32>[N, 1024], %Y: gl<f32>[N, 1024])
  %bx = tk.block_id {dim = 0} : i32
  %c0 = arith.const {value = 0} : i32
  %x = tk.load %X, %bx, %c0 : rt<f32, 64, 1024>
  %y = tk.exp %x : rt<f32, 64, 1024>
  %z = tk.add %x, %y : rt<f32, 64, 1024>
  tk.store %Y, %z, %bx, %c0
}
"""
    with pytest.raises(CompileError) as e:
        run_text(text, ["plan-occupancy"])
    msg = e.value.format()
    assert msg.startswith("k.tkir:5:")
    # x: 64 x 1024 f32 over 128 threads = 512; exp(x) streams into the add, which replaces x:
    # 512 + addresses (2 x 2 + bx) 5 + 16 = 533 -> 536
    assert "registers: 536 per thread needed > 255 available" in msg
    assert "largest: %x rt<f32, 64, 1024> = 512 per thread" in msg


def test_ring_buffered_tiles_only_inside_the_loop() -> None:
    # attention-like: q loaded once before the loop (and the O staging tile) are counted once, k and v
    # inside the loop per stage
    occ = plan_of("attention_fwd", D=64)
    assert occ.smem.fixed_bytes == 64 * 64 * 2 * 2
    assert occ.smem.stage_bytes == 2 * 64 * 64 * 2


def test_a_block_that_cannot_get_its_registers_is_refused() -> None:
    """rmsnorm in one pass at D = 4096 with 16 rows: 152 registers per thread (216 before x stayed
    bf16) over 512 threads is more than one block's share of the register file (128), so ptxas would
    spill (measured before this check: 1496 spill stores under a 64-register cap). plan-occupancy
    refuses it, located at the tile's load."""
    import re

    import tkir

    with pytest.raises(CompileError) as e:
        tkir.compile(str(ROW_KERNELS / "rmsnorm.tk"), D=4096, DC=4096)
    assert re.search(r"512 threads per block: (\d+) per thread needed > 128 available", str(e.value))
    assert int(re.search(r"block: (\d+) per thread", str(e.value))[1]) > 128
    load_line = next(i for i, ln in enumerate((ROW_KERNELS / "rmsnorm.tk").read_text().splitlines(), 1)
                     if "reg x: rt<bf16, ROWS, D> = X[block.x, 0]" in ln)
    assert f"rmsnorm.tk:{load_line}:" in str(e.value)  # the tile's load


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_more_than_1024_threads_is_refused(tmp_path, target: str) -> None:
    """@warpgroups(consumers=16) is 2048 threads: refused at the kernel, not launched (issue 14)."""
    import tkir

    src = tmp_path / "wide.tk"
    src.write_text("@warpgroups(consumers=16)\nkernel k(A: gl<f32>[N, 64]) grid(N / 16) {\n"
                   "    reg x: rt<f32, 16, 64> = A[block.x, 0]\n    A[block.x, 0] = x\n}\n", encoding="utf-8")
    with pytest.raises(CompileError) as e:
        tkir.compile(str(src), target=target)
    assert e.value.format().startswith(f"{src}:2:8: error: 2048 threads per block: more than the 1024")


NESTED_K_LOOP = """\
kernel nested(A: gl<f16>[N, K], B: gl<f16>[K, P], Y: gl<f16>[N, P])
    grid(1)
{
    shared a: st<f16, 64, 64>
    shared b: st<f16, 64, 64>
    for i in 0 .. cdiv(N, 64) {
        reg acc: rt<f32, 64, 64> = 0
        for k in 0 .. cdiv(K, 64) {
            a = A[i, k]
            b = B[k, 0]
            acc += a @ b
        }
        Y[i, 0] = f16(acc)
    }
}
"""


def test_a_k_loop_nested_in_a_run_time_loop_keeps_one_role(tmp_path: Path) -> None:
    """pipeline rotates top-level loops only, so plan-occupancy plans no producer warpgroup (and no
    stages) for a K loop inside another loop. It planned one, and the second warpgroup of the 256-thread
    block ran the consumers' wgmma with its own warpgroup's A rows, past the 64-row tile: the GPU result
    of the conformance case mma_ragged_kn-loop-f16-sm_90a was wrong in 5,589 of 5,600 elements."""
    src = tmp_path / "nested.tk"
    src.write_text(NESTED_K_LOOP, encoding="utf-8")
    module = compile_file(str(src))
    PassManager(load_registry(), [*UP_TO_OCCUPANCY, "pipeline"]).run(module, Options(target="sm_90a"))
    plan = OccupancyPlan.of(module.kernel)
    assert plan.role("producer") is None and plan.role("compute") is not None
    assert plan.threads == 128 and plan.stages == 1
    assert plan.smem_bytes == 2 * 64 * 64 * 2 + 1024  # the two tiles once each, plus the TMA alignment pad
    assert not any(op.name.startswith("pipe.") for op in module.kernel.walk())
    assert all("stages" not in op.attrs for op in module.kernel.walk() if op.name == "scf.for")
