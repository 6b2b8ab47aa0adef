"""Attention's one-kernel backward (examples/attention_bwd.tk, with attention_bwd_prep.tk before it and
attention_bwd_dq_convert.tk after it) in the reference interpreter, compiled with the default pipeline.

* Each companion's CHECK_SIZES on sm_90a and sm_80.
* The whole backward (prep, the main kernel adding dQ^T into a zeroed workspace, the conversion) against the
  float64 backward of the float64 forward at ragged N = 1, 63, 64, 65, 127, 200, causal and not, D = 64 and 128,
  G = 1 and 4 (grouped-query attention). At N = 1 dQ = dK = 0 in exact arithmetic: an absolute bound there.
* The tiles BQ=auto, BKV=auto, WG=auto choose per head dim; ptxas assembles the main kernel on sm_90a without
  spills, with its dQ reduce-add a TMA reduce left in flight (no read-wait right after its issue).
* D = 256 (-D DS=4: a block owns a quarter of the head dim) against the float64 backward, causal and not, on
  both targets, and assembled by ptxas without spills on sm_90a and sm_80.
* The deterministic mode (-D DET=1 on the main kernel and the convert): correct with the workspace poisoned
  with NaN (every slot the convert reads is written), the same dQ bits whatever order the interpreter runs the
  blocks in (`interpret(block_seed=)`), where the reduce-add mode's bits change with the order; no reduce-add
  or red.global.add in its PTX (nothing is added in the hardware's order).
(The float64 finite-difference check of tests/ir/test_attention_bwd.py runs this path too.)
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import numpy as np
import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.interp import interpret
from tkir.tools.examples import check_interpreted, load_companion, load_module, max_error, relative_error

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
KERNELS = ("attention_bwd", "attention_bwd_dq_convert")
TARGETS = ("sm_90a", "sm_80")
GRAD_TOL = 2e-2  # bf16 outputs from bf16 products of P and dS (the three-kernel path's bound)
ZERO_GRAD_TOL = 1e-4  # at N = 1: max |dQ|, max |dK| against max |dV| (tests/ir/test_attention_bwd.py)
RAGGED_N = (1, 63, 64, 65, 127, 200)


@functools.cache
def _companion(name: str):  # noqa: ANN202 - a companion module
    return load_companion(str(EXAMPLES / f"{name}.tk"))


@functools.cache
def _compile(name: str, target: str, **consts: int | str) -> tkir.CompiledKernel:
    return tkir.compile(str(EXAMPLES / f"{name}.tk"), target=target, **consts)


@functools.cache
def _autograd():  # noqa: ANN202 - the example module (its per-head-dim tiles; torch is imported only on use)
    return load_module(EXAMPLES / "attention_autograd.py")


def fused_kernels(target: str, d: int, causal: int, g: int = 1, det: bool = False) -> dict[str, tkir.CompiledKernel]:
    """The three kernels of the fused path as examples/attention_autograd.py compiles them (its fused_consts)."""
    main, convert = _autograd().fused_consts(d, bool(causal), g, det)
    return {"prep": _compile("attention_bwd_prep", target, D=d),
            "main": _compile("attention_bwd", target, **main),
            "convert": _compile("attention_bwd_dq_convert", target, **convert)}


def fused_backward(ks: dict, q: np.ndarray, k: np.ndarray, v: np.ndarray, o: np.ndarray, lse: np.ndarray,
                   do: np.ndarray, det: bool = False, block_seed: int | None = None) -> dict[str, np.ndarray]:
    """Delta, dQ, dK, dV from the fused path in the interpreter, in the order the autograd wiring runs them
    (the workspace zeroed first, as the wiring's torch.zeros does; `det`: the deterministic mode's larger
    workspace, poisoned with NaN instead, so that a slot the convert reads but no block wrote shows).
    `block_seed`: the main kernel's blocks run in that seed's random order."""
    b, h, n, d = q.shape
    sizes = dict(B=b, H=h, N=n)
    delta = np.full((b, h, n), np.nan, np.float32)
    interpret(ks["prep"].module, o, do, delta, sizes=sizes)
    rows = _autograd().workspace_rows(d, n, det)
    acc = np.full((b, h, rows, -(-n // 4) * 4), np.nan if det else 0.0, np.float32)
    dk, dv = (np.full(k.shape, np.nan, k.dtype) for _ in range(2))
    interpret(ks["main"].module, q, k, v, do, lse, delta, acc, dk, dv, sizes=sizes, block_seed=block_seed)
    dq = np.full(q.shape, np.nan, q.dtype)
    interpret(ks["convert"].module, acc, dq, sizes=sizes)
    return {"DELTA": delta, "DQ": dq, "DK": dk, "DV": dv, "DQACC": acc}


def _sizes(n: int, g: int) -> dict:
    """Two heads at N = 200 (G heads at G > 1: one K/V head), two batches at N = 65, one of each otherwise."""
    h = max(g, 2) if n == 200 else g
    return dict(B=2 if n == 65 else 1, H=h, N=n)


# --- the companions' checks --------------------------------------------------------------------------------

def _check_cases() -> list:
    out = []
    for name in KERNELS:
        comp = _companion(name)
        assert len(comp.CHECK_SIZES) == len(comp.CHECK_CONSTS) >= 4
        for i in range(len(comp.CHECK_SIZES)):
            for target in TARGETS:
                out.append(pytest.param(name, target, i, id=f"{name}-{i}-{target}"))
    return out


@pytest.mark.parametrize("name, target, i", _check_cases())
def test_companion_check_sizes(name: str, target: str, i: int) -> None:
    comp = _companion(name)
    sizes, consts = comp.CHECK_SIZES[i], comp.CHECK_CONSTS[i]
    results = check_interpreted(_compile(name, target, **consts).module, comp, sizes, consts, seed=i)
    assert results and all(r.ok for r in results), [str(r) for r in results]


# --- the whole backward at ragged N --------------------------------------------------------------------------

@pytest.mark.parametrize("g", [1, 4])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("n", RAGGED_N)
def test_whole_fused_backward_matches_float64(n: int, causal: int, d: int, g: int) -> None:
    prep = _companion("attention_bwd_prep")
    p = prep.problem(np.random.default_rng(n + 7 * causal + 3 * g), _sizes(n, g), d, bool(causal), g)
    got = fused_backward(fused_kernels("sm_90a", d, causal, g), p["Q"], p["K"], p["V"], p["O"], p["L"], p["DO"])
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], bool(causal))
    assert relative_error(got["DV"], want["DV"]) < GRAD_TOL and max_error(got["DV"], want["DV"]) < GRAD_TOL
    assert np.all(got["DQACC"][..., n:] == 0), "the workspace's padding columns were added into"
    for name in ("DQ", "DK"):
        out = got[name].astype(np.float64)
        assert np.isfinite(out).all(), name
        if n == 1:  # zero in exact arithmetic
            assert np.abs(out).max() <= ZERO_GRAD_TOL * np.abs(want["DV"]).max(), (name, np.abs(out).max())
        else:
            assert relative_error(out, want[name]) < GRAD_TOL, (name, relative_error(out, want[name]))
            assert max_error(out, want[name]) < GRAD_TOL, (name, max_error(out, want[name]))


def _check_grads(got: dict, want: dict, n: int, what: str) -> None:
    """dQ, dK, dV within GRAD_TOL of the float64 backward (at N = 1 dQ = dK = 0: an absolute bound)."""
    for name in ("DQ", "DK", "DV"):
        out = got[name].astype(np.float64)
        assert np.isfinite(out).all(), f"{what}: {name} has NaN or inf (a workspace slot read but never written?)"
        if n == 1 and name != "DV":
            assert np.abs(out).max() <= ZERO_GRAD_TOL * np.abs(want["DV"]).max(), (what, name, np.abs(out).max())
        else:
            err = relative_error(out, want[name])
            assert err < GRAD_TOL and max_error(out, want[name]) < GRAD_TOL, f"{what}: {name} relative error {err:.2e}"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("causal", [0, 1])
@pytest.mark.parametrize("n, g", [(1, 1), (65, 1), (200, 1), (130, 4)])
def test_head_dim_256_matches_float64(n: int, g: int, causal: int, target: str) -> None:
    """D = 256: DS = 4 blocks share a key block, each with its quarter of dK, dV and dQ^T's rows."""
    prep = _companion("attention_bwd_prep")
    ks = fused_kernels(target, 256, causal, g)
    assert ks["main"].module.kernel.attrs["consts"]["DS"] == 4
    p = prep.problem(np.random.default_rng(n + causal + g), _sizes(n, g), 256, bool(causal), g)
    got = fused_backward(ks, p["Q"], p["K"], p["V"], p["O"], p["L"], p["DO"])
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], bool(causal))
    _check_grads(got, want, n, f"D=256 N={n} G={g} causal={causal} {target}")


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("d, causal, n, g", [(64, 0, 200, 1), (64, 1, 127, 4), (128, 1, 200, 1), (128, 0, 65, 1),
                                             (256, 1, 130, 1), (256, 0, 1, 1)])
