"""scripts/bench/attention_fp8.py without a GPU or torch: its FLOP count (causal half), the shape check (D 64 or
128 only), the dry run (both kernels compiled at the bench shape, the bf16 one as attention_fwd.py's bench rows
compile it), and the table with SDPA's fp8 way refused (n/a) and a row under the 1.4x bar marked."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tkir.tools.examples import load_module

ROOT = Path(__file__).resolve().parents[2]


bench = load_module(ROOT / "scripts" / "bench" / "attention_fp8.py", "bench_attention_fp8")


def test_flops_and_shapes() -> None:
    assert bench.flops(8, 16, 4096, 128, False) == 4 * 8 * 16 * 4096**2 * 128
    assert bench.flops(8, 16, 4096, 128, True) == 2 * 8 * 16 * 4096**2 * 128
    assert bench.parse_shapes("8,16,4096,128;1,2,100,64") == [(8, 16, 4096, 128), (1, 2, 100, 64)]
    with pytest.raises(argparse.ArgumentTypeError, match="D = 64 or 128"):
        bench.parse_shapes("8,16,4096,256")
    with pytest.raises(argparse.ArgumentTypeError, match="expected B,H,N,D"):
        bench.parse_shapes("8,16,4096")


def test_dry_run_compiles_both_kernels(capsys: pytest.CaptureFixture) -> None:
    assert bench.main(["--dry-run", "--causal", "1"]) == 0
    out = capsys.readouterr().out
    assert "8,16,4096,128 causal=1: 0.550 TFLOP" in out
    assert "fp8 consts {'BQ': 128, 'BKV': 128, 'D': 128, 'CAUSAL': 1" in out
    assert "bf16 consts {'BQ': 128, 'BKV': 128" in out  # `auto` resolved as in attention_fwd.py's bench rows


def _row(fp8_ms: float, refused: bool) -> dict:
    work = bench.flops(8, 16, 4096, 128, False)
    ms = {"tkir fp8": fp8_ms, "tkir bf16": 1.7, "SDPA cuDNN bf16": 1.6, "SDPA fp8": None if refused else 1.0}
    row = dict(B=8, H=16, N=4096, D=128, causal=False, rel_err=2.1e-2, ok=True)
    for w, t in ms.items():
        row[w] = dict(ms=t, tflops=None if t is None else work / t / 1e9)
    row["fp8_over_bf16"], row["fp8_over_cudnn"] = 1.7 / fp8_ms, 1.6 / fp8_ms
    row["meets_bar"] = row["fp8_over_bf16"] >= bench.BAR_VS_BF16
    return row


def test_table_marks_refused_ways_and_the_bar() -> None:
    table = bench.format_table([_row(1.0, refused=True), _row(1.5, refused=False)])
    lines = table.splitlines()
    assert "SDPA fp8 TF/s" in lines[0]
    assert lines[2].split()[5] == "n/a" and "under the" not in lines[2]   # 1.7x: over the bar
    assert "under the 1.4x bar" in lines[3]                               # 1.13x


def test_variants_parse_and_print_beside_the_default() -> None:
    import argparse

    assert bench.parse_variant("b192np:BKV=192,STAGES=3:-pingpong") == ("b192np", {"BKV": 192, "STAGES": 3},
                                                                         "-pingpong")
    assert bench.parse_variant("same:") == ("same", {}, None)
    for bad in ("b192:BKV=big", ":BKV=192", "tkir fp8:BKV=192"):
        with pytest.raises(argparse.ArgumentTypeError):
            bench.parse_variant(bad)
    row = _row(1.0, refused=True)
    row["variants"] = {"b192": dict(consts={"BKV": 192}, pass_edits="-pingpong", rel_err=2.0e-2, ok=True, ms=0.8,
                                    tflops=1.0, over_default=1.25, over_bf16=2.125)}
    line = bench.format_table([row]).splitlines()[-1]
    assert "b192:" in line and "1.250x the default" in line and "2.125x bf16" in line and "-pingpong" in line
