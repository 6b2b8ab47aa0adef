"""The pipelined mma.sync path (`--target sm_80`: pipeline-cp-async, cp.async ring buffers, fragments
loaded ahead of their mma.sync; for a loop that only copies and multiplies, cp.async producer warps and
consumer warps meeting at mbarriers, plan-occupancy{producer_warps} and pipeline) on the GPU against the examples' numpy references (marked gpu; no
torch: tkir's own device arrays). Sizes include ragged M, N, K and sequence lengths, a K shorter than
the pipeline's prologue, the tile shape recommended for mma.sync (BM=256 BN=128 BK=64), and the
ablations (without the pass; fragments loaded right before their mma.sync)."""

from __future__ import annotations

import numpy as np
import pytest

import tkir
from tkir.backend import cuda as tkcuda
from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.tools.check import check_kernel
from tkir.tools.examples import load_companion, relative_error

GEMM_SM80 = {"BM": 256, "BN": 128, "BK": 64, "STAGES": 3}
# gemm.tk's auto consts at the header's old values (examples/gemm.py): a case's kernel is compiled once, as its
# consts say (the auto ones chosen per size bucket at the call would run another kernel than the IR checked)
GEMM_CONSTS = load_companion("examples/gemm.tk").DEFAULT_CONSTS


def _given(name: str, consts: dict) -> dict:
    return {**GEMM_CONSTS, **consts} if name == "gemm" else consts

# a gemm's loop is one role by default (the rotated loop); cp.async producer warps are
# asked for with plan-occupancy{producer_warps=N} (PW1, PW4); the one-role
# cp.async loop of pipeline-cp-async is its ablation, and NO_PIPE / AHEAD0 ablate that loop
_PW0 = "plan-occupancy{producer_warps=0}"
PW0 = ",".join(_PW0 if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE)
NO_PIPE = ",".join(_PW0 if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE if p != "pipeline-cp-async")
AHEAD0 = ",".join({"pipeline-cp-async": "pipeline-cp-async{fragments_ahead=0}", "plan-occupancy": _PW0}.get(p, p)
                  for p in DEFAULT_PIPELINE)
PW1 = ",".join("plan-occupancy{producer_warps=1}" if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE)
PW4 = ",".join("plan-occupancy{producer_warps=4}" if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE)
# the rotated loop (pipeline-cp-async{rotate=R}): the barrier R units before the end of the mma, the next
# iteration's first k16 step of fragments loaded then and carried over the back edge
ROT1 = ",".join({"pipeline-cp-async": "pipeline-cp-async{rotate=1}", "plan-occupancy": _PW0}.get(p, p)
                for p in DEFAULT_PIPELINE)
ROT8 = ",".join({"pipeline-cp-async": "pipeline-cp-async{rotate=8}", "plan-occupancy": _PW0}.get(p, p)
                for p in DEFAULT_PIPELINE)
ROT0 = ",".join({"pipeline-cp-async": "pipeline-cp-async{rotate=0}", "plan-occupancy": _PW0}.get(p, p)
                for p in DEFAULT_PIPELINE)
ROTATED = (ROT1, ROT8)
# stage-epilogue's ablation: the accumulator stored with 4-byte pairs straight from registers
NO_STAGE = ",".join(p for p in DEFAULT_PIPELINE if p != "stage-epilogue")
ROLES = "tk.role {kind = producer, warps"
# a 64 x 64 tile: the one-role loop keeps more mma warps per SM (6 blocks of 4) than producer warps would,
# so plan-occupancy's automatic choice is one role there
SMALL_TILE = {"BM": 64, "BN": 64, "BK": 32}

