"""The backward examples (softmax_bwd, linear_dgrad, linear_wgrad) against their companions' references.

Each is compiled through the whole default pipeline on both targets (warp roles, pipelines and
persistent tiles on sm_90a, cp.async on sm_80) and run in the numpy interpreter at its companion's
CHECK_SIZES, ragged ones included (M = 1, 100, 1000; N and K multiples of 8 but not of the tiles;
row counts that leave a partial last block). Deliberately wrong kernels must fail the same checks,
the ACT = 0 data gradient must not read Z, and on sm_90a the GEMMs must assemble to wgmma (the weight
gradient's A operand transposed through its descriptor) without local memory.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.frontend import compile_source
from tkir.interp import interpret
from tkir.printer import print_module
from tkir.tools.examples import check_interpreted, load_companion, relative_error

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ["softmax_bwd", "linear_dgrad", "linear_wgrad"]
TARGETS = ["sm_90a", "sm_80"]


def _companion(name: str):  # noqa: ANN202 - a companion module
    return load_companion(str(EXAMPLES / f"{name}.tk"))


def _compile(name: str, target: str, consts: dict) -> tkir.CompiledKernel:
    return tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target, **consts)


def _cases() -> list:
    out = []
    for name in NAMES:
        comp = _companion(name)
        assert len(comp.CHECK_SIZES) == len(comp.CHECK_CONSTS) >= 3
        for i, (sizes, consts) in enumerate(zip(comp.CHECK_SIZES, comp.CHECK_CONSTS, strict=True)):
            for target in TARGETS:
                out.append(pytest.param(name, target, sizes, consts, id=f"{name}-{i}-{target}"))
    return out


@pytest.mark.parametrize("name, target, sizes, consts", _cases())
def test_example_compiles_and_matches_reference(name: str, target: str, sizes: dict, consts: dict) -> None:
    k = _compile(name, target, consts)
    results = check_interpreted(k.module, _companion(name), sizes, consts, seed=0)
    assert results, "no outputs were checked"
    for r in results:
        assert r.ok, str(r)


def test_check_sizes_are_ragged() -> None:
    """The interpreter checks cover what the GPU must get right at the edges: a partial last block of
    rows, M = 1, and GEMM sizes that are not multiples of the tiles."""
    rows = _companion("softmax_bwd")
    assert any(s["N"] % {**rows.DEFAULT_CONSTS, **c}["ROWS"] for s, c in zip(rows.CHECK_SIZES, rows.CHECK_CONSTS,
                                                                              strict=True))
    for name in ("linear_dgrad", "linear_wgrad"):
        comp = _companion(name)
        ms = {s["M"] for s in comp.CHECK_SIZES}
        assert {1, 100, 1000} <= ms, name
        assert all(s["N"] % 8 == 0 and s["K"] % 8 == 0 for s in comp.CHECK_SIZES)  # TMA's 16-byte rows
        assert any(s["N"] % 64 and s["K"] % 128 for s in comp.CHECK_SIZES), name


def test_companions_are_consistent() -> None:
    for name in NAMES:
        comp = _companion(name)
        assert comp.KERNEL == f"{name}.tk"
        assert set(comp.OUTPUTS) <= set(comp.PARAMS)
        assert len(comp.BENCH_SIZES) == len(comp.BENCH_CONSTS)
        k = _compile(name, "sm_90a", {})
        assert [t.name for t in k.launch.tensors] == comp.PARAMS  # the launch order is the companion's
        for sizes, consts in zip(comp.CHECK_SIZES, comp.CHECK_CONSTS, strict=True):
            inputs = comp.make_inputs(np.random.default_rng(0), sizes, consts)
            assert len(inputs) == len(comp.PARAMS)
            for p, x in zip(comp.PARAMS, inputs, strict=True):
                f = x.astype(np.float64)
                if p in comp.OUTPUTS:
                    assert np.isnan(f).all(), f"{name}: output {p} is not poisoned"
                else:
                    assert np.isfinite(f).all() and np.count_nonzero(f) > 0.99 * f.size, f"{name}: input {p}"
            ref = comp.reference(inputs, sizes, consts)
            assert set(ref) == set(comp.OUTPUTS)
            for o in comp.OUTPUTS:
                assert ref[o].shape == inputs[comp.PARAMS.index(o)].shape
                assert np.isfinite(ref[o]).all()
            assert comp.flops(sizes, consts) > 0
            unread = 0
            if name == "linear_dgrad" and not {**comp.DEFAULT_CONSTS, **consts}["ACT"]:
                unread = inputs[comp.PARAMS.index("Z")].nbytes  # ACT = 0 reads no Z
            assert comp.bytes_moved(sizes, consts) == sum(x.nbytes for x in inputs) - unread


def test_softmax_bwd_forward_pair_names() -> None:
    """tkir.torch.autograd wires by name: the backward reads the forward's output Y and its gradient
    DY, and writes DX, the gradient of the forward's input X, all of the forward's [N, D]."""
    fwd = tkir.compile(str(EXAMPLES / "softmax.tk")).launch
    bwd = _compile("softmax_bwd", "sm_90a", {}).launch
    assert [(t.name, tuple(t.dims)) for t in fwd.tensors] == [("X", ("N", 1024)), ("Y", ("N", 1024))]
    assert [(t.name, tuple(t.dims)) for t in bwd.tensors] == [("Y", ("N", 1024)), ("DY", ("N", 1024)),
                                                              ("DX", ("N", 1024))]


def test_softmax_bwd_chunked_path_is_taken() -> None:
    """The third check size walks the rows in DC-wide chunks (two loops), the first holds them whole."""
    comp = _companion("softmax_bwd")
    one = _frontend_text("softmax_bwd", comp.CHECK_CONSTS[0])
    two = _frontend_text("softmax_bwd", comp.CHECK_CONSTS[2])
    assert one.count("scf.for") == 0
    assert two.count("scf.for") == 2


def _frontend_text(name: str, consts: dict) -> str:
    from tkir.frontend import compile_file

    return print_module(compile_file(str(EXAMPLES / f"{name}.tk"), consts))


def _check_mutant(tmp_path: Path, name: str, old: str, new: str, i: int, seed: int = 5) -> list:
    """The example with `old` replaced by `new` in its source, compiled through the whole pipeline
    (sm_90a) and checked at its companion's check size `i`."""
    src = (EXAMPLES / f"{name}.tk").read_text()
    assert old in src
    path = tmp_path / f"{name}.tk"
    path.write_text(src.replace(old, new))
    comp = _companion(name)
    k = tkir.compile(str(path), **comp.CHECK_CONSTS[i])
    return check_interpreted(k.module, comp, comp.CHECK_SIZES[i], comp.CHECK_CONSTS[i], seed=seed)


