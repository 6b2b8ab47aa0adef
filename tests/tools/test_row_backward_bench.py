"""scripts/bench/row_backward.py without a GPU or torch: its arguments, the configurations and partial-row counts
of --dry-run, and the same row kernel configurations as the GPU tests, so that the bench times what they check."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from tkir.tools.examples import load_module

ROOT = Path(__file__).resolve().parents[2]


bench = load_module(ROOT / "scripts" / "bench" / "row_backward.py", "bench_row_backward")


def test_sizes_and_defines_parse() -> None:
    assert bench.parse_sizes("4096x4096, 65536X768") == [(4096, 4096), (65536, 768)]
    assert bench.parse_defines(["ROWS=2", "WG=1", "OCC=-0"]) == {"ROWS": 2, "WG": 1, "OCC": 0}
    for bad in ("4096", "4096x", "0x768", "ax768", "4096*4096"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected NxD"):
            bench.parse_sizes(bad)
    for bad in ("ROWS", "ROWS=two", "2=ROWS"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected NAME=INTEGER"):
            bench.parse_defines([bad])


def test_the_bar_sizes_are_the_default_sizes() -> None:
    assert set(bench.parse_sizes(bench.DEFAULT_SIZES)) == bench.BAR_SIZES == {(4096, 4096), (65536, 768)}


def test_bench_and_gpu_tests_configure_the_row_kernels_alike() -> None:
    gpu = load_module(ROOT / "tests" / "gpu" / "test_row_backward_gpu.py", "gpu_row_backward")
    assert bench.CONSTS == gpu.CONSTS


def test_companions_bench_the_bench_script_configurations() -> None:
    for kernel in ("rmsnorm", "layernorm"):
        comp = load_module(ROOT / "examples" / f"{kernel}_bwd.py", f"companion_{kernel}_bwd")
        for sizes, consts in zip(comp.BENCH_SIZES, comp.BENCH_CONSTS, strict=True):
            plan = bench.plan_row(kernel, sizes["N"], consts["D"], {})
            assert plan["consts"] == {**bench.CONSTS[consts["D"]], "D": consts["D"], "G": consts["G"]}


def test_dry_run_prints_each_row(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench.main(["--dry-run", "--sizes", "4096x4096,65536x768,1x768"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6  # two kernels x three sizes
    # one wave of blocks that each walk the same number of row tiles: 4096 tiles of one row over 2 x 132
    # slots -> 16 tiles a block, 256 blocks; 16384 tiles of 4 rows over 4 x 132 (rmsnorm, 128 registers);
    # the companions' BENCH_CONSTS say the same
    assert out[0].startswith("rmsnorm 4096x4096: {'ROWS': 1, 'WG': 4, 'D': 4096, 'G': 256} G=256 (of 264 resident slots)")
    assert out[1].startswith("rmsnorm 65536x768: {'ROWS': 4, 'WG': 1, 'D': 768, 'G': 512} G=512 (of 528 resident slots)")
    assert out[2].startswith("rmsnorm 1x768: {'ROWS': 4, 'WG': 1, 'D': 768, 'G': 1} G=1 ")
    assert out[3].startswith("layernorm 4096x4096: {'ROWS': 1, 'WG': 4, 'D': 4096, 'G': 256} G=256 ")
    assert "partials 8.39 MB" in out[3]  # 256 rows of DW's and DB's partials, 2 x 4096 f32 each
    assert bench.main(["--dry-run", "--kernel", "layernorm", "--sizes", "127x1024", "-D", "ROWS=2"]) == 0
    assert capsys.readouterr().out.startswith("layernorm 127x1024: {'ROWS': 2, 'D': 1024, 'G': 64} G=64 ")
    assert bench.main(["--dry-run", "--kernel", "rmsnorm", "--sizes", "127x1024", "-D", "G=7"]) == 0
    assert capsys.readouterr().out.startswith("rmsnorm 127x1024: {'G': 7, 'D': 1024} G=7 ")