CASES = [
    ("gemm", dict(M=256, N=512, K=192), {}, None),
    ("gemm", dict(M=1000, N=744, K=520), {}, None),                 # ragged in M, N and K
    ("gemm", dict(M=128, N=256, K=40), {}, None),                   # one k-tile: the prologue's other groups empty
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, None),
    ("gemm", dict(M=2048, N=2048, K=2048), GEMM_SM80, None),
    ("gemm", dict(M=520, N=264, K=1000), {"BM": 256, "BN": 128, "BK": 32, "STAGES": 4}, None),
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, NO_PIPE),
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, AHEAD0),
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, PW0),          # the producer warps' ablation
    ("gemm", dict(M=128, N=256, K=40), {}, PW0),
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, PW1),          # one producer warp
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, PW4),          # four producer warps (the default before the rotated loop)
    ("gemm", dict(M=1000, N=744, K=520), {}, PW4),
    ("gemm", dict(M=77, N=24, K=8), SMALL_TILE, PW4),               # a k-loop of one partial tile, producers
    ("gemm", dict(M=77, N=24, K=8), SMALL_TILE, None),              # the same, one role (the default there)
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, ROT1),         # the rotated loop, 8 warps of 64 x 64
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, ROT8),         # its barrier a whole k16 step before the end
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, ROT0),         # the rotation's ablation
    ("gemm", dict(M=1000, N=744, K=520), {**GEMM_SM80, "STAGES": 2}, ROT1),   # two stages: wait_group 0
    ("gemm", dict(M=520, N=264, K=1000), {"BM": 256, "BN": 128, "BK": 32, "STAGES": 4}, ROT1),
    ("gemm", dict(M=128, N=256, K=40), {}, ROT1),                   # one iteration: the carried words are dead
    ("gemm", dict(M=77, N=24, K=8), SMALL_TILE, ROT1),              # 6 blocks per SM: no room, not rotated
    ("gemm", dict(M=300, N=520, K=1000), {"BM": 128, "BN": 256, "BK": 32, "STAGES": 4}, ROT1),
    ("gemm", dict(M=1000, N=744, K=520), GEMM_SM80, NO_STAGE),     # stage-epilogue's ablation
    ("gemm", dict(M=1000, N=744, K=520), {"BM": 64, "BN": 16, "BK": 32}, None),  # 16-column warps: not staged
    ("linear", dict(M=1000, N=744, K=520), {"ACT": 1}, ROT1),
    ("linear", dict(M=1000, N=744, K=520), {"ACT": 1}, None),      # the epilogue after the rotated loop
    ("linear", dict(M=1000, N=744, K=520), {"ACT": 1}, PW4),       # an epilogue in the consumer role
    ("attention_fwd", dict(B=2, H=2, N=512), {}, None),
    ("attention_fwd", dict(B=2, H=2, N=300), {}, None),              # a ragged last key block
    ("attention_fwd", dict(B=1, H=2, N=1000), {"CAUSAL": 1}, None),
    ("attention_fwd", dict(B=2, H=2, N=200), {"D": 64, "CAUSAL": 1}, None),
    ("attention_fwd", dict(B=1, H=2, N=4097), {"STAGES": 3}, None),
    ("attention_fwd", dict(B=1, H=1, N=1), {}, None),                # one key: the loop runs once
    ("attention_fwd", dict(B=2, H=2, N=300), {}, NO_PIPE),
]


def _id(case: tuple) -> str:
    name, sizes, consts, passes = case
    tag = {None: "", NO_PIPE: "-no-pipe", AHEAD0: "-ahead0", PW0: "-pw0", PW1: "-pw1", PW4: "-pw4",
           ROT1: "-rot1", ROT8: "-rot8", ROT0: "-rot0", NO_STAGE: "-no-stage"}[passes]
    return f"{name}-" + "-".join(f"{k}{v}" for k, v in {**sizes, **consts}.items()) + tag


@pytest.mark.gpu
@pytest.mark.parametrize("name, sizes, consts, passes", CASES, ids=[_id(c) for c in CASES])
def test_sm80_matches_reference_on_gpu(name: str, sizes: dict, consts: dict, passes: str | None) -> None:
    path = f"examples/{name}.tk"
    comp = load_companion(path)
    k = tkir.compile(path, target="sm_80", passes=passes, **_given(name, consts))
    roles = name in ("gemm", "linear") and passes in (PW1, PW4)
    assert (ROLES in k.ir) == roles
    assert ("pipe.async_wait" in k.ir) == (not roles and passes != NO_PIPE)
    if passes in ROTATED or passes == ROT0:  # a 64 x 64 tile at 6 blocks per SM has no registers for the rotation
        assert ("frag_rotate" in k.ir) == (passes in ROTATED and consts != SMALL_TILE)
    if name in ("gemm", "linear"):  # stage-epilogue: every gemm epilogue here but the 16-column warps'
        assert ("tk.store_warp_staged" in k.ir) == (passes != NO_STAGE and consts.get("BN") != 16)
    result = check_kernel(k, comp, sizes, consts, name=name)  # outputs poisoned with NaN: unwritten fails
    assert result.ok, result


@pytest.mark.gpu
@pytest.mark.parametrize("passes, mark", [(None, "frag_rotate = "), (PW4, ROLES)], ids=["rotated", "pw4"])
def test_sm80_gemm_matches_the_interpreter_on_gpu(passes: str | None, mark: str) -> None:
    """The GPU and the interpreter run the same pipelined IR: their outputs agree to bf16 rounding
    (each sums the same products in f32, in another order). The default (the rotated one-role loop) and the
    producer warps."""
    path, sizes = "examples/gemm.tk", dict(M=300, N=200, K=136)
    comp = load_companion(path)
    k = tkir.compile(path, target="sm_80", passes=passes, **_given("gemm", GEMM_SM80))
    assert mark in k.ir
    host = comp.make_inputs(np.random.default_rng(5), sizes, GEMM_SM80)
    ref = [a.copy() for a in host]
    tkir.interpret(k, *ref)
    dev = [tkcuda.to_device(a) for a in host]
    k(*dev)
    got, want = dev[2].numpy().astype(np.float64), ref[2].astype(np.float64)
    assert relative_error(got, want) < 1e-2