@pytest.mark.parametrize("i", [0, 2])
def test_softmax_bwd_wrong_sign_fails_check(tmp_path: Path, i: int) -> None:
    """DY + s instead of DY - s (the one-read path, check size 0, and the chunked one, 2) fails."""
    results = _check_mutant(tmp_path, "softmax_bwd", "- row(s)", "+ row(s)", i)
    assert [r.ok for r in results] == [False]


def test_linear_dgrad_wrong_derivative_fails_check(tmp_path: Path) -> None:
    """SiLU's derivative without its z s (1 - s) term (DX = (DZ @ W) * sigmoid(Z)) fails."""
    i = next(j for j, c in enumerate(_companion("linear_dgrad").CHECK_CONSTS) if c.get("ACT") == 2)
    results = _check_mutant(tmp_path, "linear_dgrad", "acc = acc * (s * (1.0 - s) * zf + s)", "acc = acc * s", i)
    assert [r.ok for r in results] == [False]


def test_linear_dgrad_act0_does_not_read_z() -> None:
    """With ACT = 0, Z is not read: a Z full of NaN leaves DX right (and the launch asks nothing of Z
    but its shape: no tensor map, not read-only, so DX itself may be passed as Z)."""
    comp = _companion("linear_dgrad")
    sizes = dict(M=100, N=200, K=136)
    for target in TARGETS:
        k = _compile("linear_dgrad", target, {"ACT": 0})
        assert "Z" not in {t.tensor for t in k.launch.tma} and "Z" not in k.launch.readonly
        dz, w, z, dx = comp.make_inputs(np.random.default_rng(3), sizes, {"ACT": 0})
        z[:] = np.nan
        interpret(k.module, dz, w, z, dx, sizes=dict(sizes))
        ref = comp.reference([dz, w, z, dx], sizes, {"ACT": 0})["DX"]  # ACT 0: act' = 1, Z unused
        assert relative_error(dx.astype(np.float64), ref) <= comp.TOLERANCE
    with_act = _compile("linear_dgrad", "sm_90a", {"ACT": 2})
    assert "Z" in {t.tensor for t in with_act.launch.tma}  # Z's tile by TMA, before the main loop


