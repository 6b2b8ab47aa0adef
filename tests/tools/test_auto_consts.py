"""`auto` consts (tkir/tools/auto_consts.py): the compiler picks the largest tile that plan-occupancy's
register and shared-memory budget accepts, from the kernel's @tune candidates, and says why it
refused the larger ones."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.tools import auto_consts

ATTN = "examples/attention_fwd.tk"
AUTO = {"BQ": "auto", "BKV": "auto"}


@pytest.mark.parametrize("d, causal, want, refused", [
    (64, 0, {"BQ": 192, "BKV": 128}, 0),
    (128, 1, {"BQ": 128, "BKV": 128}, 1),    # 192 x 128: three consumer warpgroups need 176 registers > 160
    (256, 0, {"BQ": 128, "BKV": 64}, 3),     # 192/128 x 128 overflow shared memory; 192 x 64 (O's staging tile in
                                             # Q's memory: reuse-smem) needs 208 registers > 160
])
def test_attention_tiles_chosen_by_the_budget(d: int, causal: int, want: dict, refused: int) -> None:
    k = tkir.compile(ATTN, D=d, CAUSAL=causal, **AUTO)
    attrs = k.module.kernel.attrs
    assert attrs["auto"] == want
    assert {n: attrs["consts"][n] for n in want} == want and {n: k.consts[n] for n in want} == want
    reasons = attrs.get("auto_refused", [])
    assert len(reasons) == refused
    if d == 128:
        assert reasons[0].startswith("BQ=192 BKV=128: registers: 3 consumer warpgroups")
    if d == 256:
        assert all("shared memory" in r for r in reasons[:2]) and "BQ=192 BKV=64: registers" in reasons[2]
    assert "auto = {" in k.ir  # visible in the printed IR


def test_sm80_auto_passes_over_tiles_with_too_few_warps_per_sm() -> None:
    """On sm_80, 192 x 64 at head dim 128 compiles but plans 6 warps per SM (one block of 6 warps: fewer
    than two per scheduler), so auto keeps looking; 128 x 64 (4 warps of 32 rows, 2 blocks per SM) is next,
    but ptxas spills it (at 255 registers), so 64 x 64 is taken; the passed-over points are listed with the
    reasons. sm_90a's warp-specialized choices do not change (test_attention_tiles_chosen_by_the_budget)."""
    k = tkir.compile(ATTN, target="sm_80", D=128, **AUTO)
    attrs = k.module.kernel.attrs
    assert attrs["auto"] == {"BQ": 64, "BKV": 64}
    reasons = attrs["auto_refused"]
    assert any(r.startswith("BQ=192 BKV=64: compiles, but plans 6 warps per SM") for r in reasons), reasons
    assert any(r.startswith("BQ=128 BKV=64: ptxas spills") for r in reasons), reasons
    stats = k.asm["ptxas"]
    assert stats.spill_stores == stats.spill_loads == 0


def test_auto_keeps_a_few_warps_point_when_nothing_else_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """With MIN_WARPS_PER_SM above anything the space plans, the first point that compiles is kept."""
    monkeypatch.setattr(auto_consts, "MIN_WARPS_PER_SM", 10_000)
    k = tkir.compile(ATTN, target="sm_80", D=128, **AUTO)
    assert k.module.kernel.attrs["auto"] == {"BQ": 192, "BKV": 64}


def test_auto_gives_the_same_ptx_as_the_explicit_tiles() -> None:
    auto = tkir.compile(ATTN, D=128, **AUTO).asm["ptx"]
    explicit = tkir.compile(ATTN, D=128, BQ=128, BKV=128).asm["ptx"]
    assert hashlib.md5(auto.encode()).hexdigest() == hashlib.md5(explicit.encode()).hexdigest()


def test_header_auto_unless_given() -> None:
    """attention_fwd.tk's header declares BQ and BKV auto: unset, the compiler chooses; given, no choice is made."""
    chosen = tkir.compile(ATTN, D=128)
    assert chosen.module.kernel.attrs["auto"] == {"BQ": 128, "BKV": 128}
    given = tkir.compile(ATTN, D=128, BQ=64, BKV=64)
    assert given.module.kernel.attrs["consts"]["BQ"] == 64 and "auto" not in given.module.kernel.attrs


GEMM_AUTO = """@tune(BM=[128, 64], BN=[256, 128])
kernel g<BM=64, BN=128, BK=64>(A: gl<bf16>[M, K], B: gl<bf16>[K, N], C: gl<bf16>[M, N])
    grid(M / BM, N / BN)
{
    shared a: st<bf16, BM, BK>
    shared b: st<bf16, BK, BN>
    reg acc: rt<f32, BM, BN> = 0
    for k in 0 .. K / BK {
        a = A[block.x, k]
        b = B[k, block.y]
        acc += a @ b
    }
    C[block.x, block.y] = bf16(acc)
}
"""