def test_deterministic_mode_matches_float64(d: int, causal: int, n: int, g: int, target: str) -> None:
    """-D DET=1: the workspace poisoned with NaN (every slot the convert reads was written), gradients right."""
    prep = _companion("attention_bwd_prep")
    p = prep.problem(np.random.default_rng(d + n + causal), _sizes(n, g), d, bool(causal), g)
    got = fused_backward(fused_kernels(target, d, causal, g, det=True), p["Q"], p["K"], p["V"], p["O"], p["L"],
                         p["DO"], det=True)
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], bool(causal))
    _check_grads(got, want, n, f"DET=1 D={d} N={n} G={g} causal={causal} {target}")


@pytest.mark.parametrize("d, causal", [(64, 0), (128, 1), (256, 0)])
def test_deterministic_dq_bits_do_not_depend_on_block_order(d: int, causal: int) -> None:
    """The main kernel's blocks run in three orders: with DET=1 dQ's bits are the same every time; with the
    reduce-add workspace (DET=0) they change with the order (the check has something to see)."""
    prep = _companion("attention_bwd_prep")
    p = prep.problem(np.random.default_rng(11), dict(B=1, H=2, N=300), d, bool(causal))
    args = (p["Q"], p["K"], p["V"], p["O"], p["L"], p["DO"])
    runs = {det: [fused_backward(fused_kernels("sm_90a", d, causal, det=det), *args, det=det, block_seed=seed)
                  for seed in (None, 1, 2)] for det in (False, True)}
    bits = {det: [r["DQ"].view(np.uint16) for r in rs] for det, rs in runs.items()}
    assert all(np.array_equal(bits[True][0], b) for b in bits[True][1:]), "DET=1: dQ's bits depend on block order"
    assert not all(np.array_equal(r["DQACC"], runs[False][0]["DQACC"]) for r in runs[False][1:]), \
        "DET=0: the workspace's f32 sums did not change with the block order (the orders were not different?)"
    for det in (False, True):  # dK and dV: each block writes its own rows
        assert all(np.array_equal(r["DK"].view(np.uint16), runs[det][0]["DK"].view(np.uint16)) for r in runs[det])


