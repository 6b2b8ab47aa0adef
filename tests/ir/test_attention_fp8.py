"""The fp8 attention forward (examples/attention_fp8.tk) without a GPU: the interpreter against float64 of the
dequantised inputs at ragged N (causal and not, D = 128 and 64), the IR that shows where the fp8 A of P · V
comes from (a `tk.convert_layout` from the accumulator's fragment, no shared round trip), the SASS ptxas makes
of it (QGMMA e4m3 for both products, P from registers, no local memory, no serialized wgmma, no more barriers
than the bf16 kernel), sm_80 refused at the `@` with a located error, and an fp8 register A of any other origin
refused likewise.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import tkir
from tkir.backend.toolchain import local_memory_ops
from tkir.diagnostics import CompileError
from tkir.interp import interpret
from tkir.tools.examples import check_interpreted, load_companion

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PATH = EXAMPLES / "attention_fp8.tk"
COMP = load_companion(str(PATH))
SASS_OVER_BF16 = 1.25  # instructions of the fp8 kernel over attention_fwd.tk's at the same tile
L_INTERP_TOL = 1e-5  # L in the interpreter: f32 sums of exact fp8 products, no P rounding (attention_fwd.py's bound)


def _cases() -> list:
    return [pytest.param(s, c, id=f"N{s['N']}-" + "".join(f"{k}{v}" for k, v in c.items()))
            for s, c in zip(COMP.CHECK_SIZES, COMP.CHECK_CONSTS, strict=True)]


@pytest.mark.parametrize(("sizes", "consts"), _cases())
def test_matches_the_dequantised_float64_reference(sizes: dict, consts: dict) -> None:
    """O within 3e-2 relative L2 (P's e4m3 rounding; attention_fp8.py TOLERANCE), L within 1e-5, at N that no
    tile divides: the masked key tails, the clipped stores and the zero-padded Vᵀ rows are exercised."""
    assert COMP.TOLERANCE["O"] <= 3e-2
    assert sizes["N"] % 64
    k = tkir.compile(str(PATH), **consts)  # the IR after the default pipeline, as it runs
    results = {r.output: r for r in check_interpreted(k.module, COMP, sizes, consts, seed=0)}
    assert set(results) == {"O", "L"} and all(r.ok for r in results.values()), [str(r) for r in results.values()]
    assert results["L"].rel_err < L_INTERP_TOL, str(results["L"])


def test_p_rounding_is_what_the_error_is() -> None:
    """The kernel rounds P to e4m3: its O differs from float64 by about e4m3's relative precision (1e-2 .. 3e-2),
    far more than the bf16 output alone would (2^-9); and the scales are applied (SV doubled for one head
    doubles that head's O, the other head's stays bit for bit)."""
    sizes, consts = dict(B=1, H=2, N=96), {"BQ": 64, "BKV": 64}
    module = tkir.compile(str(PATH), **consts).module
    inputs = COMP.make_inputs(np.random.default_rng(3), sizes, consts)
    interpret(module, *inputs)
    want = COMP.reference(inputs, sizes, consts)["O"]
    got = inputs[-2].astype(np.float64)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert 5e-3 < err < COMP.TOLERANCE["O"], err
    inputs[4][0, 0] *= 2  # SV of (batch 0, head 0)
    interpret(module, *inputs)
    again = inputs[-2].astype(np.float64)
    assert np.allclose(again[0, 0], 2 * got[0, 0], rtol=1e-2) and np.array_equal(again[0, 1], got[0, 1])


def kernel_const(ir: str, name: str) -> int:
    """A const's value as the compiled kernel's IR states it (`tk.kernel @... {consts = {..., NAME = V, ...}}`)."""
    return int(re.search(rf"consts = {{[^}}]*\b{name} = (\d+)", ir).group(1))


def test_the_ir_shows_the_register_a_conversion() -> None:
    """infer-layouts puts a shuffle conversion of P (e4m3, accumulator fragment) to the 8-bit A fragment before
    the P · V `@`; nothing goes through shared memory for it (no shared tile of P, no smem conversion)."""
    ir = tkir.compile(str(PATH)).ir
    bkv = kernel_const(ir, "BKV")
    conv = re.findall(rf"tk\.convert_layout %\S+ \{{via = \"(\w+)\".*: rt<e4m3, 128, {bkv}, layout=\{{kind = wgmma_a", ir)
    assert conv and set(conv) == {"shuffle"}, conv
    allocs = re.findall(r"(%\S+) = tk\.alloc : st<", ir)
    assert sorted(allocs) == ["%O_stage", "%k", "%q", "%vt"], allocs  # no shared tile of P (O_stage: O's epilogue)
    assert re.search(r"tk\.mma %wgmma_a\S*, %vt\S*, %o", ir), "P · V does not read the converted P"


@pytest.mark.parametrize("consts", [{}, {"CAUSAL": 1}, {"D": 64, "CAUSAL": 1, "BQ": 64, "BKV": 64}],
                         ids=["d128", "d128-causal", "d64-causal-64x64"])
def test_sass_has_fp8_wgmma_for_both_products(consts: dict) -> None:
    """ptxas (sm_90a) assembles the kernel: QGMMA e4m3 x e4m3 for Q Kᵀ (A and B from shared memory) and for
    P · V (A from registers: a register operand where the descriptor form has gdesc), the fp8 cvts of P, the
    shuffles of its conversion, no local memory, and no more barriers than attention_fwd.tk at the same tile."""
    k = tkir.compile(str(PATH), **consts)
    sass = k.asm["sass"]
    D, BKV = kernel_const(k.ir, "D"), kernel_const(k.ir, "BKV")  # the kernel's defaults where the case sets none
    qk = [ln for ln in sass.splitlines() if f"QGMMA.64x{BKV}x32.F32.E4M3.E4M3" in ln]
    pv = [ln for ln in sass.splitlines() if f"QGMMA.64x{D}x32.F32.E4M3.E4M3" in ln]
    if D == BKV:  # one shape for both: tell them apart by the A operand
        qk = [ln for ln in qk if not re.search(r"E4M3 R\d+, R\d+, gdesc", ln)]
        pv = [ln for ln in pv if re.search(r"E4M3 R\d+, R\d+, gdesc", ln)]
    assert len(qk) >= D // 32, f"S = Q Kᵀ: {len(qk)} QGMMA 64x{BKV}x32"   # D / 32 k-steps
    assert len(pv) >= BKV // 32, f"P · V: {len(pv)} QGMMA 64x{D}x32"     # BKV / 32 k-steps
    assert all(re.search(r"E4M3 R\d+, R\d+, gdesc", ln) for ln in pv), pv[:2]  # A in registers
    assert "F2FP" in sass and "SHFL.IDX" in sass
    assert not local_memory_ops(sass)
    res = k.asm["ptxas"]  # no "wgmma.mma_async instructions are serialized" note (the A words reach it uncopied)
    assert not [w for w in res.warnings if re.search(r"\(C751\d\)", w)], res.warnings
    bf16 = tkir.compile(str(EXAMPLES / "attention_fwd.tk"), D=D, CAUSAL=consts.get("CAUSAL", 0),
                        BQ=consts.get("BQ", 128), BKV=BKV)
    assert sass.count("BAR.") <= bf16.asm["sass"].count("BAR."), "the fp8 A conversion added barriers"
    # the byte work of P (cvt pairs joined, two shuffles and a prmt a word, words carried) stays small: the fp8
    # kernel has at most SASS_OVER_BF16 times the bf16 kernel's instructions (1.16 at D = 128 when written;
    # unpacking P to bytes and packing it again cost 1.47)
    count = [len(re.findall(r"^\s+/\*[0-9a-f]{4}\*/", x, re.M)) for x in (sass, bf16.asm["sass"])]
    assert count[0] <= SASS_OVER_BF16 * count[1], count
    ptx = k.asm["ptx"]
    assert ptx.count(f"wgmma.mma_async.sync.aligned.m64n{D}k32.f32.e4m3.e4m3") >= BKV // 32


@pytest.mark.parametrize("consts", [{}, {"CAUSAL": 1}])
def test_refused_on_sm80_at_the_first_mma(consts: dict) -> None:
    with pytest.raises(CompileError) as info:
        tkir.compile(str(PATH), target="sm_80", **consts)
    out = info.value.format()
    line = next(i for i, t in enumerate(PATH.read_text().splitlines(), 1) if t.lstrip().startswith("s = q @ k.T"))
    assert out.startswith(f"{PATH}:{line}:"), out
    assert "an fp8 '@' (e4m3) needs sm_90a's wgmma" in out


REGISTER_A_FROM_MEMORY = """kernel k(A: gl<e4m3>[M, 64], B: gl<e4m3>[64, 64], C: gl<f32>[M, 64]) grid(M / 64) {
    reg a: rt<e4m3, 64, 64> = A[block.x, 0]
    shared b: st<e4m3, 64, 64>
    b = B[0, 0]
    C[block.x, 0] = a @ b.T
}
"""


def test_fp8_register_a_of_other_origin_is_refused_at_the_mma(tmp_path: Path) -> None:
    """A register fp8 A loaded from memory (not a product's accumulator) has no lowering into the 8-bit A
    fragment: infer-layouts refuses it at the `@`, pointing at the shared-tile form."""
    src = tmp_path / "reg_a.tk"
    src.write_text(REGISTER_A_FROM_MEMORY)
    with pytest.raises(CompileError) as info:
        tkir.compile(str(src))
    out = info.value.format()
    assert out.startswith(f"{src}:5:23: error: an fp8 '@' takes A from registers only as a matrix product's "
                          "result"), out
    assert "shared sa: st<e4m3, 64, 64>" in out