def test_dash_d_auto_on_a_numeric_const(tmp_path: Path) -> None:
    p = tmp_path / "g.tk"
    p.write_text(GEMM_AUTO)
    k = tkir.compile(str(p), BM="auto", BN="auto")
    assert k.module.kernel.attrs["auto"] == {"BM": 128, "BN": 256}
    k = tkir.compile(str(p), BM="auto")  # BN pinned at its header value
    assert k.module.kernel.attrs["auto"] == {"BM": 128} and k.module.kernel.attrs["consts"]["BN"] == 128


def test_auto_without_candidates_takes_the_compilers_tile_extents(tmp_path: Path) -> None:
    """No @tune lists BN: it takes auto_consts.DEFAULT_CANDIDATES; the largest the budget accepts is 256."""
    p = tmp_path / "g.tk"
    p.write_text(GEMM_AUTO.replace(", BN=[256, 128]", "", 1))
    assert "BN=[" not in p.read_text()
    k = tkir.compile(str(p), BN="auto")
    assert k.module.kernel.attrs["auto"] == {"BN": 256}
    refused = k.module.kernel.attrs.get("auto_refused", [])
    assert not refused  # 256 is the first candidate and fits


def test_auto_without_candidates_none_fitting_is_a_located_error(tmp_path: Path) -> None:
    p = tmp_path / "g.tk"
    # a shared tile of X * 16 rows of 1024 bf16: 512 KB at the smallest candidate, more than any SM has
    p.write_text(GEMM_AUTO.replace("<BM=64,", "<BM=64, X=auto,", 1).replace(
        "    shared a: st<bf16, BM, BK>", "    shared a: st<bf16, BM, BK>\n    shared big: st<bf16, X * 16, 1024>", 1)
        .replace("acc += a @ b", "acc += a @ b\n        big = A[0, 0]", 1))
    with pytest.raises(CompileError) as e:
        tkir.compile(str(p))
    assert "no value of the auto consts X compiles" in str(e.value) and "X=16:" in str(e.value)
    assert f"{p}:2:" in str(e.value)


def test_no_candidate_fits_is_a_located_error(tmp_path: Path) -> None:
    p = tmp_path / "g.tk"
    p.write_text(GEMM_AUTO.replace("BM=[128, 64]", "BM=[1024]", 1))
    with pytest.raises(CompileError) as e:
        tkir.compile(str(p), BM="auto")
    assert "no value of the auto consts BM compiles: BM=1024:" in str(e.value)


def test_frontend_alone_refuses_auto() -> None:
    from tkir.frontend import compile_file

    with pytest.raises(CompileError) as e:
        compile_file(ATTN, {"BQ": "auto"})
    line = 1 + next(i for i, t in enumerate(Path(ATTN).read_text().splitlines()) if t.startswith("kernel "))
    assert "const 'BQ' is auto" in str(e.value) and f":{line}:" in str(e.value)  # located at the kernel header


def test_cli_prints_the_choice() -> None:
    r = subprocess.run([sys.executable, "-m", "tkir.cli", "compile", ATTN, "-D", "D=256", "-D", "BQ=auto", "-D",
                        "BKV=auto"], capture_output=True, text=True, check=True)
    assert "auto = {BQ = 128, BKV = 64}" in r.stdout
    r = subprocess.run([sys.executable, "-m", "tkir.cli", "compile", ATTN, "-D", "BQ=auto", "-D", "BKV=64"],
                       capture_output=True, text=True, check=True)
    assert "auto = {BQ = 192}" in r.stdout


@pytest.mark.parametrize("text, mentions", [
    ("kernel k<A=auto>(x: f32) grid(1) {}", True),
    ("// A=auto picks the tile\nkernel k<A=64>(x: f32) grid(1) {}", False),   # a comment
    ('kernel k<A=64>(x: f32) grid(1) { static_assert(A > 0, "not auto") }', False),  # a string
    ('kernel k<A=64, B=auto>() grid(1) { static_assert(A > 0, "a // b") }', True),  # '//' in a string
    ("kernel k<A=64>(x_auto: f32) grid(1) {}", False),
])
def test_mentions_auto_skips_comments_and_strings(text: str, mentions: bool) -> None:
    assert auto_consts.mentions_auto(text) is mentions