@pytest.mark.parametrize("causal", [0, 1])
def test_fused_backward_on_sm80_matches_float64(causal: int) -> None:
    """sm_80 (mma.sync, red.global.add for the workspace): one ragged size per mask, both head dims."""
    prep = _companion("attention_bwd_prep")
    for d in (64, 128):
        p = prep.problem(np.random.default_rng(5 + causal), dict(B=1, H=2, N=127), d, bool(causal))
        got = fused_backward(fused_kernels("sm_80", d, causal), p["Q"], p["K"], p["V"], p["O"], p["L"], p["DO"])
        want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], bool(causal))
        for name in ("DQ", "DK", "DV"):
            assert relative_error(got[name], want[name]) < GRAD_TOL, (d, name, relative_error(got[name], want[name]))


# --- tiles and assembly ----------------------------------------------------------------------------------------

def test_auto_tiles_per_head_dim() -> None:
    """D = 128: 128 keys over two consumer warpgroups, 64 queries (the dK/dV staging tiles in K's and V's memory,
    reuse-smem; the register budget 5 over the 240 two warpgroups get, within plan-occupancy's slack); D = 64: one
    warpgroup of 64 keys and 64 queries (two warpgroups would split dQ^T's 64 rows). The key block each head dim
    resolves to is attention_autograd's FUSED_BKV (the deterministic convert's BKV), deterministic or not."""
    main = fused_kernels("sm_90a", 128, 0)["main"].module.kernel
    assert main.attrs["auto"] == {"BQ": 64, "BKV": 128, "WG": 2}
    assert main.attrs["register_shortfall"] == 5
    assert fused_kernels("sm_90a", 64, 1)["main"].module.kernel.attrs["auto"] == {"BQ": 64, "BKV": 64, "WG": 1}
    for d in (64, 128, 256):
        for det in (False, True):
            main = fused_kernels("sm_90a", d, 1, det=det)["main"].module.kernel.attrs["consts"]
            assert main["BKV"] == _autograd().FUSED_BKV[d] and main["DET"] == int(det), (d, det, main)


