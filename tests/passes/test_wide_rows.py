"""Wide rows (issue 15): softmax.tk and layernorm.tk walk a row wider than DC in DC-wide chunks, twice.

softmax keeps an online row max and sum of exponentials (each chunk's max rescales the sum so far);
layernorm sums x - K and (x - K)^2 per column position, K the row's first chunk (the shifted-data
algorithm), and merges the positions once after the loop. In the numpy interpreter the chunked form gives what the one-read form
gives, layernorm's variance stays accurate for a row with a large mean (where E[x^2] - E[x]^2 in f32
does not), and the chunked form compiles on both targets and assembles without local memory.
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend.lower import SPILL_FALLBACK_ATTR
from tkir.backend.toolchain import local_memory_ops
from tkir.frontend import compile_file
from tkir.interp import frame as interp_frame
from tkir.printer import print_module
from tkir.tools.examples import load_companion, relative_error

ROW_KERNELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "rows"  # the row kernels with every knob
BF16 = ml_dtypes.bfloat16
EPS = 1e-5  # layernorm.tk's EPS


def _run(path: Path | str, inputs: list[np.ndarray], **consts: int) -> np.ndarray:
    """Y of the kernel after the default pipeline, run in the interpreter (Y is the last argument)."""
    k = tkir.compile(str(path), **consts)
    y = np.full(inputs[0].shape, np.nan, BF16)
    tkir.interpret(k, *inputs, y)
    return y.astype(np.float64)


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_check_consts_take_the_chunked_path(name: str) -> None:
    """The companion's check sizes cover both paths: no loop in one read, two loops over the chunks."""
    comp = load_companion(str(ROW_KERNELS / f"{name}.tk"))
    loops = []
    for consts in comp.CHECK_CONSTS:
        c = {**comp.DEFAULT_CONSTS, **consts}
        text = print_module(compile_file(str(ROW_KERNELS / f"{name}.tk"), consts))
        loops.append(text.count("scf.for"))
        assert loops[-1] == (0 if c["D"] <= c["DC"] else 1 if c.get("REREAD") else 2), (consts, loops[-1])
    assert 0 in loops and 2 in loops
    assert any(c.get("D", 0) == 3 * c.get("DC", 1) for c in comp.CHECK_CONSTS)  # an odd chunk count


@pytest.mark.parametrize("name", ["softmax", "layernorm"])
def test_chunked_equals_one_read(name: str) -> None:
    """N = 4 rows of D = 2048: four chunks of 512 against one read (DC = 2048), on random inputs."""
    rng = np.random.default_rng(15)
    n, d = 4, 2048
    inputs = [rng.standard_normal((n, d), np.float32).astype(BF16)]
    if name == "layernorm":
        inputs[0] = (inputs[0].astype(np.float32) + 3.0).astype(BF16)
        inputs += [rng.standard_normal(d, np.float32).astype(BF16) for _ in range(2)]  # W, Bias
    path = ROW_KERNELS / f"{name}.tk"
    chunked = _run(path, inputs, D=d, DC=512, ROWS=4, WG=1)
    one = _run(path, inputs, D=d, DC=2048, ROWS=4, WG=1)
    assert np.isfinite(chunked).all()
    # f32 sums in another order: the bf16 outputs agree but for an element's last bit here and there
    assert relative_error(chunked, one) < 1e-4
    assert np.mean(chunked != one) < 0.01
    comp = load_companion(str(path))
    ref = comp.reference([*inputs, chunked], {"N": n}, {"D": d})["Y"]
    assert relative_error(chunked, ref) < comp.TOLERANCE


def test_layernorm_reread_equals_one_read() -> None:
    """REREAD = 1: the statistics of the whole row in registers, then the output in DC-wide chunks read
    again; the same f32 sums in the same order as one read, so the same bits."""
    rng = np.random.default_rng(17)
    n, d = 4, 2048
    inputs = [(rng.standard_normal((n, d), np.float32) + 3.0).astype(BF16)]
    inputs += [rng.standard_normal(d, np.float32).astype(BF16) for _ in range(2)]
    path = ROW_KERNELS / "layernorm.tk"
    reread = _run(path, inputs, D=d, DC=512, ROWS=4, WG=1, REREAD=1)
    one = _run(path, inputs, D=d, DC=2048, ROWS=4, WG=1)
    assert np.isfinite(reread).all()
    assert np.array_equal(reread, one)
    text = print_module(compile_file(str(path), dict(D=d, DC=512, ROWS=4, WG=1, REREAD=1)))
    assert text.count("scf.for") == 1  # the output pass only


