"""stream-k: the data-parallel + stream-K schedule, checked in the interpreter against the reference.

A small NUM_SMS makes small matrices take the stream-K path: e.g. 7 tiles on 4 blocks leave 3 tiles
whose K iterations are spread over all 4 blocks, so some blocks do pieces of two tiles and owners
add one or two partials. Every K iteration must be summed exactly once for C to match.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_runtime import FAKE_BASE, bf16  # tests/ is on sys.path under pytest

import tkir
import tkir.interp as interp
from tkir import symexpr
from tkir.backend.runtime import bind
from tkir.diagnostics import CompileError
from tkir.tools.examples import check_interpreted, load_companion

GEMM = "examples/gemm.tk"
COMP = load_companion(GEMM)


def _gemm(**kw: object) -> tkir.api.CompiledKernel:
    """gemm.tk with its auto consts at the header's old values (examples/gemm.py), the ones `kw` names replaced."""
    return tkir.compile(GEMM, **{**COMP.DEFAULT_CONSTS, **kw})


def _count_partials(monkeypatch) -> dict[str, int]:
    counts = {"tk.partial_store": 0, "tk.partial_add": 0}
    for name in counts:
        fn = interp.HANDLERS[name]

        def counted(op, args, frame, fn=fn, name=name):
            counts[name] += 1
            return fn(op, args, frame)

        monkeypatch.setitem(interp.HANDLERS, name, counted)
    return counts


def with_stream_k(params: str = "") -> list[str]:
    """The default pipeline with its opt-in stream-k forced (every kernel it applies to), with `params`."""
    return ["stream-k" + (f"{{{params}}}" if params else "") if p.startswith("stream-k") else p
            for p in tkir.api.default_pipeline()]


ON = with_stream_k()
SPLIT_ALWAYS = with_stream_k("min_iters=4 max_tail=100")


@functools.cache
def _split(params: str) -> tkir.api.CompiledKernel:
    """gemm.tk through the pipeline with stream-k forced with `params`, compiled once per test process (the
    interpreter only reads the module; the hypothesis test below runs 25 examples of one kernel)."""
    return tkir.compile(GEMM, passes=with_stream_k(params))


@pytest.mark.parametrize("sizes, num_sms, stores", [
    (dict(M=384, N=512, K=512), 4, 2),    # 6 tiles on 4 blocks: 2 tiles split in halves
    (dict(M=896, N=256, K=512), 4, 3),    # 7 tiles on 4: blocks cross tile boundaries
    (dict(M=896, N=256, K=504), 4, 3),    # ragged K (TMA zero fill in the last iteration)
    (dict(M=1000, N=296, K=696), 6, 4),   # ragged everything: 16 tiles on 6 blocks, 4 split
])
def test_stream_k_schedule_matches_reference(monkeypatch, sizes, num_sms, stores):
    k = _split("min_iters=4 max_tail=100")
    assert k.module.kernel.attrs["stream_k"] == {"min_iters": 4, "max_tail_pct": 100}
    counts = _count_partials(monkeypatch)
    (res,) = check_interpreted(k.module, COMP, sizes, {}, seed=0, num_sms=num_sms)
    assert res.ok, res
    assert counts["tk.partial_store"] == stores == counts["tk.partial_add"]


def test_default_heuristic_splits_only_small_tails_with_enough_iterations(monkeypatch):
    k = tkir.compile(GEMM, passes=ON)
    assert k.module.kernel.attrs["stream_k"] == {"min_iters": 16, "max_tail_pct": 60}
    counts = _count_partials(monkeypatch)
    # 7 tiles on 4 blocks: the tail (3 of 4 blocks) is over 60% full: not split
    assert check_interpreted(k.module, COMP, dict(M=896, N=256, K=2048), {}, seed=0, num_sms=4)[0].ok
    # 6 tiles on 4: tail of 2 (50%) but 2 x 8 / 4 = 4 iterations per block < 16: not split
    assert check_interpreted(k.module, COMP, dict(M=384, N=512, K=512), {}, seed=0, num_sms=4)[0].ok
    # 4 tiles on 132 blocks: no full round, nothing to balance
    assert check_interpreted(k.module, COMP, dict(M=256, N=512, K=512), {}, seed=0)[0].ok
    assert counts == {"tk.partial_store": 0, "tk.partial_add": 0}
    # 6 tiles on 4, K = 2048: 2 x 32 / 4 = 16 iterations per block: split
    assert check_interpreted(k.module, COMP, dict(M=384, N=512, K=2048), {}, seed=0, num_sms=4)[0].ok
    assert counts == {"tk.partial_store": 2, "tk.partial_add": 2}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tm=st.integers(1, 5), tn=st.integers(1, 3), kt=st.integers(1, 9), num_sms=st.integers(1, 7),
       ragged=st.booleans())