TMA_REDUCE = re.compile(r"cp\.reduce\.async\.bulk\.tensor\.4d\.global\.shared::cta\.add\.tile\.bulk_group")


# Spill bytes ptxas stores at the auto tiles (64 x 128 at D = 128, over the register budget by 5, within
# plan-occupancy's slack) under pingpong, measured the fastest on an H100 (docs/experiments.md): 4 B, causal 32 B (its
# mask), with G > 1 more (the (query head, query block) loop's index arithmetic); all under the auto choice's
# SPILL_LIMIT_BYTES (64). (d, causal, g) -> bytes
SPILL_BYTES = {(128, 0, 1): 4, (128, 1, 1): 32, (128, 1, 8): 60}


@pytest.mark.parametrize("d, causal, g", [(128, 0, 1), (128, 1, 1), (64, 0, 1), (64, 1, 4), (128, 1, 8)])
def test_sm90a_assembles_with_the_spills_listed(d: int, causal: int, g: int) -> None:
    k = fused_kernels("sm_90a", d, causal, g)["main"]
    res = k.asm["ptxas"]
    limit = SPILL_BYTES.get((d, causal, g), 0)
    assert res.spill_stores <= limit and res.spill_loads <= limit, res
    sass = k.asm["sass"]
    assert (len(local_memory_ops(sass)) > 0) == (res.spill_stores > 0)
    assert "HGMMA" in sass and "UTMALDG" in sass and "UTMAREDG" in sass
    lines = [ln.split("//")[0].strip() for ln in k.asm["ptx"].splitlines() if ln.split("//")[0].strip()]
    at = max(i for i, ln in enumerate(lines) if TMA_REDUCE.search(ln))
    end = next(i for i in range(at, len(lines)) if lines[i].endswith(":") or lines[i].startswith("bra"))
    assert not any(ln.startswith("cp.async.bulk.wait_group") for ln in lines[at:end]), lines[at:end]


def test_convert_assembles_without_spills() -> None:
    for d in (64, 128, 256):
        k = _compile("attention_bwd_dq_convert", "sm_90a", D=d)
        assert k.asm["ptxas"].spill_stores == 0 and not local_memory_ops(k.asm["sass"])


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("d, causal, det, g", [(256, 0, False, 1), (256, 1, False, 1), (256, 1, True, 1),
                                               (256, 0, True, 4), (128, 1, True, 1), (64, 0, True, 1)])
def test_head_dim_256_and_deterministic_assemble_without_spills(target: str, d: int, causal: int, det: bool,
                                                                g: int) -> None:
    """The main kernel and the convert as attention_autograd compiles them, on both targets: no spills, no stack.
    In the deterministic mode nothing is added into global memory (no TMA reduce-add, no red.global.add): each
    workspace element is stored once, and the convert sums them in order."""
    ks = fused_kernels(target, d, causal, g, det=det)
    for name in ("main", "convert"):
        res = ks[name].asm["ptxas"]
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, (name, res)
        assert not local_memory_ops(ks[name].asm["sass"]), name
    ptx = ks["main"].asm["ptx"]
    added = bool(TMA_REDUCE.search(ptx)) or "red.global.add.f32" in ptx
    assert added != det, f"det={det}: reduce-add in the main kernel's PTX: {added}"