def test_rmsnorm_reread_equals_one_read() -> None:
    rng = np.random.default_rng(18)
    n, d = 4, 2048
    inputs = [rng.standard_normal((n, d), np.float32).astype(BF16), rng.standard_normal(d, np.float32).astype(BF16)]
    path = ROW_KERNELS / "rmsnorm.tk"
    reread = _run(path, inputs, D=d, DC=512, ROWS=4, WG=1, REREAD=1)
    one = _run(path, inputs, D=d, DC=2048, ROWS=4, WG=1)
    assert np.isfinite(reread).all() and np.array_equal(reread, one)


def test_layernorm_reread_needs_fewer_registers_than_one_read() -> None:
    """The point of REREAD: the row is not live across the output pass. D = 16384 over 8 warps: one read
    takes 128 registers (2 blocks of 256 threads per SM), REREAD with DC = 2048 80 (3 blocks)."""
    path = str(ROW_KERNELS / "layernorm.tk")
    one = tkir.compile(path, D=16384, DC=16384, ROWS=1, WG=2).asm["ptxas"]
    reread = tkir.compile(path, D=16384, DC=2048, ROWS=1, WG=2, REREAD=1).asm["ptxas"]
    assert reread.registers <= 80 < one.registers, (reread.registers, one.registers)
    assert reread.spill_stores == reread.spill_loads == 0


def _layernorm_variance(path: Path | str, x: np.ndarray, monkeypatch: pytest.MonkeyPatch, **consts: int) -> np.ndarray:
    """The kernel's own variance per row, 1 / rstd^2 - EPS, rstd read off the interpreter's tk.rsqrt."""
    seen: list[np.ndarray] = []
    rsqrt = interp_frame.HANDLERS["tk.rsqrt"]

    def record(op, args, frame):  # noqa: ANN001, ANN202 - an interpreter handler
        out = rsqrt(op, args, frame)
        seen.append(np.array(out, np.float64))
        return out

    monkeypatch.setitem(interp_frame.HANDLERS, "tk.rsqrt", record)
    d = x.shape[1]
    _run(path, [x, np.ones(d, BF16), np.zeros(d, BF16)], D=d, **consts)
    assert len(seen) == 1 and seen[0].shape == (x.shape[0],)  # one block of ROWS = N rows, one rsqrt
    return 1.0 / seen[0] ** 2 - EPS


def _large_mean_rows() -> np.ndarray:
    rng = np.random.default_rng(1000)
    return (1000.0 + rng.standard_normal((4, 2048), np.float32)).astype(BF16)  # mean 1000, std 1