def test_linear_dgrad_refuses_unknown_act() -> None:
    from tkir.diagnostics import CompileError

    src = (EXAMPLES / "linear_dgrad.tk").read_text()
    with pytest.raises(CompileError, match="ACT selects the activation's derivative"):
        compile_source(src, "linear_dgrad.tk", {"ACT": 3})


def test_linear_wgrad_wrong_bias_sum_fails_check(tmp_path: Path) -> None:
    """DB as the column max instead of the sum fails DB's check and leaves DW right."""
    results = _check_mutant(tmp_path, "linear_wgrad", "col_sum(", "col_max(", 1, seed=6)
    assert [(r.output, r.ok) for r in results] == [("DW", True), ("DB", False)]


def test_linear_wgrad_transposes_a_through_the_mma() -> None:
    """dz.T @ x is one tk.mma {trans_a}: wgmma's transpose bit for A on sm_90a (MN-major descriptor), ldmatrix.trans
    on sm_80; no tk.transpose (no register transpose, no extra shared round trip)."""
    text = _frontend_text("linear_wgrad", {})
    assert "trans_a = true" in text and "tk.transpose" not in text
    ptx = _compile("linear_wgrad", "sm_90a", {}).asm["ptx"]
    wgmma = [ln for ln in ptx.splitlines() if "wgmma.mma_async" in ln]
    assert wgmma and all(ln.rstrip().endswith("1, 1, 1, 1, 1;") for ln in wgmma)  # scale-d/a/b, tnspA, tnspB
    assert "ldmatrix.sync.aligned.m8n8.x4.trans" in _compile("linear_wgrad", "sm_80", {}).asm["ptx"]


GPU_CONFIGS = [("softmax_bwd", {}), ("softmax_bwd", {"D": 4096, "DC": 4096, "ROWS": 1, "WG": 1}),
               ("softmax_bwd", {"D": 768, "DC": 1024, "ROWS": 4, "WG": 2, "FENCE": 1}),
               ("linear_dgrad", {"ACT": 0}), ("linear_dgrad", {"ACT": 2}), ("linear_dgrad", {"ACT": 1}),
               ("linear_wgrad", {})]


@pytest.mark.parametrize("name, consts", GPU_CONFIGS, ids=[f"{n}-{c}" for n, c in GPU_CONFIGS])
def test_sm90a_assembles_without_local_memory(name: str, consts: dict) -> None:
    """The defaults and the bench configurations: no spills (ptxas), wgmma and TMA for the GEMMs,
    16-byte global loads for the row kernel."""
    k = _compile(name, "sm_90a", consts)
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, res
    assert not [w for w in res.warnings if any(c in w for c in ("C7514", "C7515", "C7511"))]  # no serialization
    sass = k.asm["sass"]
    assert not local_memory_ops(sass)
    if name == "softmax_bwd":
        assert "LDG.E" in sass and ("LDG.E.128" in sass or consts)  # the default: 16-byte loads
    else:
        assert "HGMMA" in sass and "UTMALDG" in sass


@pytest.mark.parametrize("name", NAMES)
def test_sm80_produces_ptx(name: str) -> None:
    ptx = _compile(name, "sm_80", {}).asm["ptx"]
    assert ".target sm_80" in ptx
    if name != "softmax_bwd":
        assert "mma.sync.aligned.m16n8k16" in ptx and "cp.async" in ptx