# --- mutants of the head-dim split and the deterministic mode ---------------------------------------------------

SPLIT_MUTANTS = [
    # (kernel, old, new, det, causal, the gradients that must go wrong)
    ("attention_bwd", "kc = K[block.z, block.y, kb, dc]", "kc = K[block.z, block.y, kb, 0]", False, 0, ["DQ"]),
    ("attention_bwd", "qc = Q[block.z, h, i, dc]", "qc = Q[block.z, h, i, 0]", False, 0, ["DK"]),
    ("attention_bwd", "doc = DO[block.z, h, i, dc]", "doc = DO[block.z, h, i, 0]", False, 1, ["DV"]),
    ("attention_bwd", "DQACC[block.z, h, dc, i] += kc.T @ ds", "DQACC[block.z, h, 0, i] += kc.T @ ds", False, 1,
     ["DQ"]),
    ("attention_bwd", "DK[block.z, block.y, kb, dc] = kc", "DK[block.z, block.y, kb, 0] = kc", False, 0, ["DK"]),
    ("attention_bwd", "DQACC[block.z, h, kb * DS + dc, i] = kc.T @ ds", "DQACC[block.z, h, kb * DS, i] = kc.T @ ds",
     True, 0, ["DQ"]),
    # the deterministic convert: one key block too few (causal), the first slot skipped
    ("attention_bwd_dq_convert", "let kv_blocks = min(cdiv((block.x + 1) * R, BKV), cdiv(N, BKV))",
     "let kv_blocks = min(cdiv((block.x + 1) * R, BKV) - 1, cdiv(N, BKV))", True, 1, ["DQ"]),
    ("attention_bwd_dq_convert", "for j in 0 .. kv_blocks", "for j in 1 .. kv_blocks", True, 0, ["DQ"]),
]


@pytest.mark.parametrize("name, old, new, det, causal, failing", SPLIT_MUTANTS,
                         ids=[f"{m[0]}-{i}" for i, m in enumerate(SPLIT_MUTANTS)])
def test_split_and_deterministic_mutants_fail(tmp_path: Path, name: str, old: str, new: str, det: bool, causal: int,
                                              failing: list[str]) -> None:
    """Each edit of the D = 256 split or the deterministic sum gives wrong gradients, and only the named ones."""
    src = (EXAMPLES / f"{name}.tk").read_text()
    assert src.count(old) == 1, old
    path = tmp_path / f"{name}.tk"
    path.write_text(src.replace(old, new))
    ks = dict(fused_kernels("sm_90a", 256, causal, det=det))
    consts = _autograd().fused_consts(256, bool(causal), 1, det)[0 if name == "attention_bwd" else 1]
    ks["main" if name == "attention_bwd" else "convert"] = tkir.compile(str(path), target="sm_90a", **consts)
    prep = _companion("attention_bwd_prep")
    p = prep.problem(np.random.default_rng(4), dict(B=1, H=1, N=130), 256, bool(causal))
    got = fused_backward(ks, p["Q"], p["K"], p["V"], p["O"], p["L"], p["DO"], det=det)
    want = prep.backward64(p["Q"], p["K"], p["V"], p["DO"], p["L"], p["DELTA"], bool(causal))
    wrong = sorted(g for g in ("DQ", "DK", "DV")
                   if not (np.isfinite(got[g].astype(np.float64)).all()
                           and relative_error(got[g], want[g]) < GRAD_TOL))
    assert wrong == failing, (wrong, {g: relative_error(got[g], want[g]) for g in ("DQ", "DK", "DV")})


def test_a_bf16_value_carried_out_of_a_wgmma_loop_lowers() -> None:
    """D = 256 at DS = 2 (not the tiles attention_autograd takes: it spills) carries a bf16 register value out of
    a loop whose last wgmma is still in flight at the exit; the backend drains the f32 accumulators there and
    leaves the 16-bit value alone (tying it through wgmma.wait_group's f32 operands was invalid LLVM IR)."""
    k = _compile("attention_bwd", "sm_90a", D=256, DS=2, BQ=32, BKV=64, WG=1)
    assert "wgmma.wait_group.sync.aligned 0" in k.asm["ptx"]
