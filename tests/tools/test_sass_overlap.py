"""`tkc report`'s overlap-mma line (tkir/tools/sass_overlap.py): the exponentials of a rotated attention loop
between the wait for the first product and the wait for the second, read from the SASS. The default pipeline's
SASS has none there (ptxas hoists the second wait), overlap-mma{fence_wait=true}'s has all of them; kernels
overlap-mma did not rotate get no line."""

from __future__ import annotations

import json
import subprocess
import sys

from tkir.tools.sass_overlap import format_overlap, overlap_windows

KERNEL = "tests/filecheck/passes/overlap-mma-fence.tk"
SASS = """
        /*0100*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24, gsb0 ;
        /*0110*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0120*/                   MUFU.EX2 R2, R3 ;
        /*0130*/              @!P0 MUFU.EX2 R4, R5 ;
        /*0140*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
        /*0150*/                   MUFU.EX2 R6, R7 ;
        /*0160*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0170*/                   WARPGROUP.DEPBAR.LE gsb0, 0x1 ;
        /*0180*/                   MUFU.EX2 R8, R9 ;
        /*0190*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], R24 ;
        /*01a0*/                   WARPGROUP.DEPBAR.LE gsb0, 0x0 ;
"""


def test_windows_count_the_exponentials_between_and_after_the_waits() -> None:
    # the second first-product wait meets a wgmma before any all-groups wait: no window
    assert overlap_windows(SASS) == [{"under": 2, "after": 1}]
    assert overlap_windows("") == []


def test_the_line_says_what_ptxas_did() -> None:
    assert format_overlap({"windows": [{"under": 0, "after": 66}], "fenced": False}).endswith(
        "0 of 66; ptxas moved the second mma's wait above the rest (overlap-mma{fence_wait=true} keeps it below "
        "them, docs/passes.md)")
    assert format_overlap({"windows": [{"under": 66, "after": 0}], "fenced": True}).endswith("66 of 66 (fence_wait)")


def _report(*extra: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "tkir.cli", "report", *extra, "--json"], capture_output=True,
                       text=True, check=True)
    return json.loads(r.stdout)


def test_the_report_reads_the_kernels_sass() -> None:
    plain = _report(KERNEL)["overlap_in_sass"]
    assert not plain["fenced"] and plain["windows"]
    assert all(w["under"] == 0 < w["after"] for w in plain["windows"])
    fenced = _report(KERNEL, "--pass-edits=overlap-mma{fence_wait=true}")["overlap_in_sass"]
    assert fenced["fenced"] and len(fenced["windows"]) == len(plain["windows"])
    assert all(w["after"] == 0 and w["under"] == v["after"] for w, v in zip(fenced["windows"], plain["windows"],
                                                                              strict=True))
    assert "overlap_in_sass" not in _report("examples/gemm.tk")
