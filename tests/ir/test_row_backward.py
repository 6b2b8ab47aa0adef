"""The row backward examples (rmsnorm_bwd, layernorm_bwd and the column sum that finishes their weight
gradients) in the interpreter and through ptxas, on both targets.

Each example is compiled through the tk-level passes up to plan-occupancy and run in the numpy interpreter
at its companion's CHECK_SIZES: N ragged against ROWS (1, 77, 127, 1000 rows), G = 1, G not dividing the row
tiles and G above their count. Then the two kernels as a caller chains them (the row kernel's partials into
col_sum.tk) against the whole gradients, the f32 partials against a bound of their own (the companions'
TOLERANCE is the bf16 outputs'), kernels broken on purpose that must fail, PTX that ptxas assembles
without local memory at the configurations the bench and the GPU tests use, and the outputs' shapes as
tkir.torch.op derives them.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.frontend import compile_file
from tkir.interp import InterpError, interpret
from tkir.parser import parse_module
from tkir.passmanager import PipelineConfig
from tkir.printer import print_module
from tkir.tools.examples import check_interpreted, load_companion, relative_error
from tkir.verifier import verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ["rmsnorm_bwd", "layernorm_bwd", "col_sum"]
TARGETS = ["sm_90a", "sm_80"]
# The partials are sums of f32 products: against the float64 reference they agree to f32 rounding
# (measured ~1e-7 relative); 1e-5 leaves room for long sums and still fails a missing or doubled row.
PARTIAL_TOLERANCE = 1e-5
BF16_TOLERANCE = 1e-2  # a bf16 result: 2^-8 relative rounding of each element (the companions' TOLERANCE)


def _companion(name: str):
    return load_companion(str(EXAMPLES / f"{name}.tk"))


def _cases() -> list:
    out = []
    for name in NAMES:
        comp = _companion(name)
        for i, (sizes, consts) in enumerate(zip(comp.CHECK_SIZES, comp.CHECK_CONSTS, strict=True)):
            for target in TARGETS:
                out.append(pytest.param(name, target, sizes, consts, id=f"{name}-{i}-{target}"))
    return out


def _compile(name: str, target: str, consts: dict) -> tkir.CompiledKernel:
    return tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target,
                        config=PipelineConfig(stop_after="plan-occupancy"), **consts)


@pytest.mark.parametrize("name, target, sizes, consts", _cases())
def test_example_matches_reference(name: str, target: str, sizes: dict, consts: dict) -> None:
    k = _compile(name, target, consts)
    results = check_interpreted(k.module, _companion(name), sizes, consts, seed=0)
    assert results and all(r.ok for r in results), [str(r) for r in results]
    for r in results:
        if r.output in ("DWP", "DWBP"):
            assert r.rel_err <= PARTIAL_TOLERANCE, str(r)


def _row_backward(name: str, sizes: dict, consts: dict, target: str, seed: int) -> tuple[list, np.ndarray, dict]:
    """The row kernel then col_sum.tk on its partials, in the interpreter (fresh shared memory poisoned with
    NaN): the row kernel's arrays, the column sums, and the companion's whole-gradient reference."""
    comp = _companion(name)
    rng = np.random.default_rng(seed)
    arrays = comp.make_inputs(rng, sizes, consts)
    interpret(_compile(name, target, consts).module, *arrays, poison=True)
    part = arrays[-1]
    sums = np.full(part.shape[1], np.nan, ml_dtypes.bfloat16)
    interpret(_compile("col_sum", target, {}).module, part, sums, poison=True)
    x, w, dy = (a.astype(np.float64) for a in arrays[:3])
    if name == "rmsnorm_bwd":
        xhat = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + comp.EPS)
        want = {"DW": (dy * xhat).sum(axis=0)}
    else:
        xc = x - x.mean(axis=1, keepdims=True)
        xhat = xc / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + comp.EPS)
        want = {"DW": (dy * xhat).sum(axis=0), "DB": dy.sum(axis=0)}
    return arrays, sums, want


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, sizes, consts", [
    ("rmsnorm_bwd", dict(N=127), {"G": 5}),
    ("rmsnorm_bwd", dict(N=1000), {"D": 768, "ROWS": 4, "WG": 1, "G": 9}),
    ("rmsnorm_bwd", dict(N=127), {}),  # the default G = 264: 232 blocks past the last tile write zeros
    ("layernorm_bwd", dict(N=127), {"G": 5}),
    ("layernorm_bwd", dict(N=1000), {"D": 768, "ROWS": 4, "WG": 1, "G": 9}),
])
def test_partials_then_col_sum_give_the_weight_gradients(name: str, sizes: dict, consts: dict, target: str) -> None:
    """What a caller gets from the two launches: SUM = DW (rmsnorm), SUM[:D] = DW and SUM[D:] = DB (layernorm)."""
    arrays, sums, want = _row_backward(name, sizes, consts, target, seed=3)
    d = arrays[0].shape[1]
    got = {"DW": sums[:d], "DB": sums[d:]} if name == "layernorm_bwd" else {"DW": sums}
    assert set(got) == set(want)
    for key, ref in want.items():
        err = relative_error(got[key].astype(np.float64), ref)
        assert err <= BF16_TOLERANCE, f"{name} {key}: rel_err {err:.3e}"


def test_col_sum_of_partials_is_rounded_once() -> None:
    """col_sum.tk adds in f32 and rounds the sum once: exact on sums that bf16 holds, where summing in bf16
    (rounding after every add) would lose the 1s added to 256."""
    part = np.ones((300, 64), np.float32)
    part[0] = 256.0
    sums = np.full(64, np.nan, ml_dtypes.bfloat16)
    interpret(_compile("col_sum", "sm_90a", {}).module, part, sums)
    assert np.all(sums.astype(np.float64) == 556.0)


# --- kernels broken on purpose ----------------------------------------------------------------------------

def _broken(name: str, consts: dict, old: str, new: str, count: int = 1):
    text = print_module(compile_file(str(EXAMPLES / f"{name}.tk"), consts))
    assert text.count(old) >= count, f"{old!r} not in {name}"
    m = parse_module(text.replace(old, new, count))
    verify(m)
    return m


@pytest.mark.parametrize("name, old, new", [
    # every block starts at tile 0: the tiles are summed G times over, and the first ones only
    ("rmsnorm_bwd", "scf.for %bx,", "scf.for %c0,"),
    # the loop steps ROWS = 4 tiles, not G = 3: tiles are left out and others summed twice
    ("rmsnorm_bwd", "scf.for %bx, %0, %G,", "scf.for %bx, %0, %ROWS,"),
    # DX without the projection on x_hat (the sub of the mean(g * x_hat) term becomes an add)
    ("rmsnorm_bwd", "tk.sub", "tk.add"),
    # layernorm's g - mean(g) forgotten: the first sub becomes an add
    ("layernorm_bwd", "tk.sub %g", "tk.add %g"),
])
def test_broken_kernel_fails_check(name: str, old: str, new: str) -> None:
    comp = _companion(name)
    sizes, consts = dict(N=127), {"G": 3}
    results = check_interpreted(_broken(name, consts, old, new), comp, sizes, consts, seed=4)
    assert not all(r.ok for r in results), [str(r) for r in results]


@pytest.mark.parametrize("name, sizes, consts, size", [
    ("rmsnorm_bwd", dict(N=127), {"G": 3}, "N"), ("layernorm_bwd", dict(N=127), {"G": 3}, "N"),
    ("col_sum", dict(G=300, C=1000), {}, "G"),
])
def test_loop_that_skips_the_ragged_tail_is_refused(name: str, sizes: dict, consts: dict, size: str) -> None:
    """The loops run to cdiv(N, ROWS) (cdiv(G, RG)): with a floor the ragged last tile, rows past the last
    whole tile, would get no DX and add nothing to the sums. The launch's requires refuse such a kernel at
    these sizes (N = 127 rows in tiles of 4, G = 300 partial rows in steps of 128)."""
    comp = _companion(name)
    broken = _broken(name, consts, f"arith.cdiv %{size}", f"arith.div %{size}")
    with pytest.raises(InterpError, match="a partial last tile is skipped"):
        check_interpreted(broken, comp, sizes, consts, seed=4)


# --- ptxas --------------------------------------------------------------------------------------------

# The configurations the bench (scripts/bench/row_backward.py) and the GPU tests run, and the defaults.
PTX_CASES = [
    ("rmsnorm_bwd", {}), ("rmsnorm_bwd", {"D": 768, "ROWS": 4, "WG": 1}), ("rmsnorm_bwd", {"D": 4096, "ROWS": 1, "WG": 4}),
    ("rmsnorm_bwd", {"D": 8192, "ROWS": 1, "WG": 8, "OCC": 1}),
    ("layernorm_bwd", {}), ("layernorm_bwd", {"D": 768, "ROWS": 4, "WG": 1}),
    ("layernorm_bwd", {"D": 4096, "ROWS": 1, "WG": 4}),
    ("col_sum", {}),
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name, consts", PTX_CASES, ids=[f"{n}-{'-'.join(f'{k}{v}' for k, v in c.items())}"
                                                         for n, c in PTX_CASES])
def test_assembles_without_local_memory(name: str, consts: dict, target: str) -> None:
    k = tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target, **consts)
    sass = k.asm["sass"]
    assert not local_memory_ops(sass), f"{name} {consts} {target} spills"
    assert "LDG.E.128" in sass  # 16-byte loads of X and DY (of PART for col_sum)


def test_row_kernels_loop_without_barriers_when_a_warp_holds_a_row() -> None:
    """At D = 768 with ROWS = 4 over one warpgroup each warp holds a row: the row sums are shuffles, and
    the only barriers are those of the column sum after the loop (the same count as col_sum.tk's)."""
    for name in ("rmsnorm_bwd", "layernorm_bwd"):
        sass = tkir.compile(str(EXAMPLES / f"{name}.tk"), D=768, ROWS=4, WG=1).asm["sass"]
        sums = 1 if name == "rmsnorm_bwd" else 2  # DWP; DW and DB into DWBP
        assert sass.count("BAR.SYNC") == 3 * sums, name
        assert "SHFL.BFLY" in sass


@pytest.mark.parametrize("name", ["rmsnorm_bwd", "layernorm_bwd"])
def test_partial_rows_gives_every_block_the_same_number_of_tiles(name: str) -> None:
    comp = _companion(name)
    for n in (1, 127, 1000, 4096, 65536, 65537):
        for rows in (1, 2, 4, 16):
            for slots in (1, 132, 264, 528):
                g = comp.partial_rows(n, rows, slots)
                tiles = -(-n // rows)
                per_block = [len(range(b, tiles, g)) for b in range(g)]
                assert 1 <= g <= min(slots, tiles)
                assert max(per_block) == -(-tiles // slots) and min(per_block) >= max(per_block) - 1


@pytest.mark.parametrize("name, outputs, consts, shapes, want", [
    ("rmsnorm_bwd", ["DX", "DWP"], {"D": 768, "G": 512}, [(1000, 768), (768,), (1000, 768)], [(1000, 768), (512, 768)]),
    ("layernorm_bwd", ["DX", "DWBP"], {"D": 768, "G": 391}, [(1000, 768), (768,), (1000, 768)],
     [(1000, 768), (391, 1536)]),
    ("col_sum", ["SUM"], {}, [(391, 1536)], [(1536,)]),
])
def test_outputs_are_sized_by_the_inputs_and_consts(name: str, outputs: list, consts: dict, shapes: list,
                                                   want: list) -> None:
    """Every output's shape follows from the inputs' shapes and the consts (G is a const of the row kernels,
    the partials' rows an input dim of col_sum), so tkir.torch.op can allocate them (and fake them for
    torch.compile): the ops take X, W, DY (PART) and return the outputs."""
    from tkir.torch import OpSignature

    sig = OpSignature.of(tkir.compile(str(EXAMPLES / f"{name}.tk"), **consts).launch, outputs)
    assert sig.output_shapes(shapes) == want
    assert sig.schema() == ("(Tensor PART) -> Tensor" if name == "col_sum" else
                            "(Tensor X, Tensor W, Tensor DY) -> (Tensor, Tensor)")