def test_stream_k_covers_every_iteration_once(tm, tn, kt, num_sms, ragged):
    """Any tile count, block count and K (min_iters 1: split whenever there is a full round)."""
    k = _split("min_iters=1 max_tail=100")
    sizes = dict(M=128 * tm - (37 if ragged and tm > 1 else 0), N=256 * tn, K=64 * kt - (8 if ragged else 0))
    (res,) = check_interpreted(k.module, COMP, sizes, {}, seed=tm * 100 + kt, num_sms=num_sms)
    assert res.ok, (sizes, num_sms, res)


# Skinny (decode-time) GEMMs: fewer tiles than blocks, so stream-K spreads the K loops of *all* tiles
# over the blocks (no data-parallel phase). K = 1000 and 3000 are not multiples of BK = 64 (the last
# iteration is TMA zero-filled past K); M = 1 and 17 leave most rows of a 64- or 128-row tile
# zero-filled, and the stores clip them. (consts, sizes, pipeline params or None for @stream_k(1) with
# the default pipeline, blocks, partial tiles stored).
SKINNY = [
    (dict(BM=64, BN=64), dict(M=1, N=256, K=3000), None, 11, 10),    # 4 tiles x 47 its / 16: 11 blocks
    (dict(BM=128, BN=128), dict(M=17, N=200, K=3000), None, 5, 4),   # 2 tiles (N ragged) on 5 blocks
    (dict(BM=64, BN=128), dict(M=64, N=256, K=3000), None, 5, 4),
    (dict(BM=64, BN=64), dict(M=17, N=192, K=1000), None, 3, 0),     # 3 x 16 / 16 = 3 blocks: not split
    (dict(BM=64, BN=64), dict(M=17, N=192, K=1000), "min_iters=4", 12, 9),  # 3 tiles over 12 blocks
    (dict(BM=64, BN=128), dict(M=1, N=128, K=1000), "min_iters=4", 4, 3),   # 1 tile over 4 blocks
    (dict(BM=128, BN=256), dict(M=64, N=256, K=3000), "min_iters=4", 11, 10),  # 1 tile, 47 its, 11 blocks
    (dict(BM=64, BN=64), dict(M=64, N=256, K=1000), "min_iters=4 max_tail=100", 16, 12),  # 4 its each
]


@pytest.mark.parametrize("consts, sizes, params, blocks, stores", SKINNY)
def test_skinny_gemm_splits_every_tile(monkeypatch, consts, sizes, params, blocks, stores):
    if params is None:
        k = _gemm(SK=1, **consts)
    else:
        k = _gemm(passes=with_stream_k(params), **consts)
    assert "stream_k" in k.module.kernel.attrs
    assert symexpr.evaluate(k.module.kernel.attrs["grid"][0], {**sizes, "NUM_SMS": 132}) == blocks
    counts = _count_partials(monkeypatch)
    (res,) = check_interpreted(k.module, COMP, sizes, consts, seed=1)
    assert res.ok, res
    assert counts["tk.partial_store"] == stores == counts["tk.partial_add"]


def test_skinny_split_on_a_grid_wider_than_it_needs():
    """A grid of NUM_SMS blocks (what the pass launches when it cannot write the K trip count as a
    size expression) over 2 tiles: the kernel's own sk_blocks uses 5 of them, the rest stay idle."""
    k = _gemm(SK=1, BM=64, BN=128)
    k.module.kernel.attrs["grid"] = ["NUM_SMS"]
    (res,) = check_interpreted(k.module, COMP, dict(M=64, N=256, K=3000), dict(BM=64, BN=128), seed=2, num_sms=16)
    assert res.ok, res