def test_auto_in_comments_costs_no_extra_parse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A kernel whose comments say `auto` and whose header does not: with no auto const the compile parses the file
    once."""
    import tkir.frontend.parse as fp

    path = tmp_path / "k.tk"
    path.write_text("// -D BQ=auto: the compiler chooses\nkernel k<BQ=64>(x: f32) grid(1) {}\n")
    parse, calls = fp.parse_source, []
    monkeypatch.setattr(fp, "parse_source", lambda *a: (calls.append(a), parse(*a))[1])
    assert auto_consts.auto_names(str(path), {}) == [] and calls == []
    assert auto_consts.auto_names(str(path), {"BQ": "auto"}) == ["BQ"] and len(calls) == 1


# --- at problem sizes: the cost model chooses per size bucket ---------------------------------------

FP8 = "examples/gemm_fp8.tk"  # BM, BN, STAGES, SK, SKI are auto in its header


def _fp8_sizes(m: int, n: int = 4096, k: int = 4096) -> dict:
    return {"M": m, "N": n, "K": k}


def test_an_underfilled_grid_gets_smaller_tiles_split_along_k() -> None:
    """M = 64: 16 tiles of 128 x 256 leave 116 of 132 SMs idle; the model's choice fills them (stream-K)."""
    attrs = tkir.compile(FP8, sizes=_fp8_sizes(64)).module.kernel.attrs
    assert attrs["auto"]["SK"] == 1 and attrs["auto"]["BM"] == 64
    assert attrs["auto_sizes"] == {"M": 64, "N": 4096, "K": 4096}
    assert "split along K" in attrs["auto_predicted"] and "faster than the budget rule's" in attrs["auto_predicted"]
    assert attrs["auto_runner_up"].startswith("BM=")


def test_a_full_grid_keeps_the_budget_rules_tile() -> None:
    """4096^3: no point is predicted more than CLEAR_WIN faster, so the size-free choice stays."""
    free = tkir.compile(FP8).module.kernel.attrs["auto"]
    attrs = tkir.compile(FP8, sizes=_fp8_sizes(4096)).module.kernel.attrs
    assert attrs["auto"] == free == {"BM": 128, "BN": 256, "STAGES": 4, "SK": 0, "SKI": 32}
    assert "the budget rule's" in attrs["auto_predicted"]


def test_attention_at_a_full_grid_keeps_the_budget_rules_tile() -> None:
    k = tkir.compile(ATTN, sizes={"B": 16, "H": 16, "N": 4096}, D=128, **AUTO)
    assert k.module.kernel.attrs["auto"] == tkir.compile(ATTN, D=128, **AUTO).module.kernel.attrs["auto"]


def test_a_winner_that_spills_is_turned_down() -> None:
    """At M = 256, K = 14336 the model's favourites (128 x 256 with stream-K) spill in ptxas: the next wins."""
    k = tkir.compile(FP8, sizes=_fp8_sizes(256, 4096, 14336))
    attrs = k.module.kernel.attrs
    assert any("ptxas spills" in r for r in attrs["auto_refused"])
    stats = k.asm["ptxas"]
    assert max(stats.spill_stores, stats.spill_loads) <= 64


def test_calls_choose_per_size_bucket() -> None:
    k = tkir.compile(FP8)
    assert k.chooses_per_size
    small = k.for_sizes(_fp8_sizes(60))
    assert small is k.for_sizes(_fp8_sizes(64))  # one bucket, compiled once
    assert small.module.kernel.attrs["auto"]["SK"] == 1
    assert k.for_sizes(_fp8_sizes(4000)).module.kernel.attrs["auto"]["BN"] == 256
    assert not tkir.compile(FP8, BM=128, BN=256, STAGES=4, SK=0, SKI=8).chooses_per_size  # all pinned


def test_interpret_runs_the_kernel_a_call_at_those_sizes_launches() -> None:
    import numpy as np

    from tkir.tools.examples import load_companion

    comp = load_companion(FP8)
    sizes = {"M": 40, "N": 264, "K": 2048}  # ragged M and N; 64 x 64 tiles split along K (stream-K) run
    inputs = comp.make_inputs(np.random.default_rng(0), sizes, {})
    k = tkir.compile(FP8)
    tkir.interpret(k, *inputs)
    ref = comp.reference(inputs, sizes, {})["C"]
    out = inputs[comp.PARAMS.index("C")].astype(np.float64)
    assert np.linalg.norm(out - ref) / np.linalg.norm(ref) < comp.TOLERANCE
    chosen = k.for_sizes(sizes).module.kernel.attrs["auto"]
    assert chosen["SK"] == 1 and chosen != k.module.kernel.attrs["auto"]  # not the size-free 128 x 256 tile