def test_chunked_layernorm_variance_of_rows_with_a_large_mean(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _large_mean_rows()
    var = x.astype(np.float64).var(axis=1)  # biased, of the bf16 values the kernel reads
    for dc in (64, 512, 2048):  # chunked (32 and 4 values a column position, shifted sums) and one read
        got = _layernorm_variance(ROW_KERNELS / "layernorm.tk", x, monkeypatch, DC=dc, ROWS=4, WG=1)
        assert np.all(np.abs(got / var - 1) < 1e-3), (dc, got, var)
    got = _layernorm_variance(ROW_KERNELS / "layernorm.tk", x, monkeypatch, DC=512, ROWS=4, WG=1, REREAD=1)
    assert np.all(np.abs(got / var - 1) < 1e-3), ("reread", got, var)  # centred in registers, as one read


def test_naive_chunked_variance_fails_the_large_mean_check(monkeypatch: pytest.MonkeyPatch,
                                                           tmp_path: Path) -> None:
    """The check above can tell: the same per-position sums of x and x^2 without the shift (M2 =
    sum x^2 - (sum x)^2 / n) in f32 lose the variance of rows with mean 1000 to cancellation once a
    position sums enough values (DC = 64: 32 each, 1.3 % off; the shifted sums 1e-7; at 4 values a
    position bf16's squares are exact in f32 and both agree)."""
    src = (ROW_KERNELS / "layernorm.tk").read_text(encoding="utf-8")
    naive = src
    for old, new in [("for c in 1 .. D / DC {", "for c in 0 .. D / DC {"),
                     ("let dx = f32(xc) - f32(k0)", "let dx = f32(xc)"),
                     ("let mi = f32(k0) + s1 * inv_n", "let mi = s1 * inv_n")]:
        assert naive.count(old) == 1, old
        naive = naive.replace(old, new)
    path = tmp_path / "layernorm_naive.tk"
    path.write_text(naive, encoding="utf-8")
    x = _large_mean_rows()
    var = x.astype(np.float64).var(axis=1)
    got = _layernorm_variance(path, x, monkeypatch, DC=64, ROWS=4, WG=1)
    assert np.max(np.abs(got / var - 1)) > 1e-3


# With the column tests gone (tkir/bounds.py) ptxas unrolls these loops whole and issues
# every chunk's loads first; plan-occupancy's register count does not include the unrolled loads, so
# two of the configurations spill at the blocks per SM it plans (softmax 4096 / 2 rows / 1 warpgroup: 76 bytes
# at 5 blocks; layernorm's header, 16 rows of 1024 over 4 warpgroups: 28 bytes at 1 block). Known gap, strict:
# a fix makes them pass.
UNROLL_SPILLS = pytest.mark.xfail(strict=True, reason="plan-occupancy does not count the loads of a loop "
                                                      "ptxas unrolls whole")
# readonly-loads lets ptxas issue the output loop's loads (X again, W, Bias) above its
# stores, all chunks' at once, which plan-occupancy's register count does not include either: rmsnorm DC 4096
# over 4 warpgroups spills 8 bytes at the 3 blocks per SM the planner chose (and layernorm DC 2048 over 4
# warpgroups at 4 requested blocks per SM, 8 bytes; not in this list).
# Where such a plan asks for more than one block per SM, the backend's spill check (backend/lower.py
# avoid_spills) lowers the kernel again for the highest count ptxas holds without spilling: softmax 4096 / 2
# rows from 5 to 4 blocks (114 registers), rmsnorm DC 4096 from 3 to 2 (56). Those two pass for that reason,
# checked below (FALLBACK: the count the backend must have chosen); the layernorm header's plan is 1 block,
# where fewer blocks cannot help, and stays a strict xfail.
FALLBACK: dict[tuple[str, tuple], int] = {("softmax", (("DC", 4096), ("ROWS", 2), ("WG", 1))): 4,
                                          ("rmsnorm", (("DC", 4096), ("ROWS", 1), ("WG", 4))): 2}
CHUNKED = [("softmax", {}), ("softmax", {"DC": 8192, "ROWS": 1, "WG": 1}),
           ("softmax", {"DC": 4096, "ROWS": 2, "WG": 1}),
           pytest.param("layernorm", {}, marks=UNROLL_SPILLS), ("layernorm", {"DC": 8192, "ROWS": 1, "WG": 1}),
           ("layernorm", {"DC": 4096, "ROWS": 2, "WG": 1}),
           ("layernorm", {"DC": 2048, "ROWS": 1, "WG": 4}),
           ("layernorm", {"DC": 2048, "ROWS": 1, "WG": 2, "REREAD": 1}),
           ("layernorm", {"DC": 1024, "ROWS": 1, "WG": 4, "REREAD": 1}),
           ("rmsnorm", {"DC": 4096, "ROWS": 1, "WG": 4}),
           ("rmsnorm", {"DC": 2048, "ROWS": 1, "WG": 2, "REREAD": 1})]


def _ids(c: object) -> str:
    n, cs = c.values if hasattr(c, "values") else c
    return f"{n}-{'-'.join(f'{k}{v}' for k, v in cs.items()) or 'header'}"


@pytest.mark.parametrize("name, consts", CHUNKED, ids=[_ids(c) for c in CHUNKED])
def test_chunked_rows_assemble_without_local_memory(name: str, consts: dict) -> None:
    """D = 16384 (past every one-read point of the tune space): chunked PTX for both targets, and on
    sm_90a ptxas neither spills nor keeps a stack frame."""
    path = str(ROW_KERNELS / f"{name}.tk")
    k = tkir.compile(path, D=16384, **consts)
    res = k.asm["ptxas"]
    assert res.spill_stores == res.spill_loads == res.stack_frame == 0 and not local_memory_ops(k.asm["sass"]), res
    fallback = k.module.kernel.attrs.get(SPILL_FALLBACK_ATTR)
    to = FALLBACK.get((name, tuple(consts.items())))
    assert (fallback or {}).get("to") == to, (fallback, to)  # no fallback (None) but where FALLBACK says
    assert f".minnctapersm {to}" in k.asm["ptx"] or to is None
    ptx = tkir.compile(path, D=16384, target="sm_80", **consts).asm["ptx"]
    assert ".target sm_80" in ptx and "ld.global" in ptx and "st.global" in ptx


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm"])
def test_tune_space_offers_reread_only_for_chunked_rows(name: str) -> None:
    """REREAD = 1 changes only the D > DC path: the space keeps it there and drops it where one read holds
    the row (D <= DC), which would compile the same kernel twice."""
    from tkir.tools.tune import read_space

    space = read_space(str(ROW_KERNELS / f"{name}.tk"))
    for p in space.points({"D": 4096, "ROWS": 1, "WG": 2, "OCC": 0, "HOIST": 0, "FENCE": 0}):
        if p.consts["REREAD"] == 1 and p.dropped is None:
            assert p.consts["DC"] < 4096, p.consts
    kept = {(p.consts["DC"], p.consts["REREAD"]) for p in space.points({"D": 4096, "ROWS": 1, "WG": 2, "OCC": 0,
                                                                        "HOIST": 0, "FENCE": 0}) if p.dropped is None}
    assert (1024, 1) in kept and (4096, 0) in kept and (4096, 1) not in kept