def test_stream_k_annotation_is_a_kernel_switch():
    """@stream_k(SK): 0 adds nothing to the IR (the same PTX as no annotation), 1 records the request
    that the default pipeline's stream-k{opt_in=true} consumes; on sm_80 (no warp-specialized roles,
    no persistent tile loop) the pass leaves the kernel alone and it compiles as it would without."""
    assert tkir.api.build_module(GEMM, {**COMP.DEFAULT_CONSTS, "SK": 1}).kernel.attrs["stream_k_requested"] is True
    assert "stream_k_requested" not in tkir.api.build_module(GEMM, COMP.DEFAULT_CONSTS).kernel.attrs
    off = tkir.compile(GEMM)
    assert "stream_k" not in off.module.kernel.attrs
    sm80 = _gemm(SK=1, target="sm_80")
    assert "stream_k" not in sm80.module.kernel.attrs
    assert sm80.asm["ptx"] == _gemm(SK=0, target="sm_80").asm["ptx"]


@pytest.mark.parametrize("ann, msg", [
    ("@stream_k(2)", "bad argument to '@stream_k': expected 0 (off) or 1 (on)"),
    ("@stream_k", "'@stream_k' takes one argument"),
    ("@stream_k(on=1)", "'@stream_k' takes one argument and an optional min_iters="),
    ("@stream_k(M)", "bad argument to '@stream_k'"),
    ("@stream_k(1, min_iters=0)", "min_iters expects a compile-time integer 1..1048576"),
    ("@stream_k(1, min_iters=M)", "min_iters expects a compile-time integer 1..1048576 (K iterations per block "
                                  "of the split), got a value known only at run time"),
    ("@stream_k(1, min_iters=2.5)", "min_iters expects a compile-time integer"),
    ("@stream_k(1, min_iters=4, min_iters=8)", "'@stream_k' takes one argument and an optional min_iters="),
    ("@stream_k(1, tail=8)", "'@stream_k' takes one argument and an optional min_iters="),
])
def test_bad_stream_k_annotations_are_located_errors(tmp_path, ann, msg):
    f = tmp_path / "g.tk"
    f.write_text(Path(GEMM).read_text().replace("@stream_k(SK, min_iters=SKI)", ann))
    with pytest.raises(CompileError, match=re.escape(msg)) as e:
        tkir.compile(str(f))
    assert e.value.loc is not None and e.value.loc.line == 5


def test_min_iters_annotation_sets_the_split():
    """`@stream_k(1, min_iters=I)` replaces the pass's min_iters for this kernel: the grid, the kernel's
    stream_k attr and its block count follow it (M = 64, N = K = 4096 with 64 x 64 tiles: 64 tiles of 64
    iterations; at 16 each the split takes all 132 blocks, at 32 it takes 128, each tile in two halves);
    with SK = 0 the value records nothing (the same PTX for every SKI), and a named pass parameter stays
    the default for kernels that do not say."""
    assert "stream_k_min_iters" not in tkir.api.build_module(GEMM, {**COMP.DEFAULT_CONSTS, "SK": 0, "SKI": 32}).kernel.attrs
    assert tkir.api.build_module(GEMM, {**COMP.DEFAULT_CONSTS, "SK": 1, "SKI": 32}).kernel.attrs["stream_k_min_iters"] == 32
    blocks = {}
    for ski in (16, 32):
        k = _gemm(BM=64, BN=64, SK=1, SKI=ski)
        assert k.module.kernel.attrs["stream_k"] == {"min_iters": ski, "max_tail_pct": 60}
        assert "stream_k_min_iters" not in k.module.kernel.attrs
        blocks[ski] = bind(k.launch, (bf16(64, 4096), bf16(4096, 4096, ptr=FAKE_BASE + 2**24),
                                      bf16(64, 4096, ptr=FAKE_BASE + 2**26)), num_sms=132).grid[0]
    assert blocks == {16: 132, 32: 128}
    assert (_gemm(BM=64, BN=64, SK=0, SKI=32).asm["ptx"]
            == _gemm(BM=64, BN=64, SK=0, SKI=16).asm["ptx"])
    named = _gemm(BM=64, BN=64, SK=1, SKI=32, passes=with_stream_k("min_iters=4 opt_in=true"))
    assert named.module.kernel.attrs["stream_k"]["min_iters"] == 32
    (res,) = check_interpreted(_gemm(BM=64, BN=64, SK=1, SKI=4).module, COMP,
                               dict(M=64, N=128, K=1000), dict(BM=64, BN=64), seed=3, num_sms=8)
    assert res.ok, res


def test_misplaced_stream_k_annotation(tmp_path):
    f = tmp_path / "g.tk"
    f.write_text(Path(GEMM).read_text().replace("@stages(STAGES)", "@stream_k(1)"))
    with pytest.raises(CompileError, match="'@stream_k' applies to the kernel, not here"):
        tkir.compile(str(f))


