"""The verifier's rules across ops (issue 14): TMA descriptors against the tensors and shared tiles they
copy, stage views against their ring buffer, size expressions of the grid and the descriptors.

Each case edits gemm's IR after the default pipeline (what `tkc compile examples/gemm.tk` prints) and
expects a located error `g.tkir:LINE:COL: error: ...` at the op that the edit made wrong.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

import tkir
from tkir.diagnostics import CompileError
from tkir.parser import parse_module
from tkir.tools.examples import load_companion
from tkir.verifier import verify

GEMM_CONSTS = load_companion("examples/gemm.tk").DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
GEMM = tkir.compile("examples/gemm.tk").ir
DESC_A = 'tma.desc @A_tma {tensor = "A", param = 0, dtype = "bf16", rank = 2, dims = ["K", "M"]'
GRID = 'grid = ["cdiv((cdiv(M, 128)) * (cdiv(N, 256)), cdiv((cdiv(M, 128)) * (cdiv(N, 256)), NUM_SMS))"]'


def _where(text: str, marker: str) -> tuple[int, int]:
    """(line, column) of the op on the first line containing `marker` (its first non-blank)."""
    for i, line in enumerate(text.splitlines(), 1):
        if marker in line:
            return i, len(line) - len(line.lstrip()) + 1 + (line.lstrip().index("=") + 2
                                                             if line.lstrip().startswith("%") else 0)
    raise AssertionError(marker)


CASES = [
    # (id, old, new, marker of the line the error is at, words)
    ("tile-swizzle-vs-desc", "st<bf16, 128, 64, swizzle=128, align=1024", "st<bf16, 128, 64, swizzle=64, align=1024*",
     "pipe.copy %a_s", "@A_tma has swizzle 128, but the shared tile %a_s is st<bf16, 128, 64, swizzle=64"),
    ("desc-swizzle-none", 'box = [64, 128], elem_strides = [1, 1], swizzle = 128',
     'box = [64, 128], elem_strides = [1, 1], swizzle = 0', "pipe.copy %a_s", "@A_tma has swizzle 0"),
    ("staged-desc-swizzle", 'box = [64, 64], elem_strides = [1, 1], swizzle = 128, l2_promotion = 128, oob_fill = "zero"}\ntk.',
     'box = [64, 64], elem_strides = [1, 1], swizzle = 0, l2_promotion = 128, oob_fill = "zero"}\ntk.',
     "tk.store_staged", "@C_tma has swizzle 0, but the shared tile %C_stage"),
    ("box", "box = [64, 128]", "box = [64, 64]", "pipe.copy %a_s", "@A_tma has box [64, 64], but %a_s"),
    ("boxes", "desc = @B_tma, boxes = 4", "desc = @B_tma, boxes = 2", "pipe.copy %b_s", "has boxes = 2, but %b_s"),
    ("staged-box", 'box = [64, 64], elem_strides = [1, 1], swizzle = 128, l2_promotion = 128, oob_fill = "zero"}\ntk.',
     'box = [64, 128], elem_strides = [1, 1], swizzle = 128, l2_promotion = 128, oob_fill = "zero"}\ntk.',
     "tk.store_staged", "each of 2 warpgroups stores 64 rows"),
    ("missing-desc", "desc = @A_tma", "desc = @Z_tma", "pipe.copy %a_s", "names @Z_tma, which is not a tma.desc"),
    ("desc-of-other-tensor", "%A, %tile_m, %k {access", "%B, %tile_m, %k {access", "pipe.copy %a_s",
     "copies %B with @A_tma, a descriptor of 'A'"),
    ("desc-dtype", DESC_A, DESC_A.replace('"bf16"', '"f16"'), "tma.desc @A_tma",
     "@A_tma is a rank-2 f16 descriptor of %A, which is gl<bf16>[M, K]"),
    ("desc-tensor", DESC_A, DESC_A.replace('tensor = "A"', 'tensor = "B"'), "tma.desc @A_tma",
     "@A_tma names tensor 'B', but parameter 0 is %A"),
    ("desc-param", DESC_A, DESC_A.replace("param = 0", "param = 7"), "tma.desc @A_tma",
     "@A_tma describes parameter 7 of @gemm, which is not a global tensor"),
    ("desc-dims", DESC_A, DESC_A.replace('["K", "M"]', '["M", "K"]'), "tma.desc @A_tma",
     "@A_tma dims[0] is 'M', but dim 1 of %A (gl<bf16>[M, K]) is 'K'"),
    ("desc-strides", 'strides = ["K * 2"]', 'strides = ["K * 4"]', "tma.desc @A_tma",
     "@A_tma strides[0] is 'K * 4', but %A (gl<bf16>[M, K]) steps dim 0 by K * 2 bytes"),
    ("desc-dims-garbage", DESC_A, DESC_A.replace('["K", "M"]', '["K", "M +* ("]'), "tma.desc @A_tma",
     "@A_tma dims[1]: bad size expression 'M +* ('"),
    ("desc-dims-unknown", DESC_A, DESC_A.replace('["K", "M"]', '["K", "Q"]'), "tma.desc @A_tma",
     "@A_tma dims[1] 'Q' uses 'Q', which is not a size of the kernel"),
    ("grid-garbage", GRID, 'grid = ["cdiv(M, 128"]', "tk.kernel", "grid dim 0: bad size expression 'cdiv(M, 128'"),
    ("grid-code", GRID, 'grid = ["__import__(\'os\').getcwd()"]', "tk.kernel", "unsupported size expression"),
    ("grid-unknown", GRID, 'grid = ["cdiv(Q, 128)", "N"]', "tk.kernel", "grid dim 0 'cdiv(Q, 128)' uses 'Q'"),
    ("grid-not-a-string", GRID, "grid = [[1]]", "tk.kernel", "'tk.kernel' needs grid"),
    ("grid-zero", GRID, 'grid = ["0"]', "tk.kernel", "grid dim 0 (x) is 0 blocks; CUDA launches 1..2147483647"),
    ("grid-x", GRID, 'grid = ["2147483648"]', "tk.kernel", "grid dim 0 (x) is 2147483648 blocks"),
    ("grid-y", GRID, 'grid = ["1", "65536"]', "tk.kernel", "grid dim 1 (y) is 65536 blocks; CUDA launches 1..65535"),
    ("grid-z-folds", GRID, 'grid = ["1", "1", "70000 / 2 * 2"]', "tk.kernel", "grid dim 2 (z) is 70000 blocks"),
    ("grid-div-zero", GRID, 'grid = ["M / (2 - 2)"]', "tk.kernel", None),
    ("size-unknown", '%K = tk.size {name = "K"}', '%K = tk.size {name = "Q"}', "%K = tk.size",
     "'tk.size' reads 'Q', which is not a size of @gemm"),
    ("role-regs", "tk.role {kind = consumer, warpgroups = 2, regs = 232}", "tk.role {kind = consumer, warpgroups = 2, regs = 300}",
     "tk.role {kind = consumer", "'tk.role' regs = 300: setmaxnreg takes 24..256 registers per thread, a multiple of 8"),
    ("role-regs-step", "tk.role {kind = consumer, warpgroups = 2, regs = 232}", "tk.role {kind = consumer, warpgroups = 2, regs = 228}",
     "tk.role {kind = consumer", "'tk.role' regs = 228"),
    ("stage-view-layout", "%a_s = pipe.stage %a, %s : st<bf16, 128, 64, swizzle=128, align=1024>",
     "%a_s = pipe.stage %a, %s : st<bf16, 128, 64, swizzle=64, align=512>", "%a_s = pipe.stage",
     "'pipe.stage' of st<bf16, 128, 64, swizzle=128, align=1024, stages=4> yields a stage in the buffer's layout"),
]


@pytest.mark.parametrize(("old", "new", "marker", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_verifier_rejects_with_a_location(old: str, new: str, marker: str, words: str | None) -> None:
    assert old in GEMM
    # a trailing * replaces every occurrence (the allocation and its stage views), else the first
    text = GEMM.replace(old, new[:-1]) if new.endswith("*") else GEMM.replace(old, new, 1)
    if words is None:  # accepted here: M / 0 has a name, so it is evaluated at the launch (a LaunchError)
        verify(parse_module(text, "g.tkir"))
        return
    with pytest.raises(CompileError) as info:
        verify(parse_module(text, "g.tkir"))
    line, col = _where(text, marker)
    first = info.value.format().splitlines()[0]
    assert first.startswith(f"g.tkir:{line}:{col}: error: "), first
    assert words in first, first


def test_the_unedited_ir_verifies() -> None:
    verify(parse_module(GEMM, "g.tkir"))


def test_rerunning_select_swizzle_on_lowered_ir_is_refused(tmp_path) -> None:
    """It re-chose the ring buffers' swizzle (their uses are stage views now) and left the views and the
    descriptors at 128B: TMA and wgmma disagreed with the allocation, and the verifier accepted it."""
    f = tmp_path / "g.tkir"
    f.write_text(GEMM)
    r = subprocess.run([sys.executable, "-m", "tkir.cli", "opt", str(f), "--passes=select-swizzle"],
                       capture_output=True, text=True)
    assert r.returncode == 1, r.stdout[:200]
    line, col = _where(GEMM, "%a_s = pipe.stage")
    assert r.stderr.startswith(f"{f}:{line}:{col}: error: after pass 'select-swizzle': 'pipe.stage' of "
                               "st<bf16, 128, 64, stages=4, swizzle=0, align=128> yields"), r.stderr
    assert "Traceback" not in r.stderr


def test_every_pass_output_of_the_examples_still_verifies() -> None:
    """The new rules hold for what the passes write (tkir.compile verifies after every pass)."""
    for consts in ({**GEMM_CONSTS, "BM": 64}, {}):
        tkir.compile("examples/gemm.tk", **consts)
    tkir.compile("examples/gemm.tk", passes="canonicalize,legalize-mma,infer-layouts,select-swizzle,"
                                            "bank-conflicts,create-tma{epilogue_chunk=128},plan-occupancy,"
                                            "pipeline,persistent,stream-k,canonicalize")
    tkir.compile("examples/gemm.tk", swizzle="none")
    tkir.compile("examples/attention_fwd.tk", D=64, CAUSAL=1)


def test_one_consumer_warpgroup_epilogue_box_covers_its_rows(tmp_path) -> None:
    """create-tma gave the staged epilogue a 64-row box; a single consumer warpgroup holds all 128 rows
    of gemm's tile and stores them with one box per panel, so half the tile was never written. The
    verifier now refuses such a box, and create-tma makes it the warpgroup's rows (GPU check:
    tests/gpu/test_gpu_examples.py)."""
    src = tmp_path / "g1.tk"
    src.write_text(open("examples/gemm.tk").read().replace("kernel gemm", "@warpgroups(consumers=1)\nkernel gemm", 1))
    k = tkir.compile(str(src), BN=128)
    staged = 'box = [64, 128], elem_strides = [1, 1], swizzle = 128, l2_promotion = 128, oob_fill = "zero"}\ntk.'
    assert staged in k.ir and "wgmma_acc, wg = 1" in k.ir and "tk.store_staged" in k.ir
    with pytest.raises(CompileError, match="each of 1 warpgroup stores 128 rows"):
        verify(parse_module(k.ir.replace(staged, staged.replace("[64, 128]", "[64, 64]")), "g1.tkir"))


def test_shared_memory_above_the_block_limit_is_refused_by_the_backend(tmp_path) -> None:
    """IR text that skips plan-occupancy: a 256 KB tile was lowered, with dynamic_smem 263168 in the
    launch description (the driver would refuse it at the launch)."""
    text = tkir.compile("tests/data/rows/softmax.tk").ir
    head, rest = text.split("\n", 2)[:2], text.split("\n", 2)[2]
    f = tmp_path / "big.tkir"
    f.write_text("\n".join([*head, "  %big = tk.alloc : st<bf16, 256, 512, swizzle=0, align=128>", rest]))
    k = tkir.compile(str(f), passes="verify")
    with pytest.raises(CompileError) as info:
        k.asm["ptx"]
    assert info.value.format().startswith(f"{f}:1:1: error: shared memory: the kernel's tiles need 263168 B")


def test_a_tile_without_a_swizzle_yet_is_compared_by_the_backend_only(tmp_path) -> None:
    """No `swizzle=` in a tile's type: select-swizzle has not decided its layout, so the verifier lets
    a descriptor disagree (tests/filecheck/staging-layout.tkir feeds such IR to select-swizzle); the
    backend lowers it unswizzled, so building the launch refuses it, at the copy."""
    text = GEMM.replace(", swizzle=128, align=1024", "")
    verify(parse_module(text, "g.tkir"))
    f = tmp_path / "g.tkir"
    f.write_text(text)
    r = subprocess.run([sys.executable, "-m", "tkir.cli", "compile", str(f), "--passes=verify", "--emit", "launch"],
                       capture_output=True, text=True)
    line, col = _where(text, "pipe.copy %a_s")
    assert r.returncode == 1 and r.stderr.startswith(f"{f}:{line}:{col}: error: 'pipe.copy': @A_tma has swizzle "
                                                     "128, but the shared tile %a_s is st<bf16, 128, 64>"), r.stderr