def test_sizes_must_be_positive_integers() -> None:
    with pytest.raises(TypeError, match="sizes= are positive integers"):
        tkir.compile(FP8, sizes={"M": 0, "N": 4096, "K": 4096})


def test_cli_chooses_at_the_given_sizes() -> None:
    args = [sys.executable, "-m", "tkir.cli"]
    sizes = ["--size", "M=64", "--size", "N=4096", "--size", "K=4096"]
    r = subprocess.run([*args, "compile", FP8, *sizes], capture_output=True, text=True, check=True)
    assert "auto_sizes = {M = 64, N = 4096, K = 4096}" in r.stdout and "auto_runner_up = " in r.stdout
    r = subprocess.run([*args, "report", FP8, *sizes], capture_output=True, text=True, check=True)
    assert "auto consts: BM=64" in r.stdout and "at M=64 N=4096 K=4096 (size bucket)" in r.stdout
    assert "  runner-up: BM=" in r.stdout


@pytest.mark.parametrize("name, want", [
    ("gemm_at", {"BM": 128, "BN": 256}),         # n256 instructions, 4 stages: 1.00-1.02x cuBLAS (256 x 128: 0.84-0.88x)
    ("swiglu", {"BM": 128, "BN": 128}),          # 64 x 256 does not fit (two 128-register accumulators), 256 x 64 is n64
    ("gemm_bias_gelu", {"BM": 128, "BN": 256}),  # spill-free at 128 x 256 with fold-acc-init's loop form (default)
    # without the loop form ptxas spills 32 B at 128 x 256 (the bias vector beside the accumulator), not at 256 x 128
    ("gemm_bias_gelu", {"BM": 256, "BN": 128, "edits": "fold-acc-init{loops=false}"}),
])
def test_equal_tiles_widest_wgmma_without_spills_first(name: str, want: dict) -> None:
    """Of tiles of equal area the size-free rule takes the one whose wgmma instructions are widest, unless ptxas
    spills there and not at a narrower one (auto_consts._WidestFirst)."""
    want = dict(want)
    edits = want.pop("edits", None)
    k = tkir.compile(f"examples/user/{name}.tk", target="sm_90a", pass_edits=edits)
    assert k.module.kernel.attrs["auto"] == want
    stats = k.asm["ptxas"]
    assert stats.spill_stores == stats.spill_loads == 0


def test_widest_first_is_lazy_and_keeps_non_wgmma_order() -> None:
    """A run of equal work is compiled only when iteration reaches it; points without wgmma keep their order."""
    compiled: list[int] = []

    def attempt(i: int) -> CompileError:
        compiled.append(i)
        return CompileError(None, "no wgmma here")

    order = auto_consts._WidestFirst([0, 1, 2, 3], [4.0, 2.0, 2.0, 1.0], attempt)
    it = iter(order)
    assert next(it) == 0 and compiled == []
    assert [next(it), next(it)] == [1, 2] and compiled == [1, 2]
    assert list(it) == [3] and compiled == [1, 2]


@pytest.mark.parametrize("n, rows", [(1, 1), (128, 1), (4096, 4), (65536, 4)])
def test_grid_under_one_block_per_sm_takes_the_most_blocks(n: int, rows: int) -> None:
    """A kernel with no tensor work whose size-free point (ROWS = 4 at D = 768) runs fewer blocks than SMs at the
    sizes takes the point with the most blocks, then the least work a block: ROWS = 1 at N = 1 and 128 (the model
    predicts its floor for every point there); from one block per SM on, the size-free point stays."""
    k = tkir.compile("examples/rmsnorm.tk", target="sm_90a", sizes={"N": n}, D=768)
    assert k.module.kernel.attrs["auto"] == {"ROWS": rows}
    if rows == 1:
        assert "the most blocks, then the least work a block" in k.module.kernel.attrs["auto_predicted"]


def test_sizes_missing_one_the_tensors_name_is_a_located_error() -> None:
    """An auto const is chosen at the bucket of every size the tensors name: sizes= without some of them is an
    error at the kernel naming the missing ones (it was an unlocated SymExprError from the cost model)."""
    with pytest.raises(CompileError) as e:
        tkir.compile(str(Path(__file__).resolve().parents[2] / "examples" / "gemm.tk"), sizes={"M": 1024})
    msg = str(e.value)
    assert "examples/gemm.tk:6:8: error: the problem sizes (M=1024) lack 'K', 'N'" in msg
    assert "note: give them all" in msg