def test_owner_waiting_for_an_unwritten_partial_is_an_error():
    k = tkir.compile(GEMM, passes=SPLIT_ALWAYS)  # its own copy: the attribute is removed below
    k.module.kernel.attrs.pop("stream_k")  # blocks now run first to last: owners come before helpers
    with pytest.raises(interp.InterpError, match="partial tile of block 1 has not been written"):
        check_interpreted(k.module, COMP, dict(M=384, N=512, K=512), {}, seed=0, num_sms=4)


def test_stream_k_is_opt_in_and_applies_to_gemm_only():
    assert "stream_k" not in tkir.compile("examples/attention_fwd.tk", passes=ON).module.kernel.attrs
    off = tkir.compile(GEMM)
    assert "stream_k" not in off.module.kernel.attrs
    assert {p.kind for p in off.launch.params} == {"tensor_map", "pointer", "scalar"}
    assert "stream_k" in tkir.compile(GEMM, passes=ON).module.kernel.attrs


def test_launch_description_and_binding_of_hidden_params():
    k = tkir.compile(GEMM, passes=ON)
    hidden = [p.to_json() for p in k.launch.params if p.kind in ("workspace", "launch_count")]
    assert hidden == [
        {"name": "sk_part", "kind": "workspace", "dtype": "f32", "dims": ["NUM_SMS", 128 * 256]},
        {"name": "sk_flags", "kind": "workspace", "dtype": "i32", "dims": ["NUM_SMS", 2]},
        {"name": "sk_epoch", "kind": "launch_count", "dtype": "i32"},
    ]
    args = (bf16(512, 256), bf16(256, 512, ptr=FAKE_BASE + 2**24), bf16(512, 512, ptr=FAKE_BASE + 2**26))
    bound = bind(k.launch, args, num_sms=132)
    got = [v for kind, v in bound.params if kind in ("workspace", "launch_count")]
    assert got == [("sk_part", 132 * 32768 * 4), ("sk_flags", 132 * 2 * 4), None]


def test_ptx_orders_partials_with_release_and_acquire():
    k = tkir.compile(GEMM, passes=ON)
    ptx = k.asm["ptx"]
    assert not k.asm["ptxas"].spill_stores and not k.asm["ptxas"].warnings
    assert "st.release.gpu.global.b32" in ptx and "ld.acquire.gpu.global.b32" in ptx
    assert "fence.acq_rel.gpu" in ptx and "ld.global.cg.v4.f32" in ptx


def test_stream_k_is_opt_in_in_the_default_pipeline_and_sets_its_grid() -> None:
    """The default pipeline runs stream-k{opt_in=true}: only kernels that ask (@stream_k(1)) change.
    Forced (named without opt_in), it applies to every kernel it can rewrite, as before; its grid is
    one block per SM when there are at least NUM_SMS tiles, else the blocks the split uses."""
    assert "stream-k{opt_in=true}" in tkir.api.default_pipeline()
    assert "stream_k" not in tkir.compile(GEMM).module.kernel.attrs
    assert tkir.compile(GEMM).module.kernel.attrs["grid"][0].startswith("cdiv(")  # balanced, untouched
    forced, asked = _gemm(passes=ON), _gemm(SK=1)
    assert forced.module.kernel.attrs["grid"] == asked.module.kernel.attrs["grid"]
    assert forced.asm["ptx"] == asked.asm["ptx"]
    assert "stream_k_requested" not in asked.module.kernel.attrs  # the request is consumed
    grid = asked.module.kernel.attrs["grid"][0]
    for sizes, blocks in [(dict(M=4096, N=4096, K=4096), 132),   # 512 tiles: one block per SM
                          (dict(M=128 * 133, N=256, K=64), 132),  # 133 tiles, 1 iteration each
                          (dict(M=1, N=4096, K=14336), 132),      # 16 tiles x 224 iterations / 16 > 132
                          (dict(M=64, N=4096, K=2048), 32),       # 16 x 32 / 16 = 32 blocks of 16
                          (dict(M=64, N=4096, K=1024), 16),       # 16 x 16 / 16 = 16: no split, 16 blocks
                          (dict(M=64, N=100 * 256, K=4096), 100),  # 100 tiles fill 76% of 132 > 60%: no split
                          (dict(M=256, N=512, K=512), 4)]:        # 4 x 8 / 16 = 2 < 4 tiles: no split
        assert symexpr.evaluate(grid, {**sizes, "NUM_SMS": 132}) == blocks, sizes