# The 2-D warp grid of mma.sync accumulators (infer-layouts: `mma_c` with `warps_n`, 64 x 64 warp tiles at
# both 8-warp gemm tiles) against the references, with the 1-D layout (whole rows per warp) as the
# ablation; linear's bias is a column vector of the warp's own columns.
ONE_D = ",".join("infer-layouts{mma_warps_n=1}" if p == "infer-layouts" else p for p in DEFAULT_PIPELINE)
FORCE_2 = ",".join("infer-layouts{mma_warps_n=2}" if p == "infer-layouts" else p for p in DEFAULT_PIPELINE)
GRID_CASES = [
    ("gemm", dict(M=4096, N=4096, K=4096), dict(BM=256, BN=128, BK=64, STAGES=4), None, "warps_n = 2"),
    ("gemm", dict(M=4096, N=4096, K=4096), dict(BM=128, BN=256, BK=64, STAGES=4), None, "warps_n = 4"),
    ("gemm", dict(M=1000, N=744, K=520), dict(BM=256, BN=128, BK=64, STAGES=4), None, "warps_n = 2"),  # ragged
    ("gemm", dict(M=1000, N=744, K=520), {}, None, "warps_n = 4"),
    ("gemm", dict(M=520, N=264, K=1000), dict(BM=256, BN=128, BK=32, STAGES=4), None, "warps_n = 2"),
    ("gemm", dict(M=300, N=200, K=136), dict(BM=64, BN=64, BK=32, STAGES=3), None, "warps_n = 2"),   # 4 warps, 2 x 2
    ("gemm", dict(M=1000, N=744, K=520), {}, FORCE_2, "warps_n = 2"),                                # 4 x 2 forced
    ("gemm", dict(M=1000, N=744, K=520), dict(BM=256, BN=128, BK=64, STAGES=4), ONE_D, None),        # the ablation
    ("linear", dict(M=256, N=512, K=192), {}, None, "warps_n = 4"),
    ("linear", dict(M=1000, N=744, K=520), {"ACT": 1}, None, "warps_n = 4"),
    ("linear", dict(M=1000, N=744, K=520), {"ACT": 2, "BM": 256, "BN": 128}, None, "warps_n = 2"),
]


def _grid_id(case: tuple) -> str:
    name, sizes, consts, passes, _ = case
    tag = {None: "", ONE_D: "-one-d", FORCE_2: "-force2"}[passes]
    return f"{name}-" + "-".join(f"{k}{v}" for k, v in {**sizes, **consts}.items()) + tag


@pytest.mark.gpu
@pytest.mark.parametrize("name, sizes, consts, passes, grid", GRID_CASES, ids=[_grid_id(c) for c in GRID_CASES])
def test_sm80_warp_grid_matches_reference_on_gpu(name: str, sizes: dict, consts: dict, passes: str | None,
                                                 grid: str | None) -> None:
    path = f"examples/{name}.tk"
    comp = load_companion(path)
    k = tkir.compile(path, target="sm_80", passes=passes, **_given(name, consts))
    acc = next(line for line in k.ir.splitlines() if "tk.mma" in line)
    assert (grid in acc) if grid else ("warps_n" not in acc), acc
    result = check_kernel(k, comp, sizes, consts, rng=np.random.default_rng(13), name=name)
    assert result.ok, result


# Whole-row warps of 32 rows (infer-layouts' WHOLE_ROW_WARP_ROWS): attention's accumulators need whole
# rows per warp (row max, row sum), and a 128- or 192-row query tile gives each warp two m16 blocks,
# FlashAttention-2's shape; 64 rows stay 4 warps of 16. Ragged and causal sequences included.
ROW_WARP_CASES = [
    (dict(B=2, H=2, N=300), dict(BQ=128, BKV=64), "warps = 4"),
    (dict(B=1, H=2, N=1000), dict(BQ=128, BKV=64, CAUSAL=1), "warps = 4"),
    (dict(B=1, H=2, N=4097), dict(BQ=128, BKV=32, STAGES=3), "warps = 4"),
    (dict(B=2, H=1, N=777), dict(BQ=192, BKV=64), "warps = 6"),
    (dict(B=2, H=1, N=777), dict(BQ=192, BKV=64, CAUSAL=1), "warps = 6"),
    (dict(B=2, H=2, N=500), dict(BQ=128, BKV=128, D=64), "warps = 4"),
    (dict(B=1, H=2, N=300), dict(BQ=128, BKV=64, D=256), "warps = 8"),   # O would be 256 registers at 4 warps
    # overlap-mma on the mma.sync path (S >= 3: pipeline-cp-async holds the stage the rotated P V reads)
    (dict(B=2, H=2, N=1000), dict(BQ=128, BKV=32, STAGES=3), "warps = 4"),
    (dict(B=1, H=2, N=4097), dict(BQ=128, BKV=32, STAGES=4), "warps = 4"),
    (dict(B=2, H=1, N=777), dict(BQ=128, BKV=32, STAGES=3, CAUSAL=1), "warps = 4"),
    (dict(B=1, H=1, N=31), dict(BQ=128, BKV=32, STAGES=3), "warps = 4"),     # one key block: prologue, epilogue
    (dict(B=2, H=2, N=500), dict(BQ=128, BKV=64, STAGES=3, D=64), "warps = 4"),
]


