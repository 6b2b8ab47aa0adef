"""`tkc report`'s line on global loads read before the next wgmma (tkir/tools/sass_loads.py): attention_bwd.tk's
L and Delta element loads are each read by an FSEL (the select of an element past the tensor's end) ahead of the
loop's mbarrier wait and first wgmma, so the consumers wait for them there; attention_fwd.tk reads no global
load before a wgmma."""

from __future__ import annotations

import json
import subprocess
import sys

from tkir.tools.sass_loads import early_reads, format_early_reads

SASS = """
        /*0100*/              @!P2 LDG.E.CONSTANT R16, desc[UR20][R16.64] ;
        /*0110*/                   LDG.E.64 R20, desc[UR20][R18.64] ;
        /*0120*/                   FSEL R235, R16, RZ, !P2 ;
        /*0130*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [R11+URZ], R184 ;
        /*0140*/              @!P0 BRA `(.L_x_10) ;
.L_x_11:
        /*0150*/                   FADD R4, R21, R5 ;
        /*0160*/                   LDG.E R30, desc[UR20][R18.64] ;
        /*0170*/                   MOV R30, RZ ;
        /*0180*/                   WARPGROUP.ARRIVE ;
        /*0190*/                   HGMMA.64x64x16.F32.BF16 R152, gdesc[UR20], RZ, !UPT ;
        /*01a0*/                   LDG.E R40, desc[UR20][R18.64] ;
        /*01b0*/                   FADD R41, R40, R40 ;
        /*01c0*/                   BRA `(.L_x_12) ;
        /*01d0*/                   HGMMA.64x64x16.F32.BF16 R152, gdesc[UR20], RZ, !UPT ;
"""


def test_a_load_read_before_the_next_wgmma_is_listed() -> None:
    # R16 (FSEL) and the 64-bit R20:R21 (FADD, past the mbarrier wait and its retry branch) are read before the
    # wgmma; R30 is written again before any read; R40 is read, but an unguarded branch ends the path first
    assert early_reads(SASS) == [{"load": "0100", "reader": "FSEL"}, {"load": "0110", "reader": "FADD"}]
    assert format_early_reads(early_reads(SASS)).startswith(
        "global loads read before the next wgmma is issued: 2 (first read by FADD, FSEL)")


def _report(path: str) -> dict:
    r = subprocess.run([sys.executable, "-m", "tkir.cli", "report", path, "--json"], capture_output=True, text=True,
                       check=True)
    return json.loads(r.stdout)


def test_the_backwards_l_and_delta_loads_are_read_before_its_first_wgmma() -> None:
    reads = _report("examples/attention_bwd.tk")["loads_read_before_wgmma"]
    assert len(reads) == 32 and {r["reader"] for r in reads} == {"FSEL"}
    assert "loads_read_before_wgmma" not in _report("examples/attention_fwd.tk")