def test_removed_pass_options_spell_the_same_pipeline() -> None:
    """`pass_options={"stream_k": 1, ...}` and `group_m=` were removed in tkir 0.2: a TypeError spells the
    `passes=` that does what they did, and that pipeline gives the IR they gave."""
    with pytest.raises(TypeError, match="tkir.compile\\(\\): pass_options= was removed in tkir 0.2") as e:
        tkir.compile(GEMM, pass_options={"stream_k": 1, "stream_k_min_iters": 4, "stream_k_max_tail": 100})
    spelled = str(e.value).split("passes='")[1].removesuffix("'")
    assert "stream-k{min_iters=4 max_tail=100}" in spelled
    assert tkir.compile(GEMM, passes=spelled).ir == tkir.compile(GEMM, passes=SPLIT_ALWAYS).ir
    with pytest.raises(TypeError, match="group_m= was removed in tkir 0.2: .*persistent\\{group_m=4"):
        tkir.compile(GEMM, group_m=4)


def test_a_random_block_order_is_refused_for_stream_k():
    """interpret(block_seed=): a stream-K kernel's owners wait for higher-numbered blocks, so its blocks keep
    their last-first order (a random one would read partials not yet stored)."""
    import numpy as np

    k = _split("min_iters=4 max_tail=100")
    sizes = dict(M=384, N=512, K=512)
    args = COMP.make_inputs(np.random.default_rng(0), sizes, {})
    with pytest.raises(interp.InterpError, match="block_seed: a stream-K kernel's blocks run last first"):
        interp.interpret(k.module, *args, sizes=sizes, num_sms=4, block_seed=1)


OWN = """// a user's skinny GEMM with a row- and column-scaled epilogue, asking for Stream-K
@stream_k(1)
kernel scaled<BM=64, BN=128, BK=64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], S: gl<f32>[M], T: gl<f32>[N],
                                   C: gl<bf16>[M, N])
    grid(cdiv(M, BM), cdiv(N, BN))
{
    shared a: st<bf16, BM, BK>
    shared b: st<bf16, BK, BN>
    reg acc: rt<f32, BM, BN> = 0
    @stages(4)
    for k in 0 .. cdiv(K, BK) {
        a = A[block.x, k]
        b = B[k, block.y]
        acc += a @ b
    }
    reg s: rv<f32, BM> = S[block.x]
    reg t: rv<f32, BN> = T[block.y]
    C[block.x, block.y] = bf16(acc * row(s) * col(t))
}
"""


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("m", [1, 70])
def test_a_users_scaled_gemm_moves_only_its_rows_and_is_right_on_both_targets(tmp_path, target: str, m: int):
    """A kernel written for this test (not an example): on sm_90a stream-k gives its partials `rows` (its epilogue's
    row and column scales are row-local) and the split tiles sum right at M = 1 and 70 (a second tile row of 6);
    on sm_80 stream-k leaves it alone; both targets match numpy in the interpreter."""
    import ml_dtypes
    import numpy as np

    def bf(x: np.ndarray) -> np.ndarray:
        return np.asarray(x, ml_dtypes.bfloat16)

    path = tmp_path / "scaled.tk"
    path.write_text(OWN, encoding="utf-8")
    k = tkir.compile(str(path), passes=with_stream_k("min_iters=2 max_tail=100"), target=target)
    parts = [op for op in k.module.kernel.walk() if op.name.startswith("tk.partial_")]
    assert (target == "sm_90a") == bool(parts)
    assert all(len(op.operands) == 6 for op in parts)  # the rows operand
    rng = np.random.default_rng(m)
    n, kk = 256, 640
    a = bf(rng.standard_normal((m, kk)))
    b = bf(rng.standard_normal((kk, n)))
    s, t = rng.random(m, dtype=np.float32) + 0.5, rng.random(n, dtype=np.float32) + 0.5
    c = bf(np.full((m, n), np.nan))
    interp.interpret(k.module, a, b, s, t, c, num_sms=8)
    want = (a.astype(np.float64) @ b.astype(np.float64)) * s[:, None] * t[None, :]
    assert np.linalg.norm(c.astype(np.float64) - want) / np.linalg.norm(want) < 1e-2