@pytest.mark.gpu
@pytest.mark.parametrize("sizes, consts, warps", ROW_WARP_CASES,
                         ids=["-".join(f"{k}{v}" for k, v in {**s, **c}.items()) for s, c, _ in ROW_WARP_CASES])
def test_sm80_whole_row_warps_match_reference_on_gpu(sizes: dict, consts: dict, warps: str) -> None:
    path = "examples/attention_fwd.tk"
    comp = load_companion(path)
    k = tkir.compile(path, target="sm_80", **consts)
    head = next(line for line in k.ir.splitlines() if "tk.kernel" in line)
    assert warps in head, head
    assert ("cp_hold = 1" in k.ir) == (consts.get("STAGES", 2) >= 3), "rotated exactly where a stage is held"
    result = check_kernel(k, comp, sizes, consts, rng=np.random.default_rng(17), name="attention_fwd")
    assert result.ok, result


@pytest.mark.gpu
@pytest.mark.parametrize("target, consts", [("sm_80", {}), ("sm_80", {"ACT": 1}), ("sm_90a", {"STAGES": 3}),
                                            ("sm_90a", {"STAGES": 3, "ACT": 1})], ids=str)
def test_producer_filecheck_kernel_matches_numpy_on_gpu(target: str, consts: dict) -> None:
    """The kernel of tests/filecheck/passes/pipeline-sm80-producer.tk (not an example: a gemm with an optional SiLU
    epilogue) on both targets, ragged sizes, against numpy in float64 (sm_90a needs 3 stages: its staged
    epilogue does not fit beside 4)."""
    # the file's subject, the producer warps, asked for on sm_80 (one role is the default)
    k = tkir.compile("tests/filecheck/passes/pipeline-sm80-producer.tk", target=target,
                     passes=PW4 if target == "sm_80" else None, **consts)
    assert (ROLES in k.ir) == (target == "sm_80")
    _gemm_matches_numpy(k, silu=bool(consts.get("ACT")))


@pytest.mark.gpu
@pytest.mark.parametrize("target, consts", [("sm_80", {}), ("sm_80", {"EPI": 1}), ("sm_80", {"BK": 64}),
                                            ("sm_90a", {}), ("sm_90a", {"EPI": 1})], ids=str)
def test_rotate_filecheck_kernel_matches_numpy_on_gpu(target: str, consts: dict) -> None:
    """The kernel of tests/filecheck/passes/pipeline-cp-async-rotate.tk (not an example: a 4-warp 128 x 128 gemm, two
    blocks per SM on sm_80, with an optional scale inside the loop that keeps it unrotated) on both targets,
    ragged sizes, against numpy in float64."""
    k = tkir.compile("tests/filecheck/passes/pipeline-cp-async-rotate.tk", target=target, **consts)
    assert ("frag_rotate = " in k.ir) == (target == "sm_80" and not consts.get("EPI"))
    _gemm_matches_numpy(k, silu=False)


def _gemm_matches_numpy(k: tkir.api.CompiledKernel, silu: bool) -> None:
    """C = A @ B (then SiLU) at a ragged 1000 x 264 x 520, bf16 in, against numpy in float64; C starts NaN."""
    import ml_dtypes

    rng = np.random.default_rng(23)
    m, n, kk = 1000, 264, 520
    a = rng.standard_normal((m, kk)).astype(ml_dtypes.bfloat16)
    b = rng.standard_normal((kk, n)).astype(ml_dtypes.bfloat16)
    c = np.full((m, n), np.nan, ml_dtypes.bfloat16)
    dev = [tkcuda.to_device(x) for x in (a, b, c)]
    k(*dev)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    if silu:
        ref = ref / (1.0 + np.exp(-ref))
    assert relative_error(dev[2].numpy().astype(np.float64), ref) < 1e-2
