"""scripts/bench/attention_bwd.py without a GPU or torch: its FLOP counts (forward, backward, both; causal
half), --gqa's argument check and dry run (the kernels compiled with G), --variant fused-deterministic's dry run
(DET=1), --d 256 refused for the three-kernel variant, and the table of rows with a GQA forward row and a peer
that refused enable_gqa (n/a)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tkir.tools.examples import load_module

ROOT = Path(__file__).resolve().parents[2]


bench = load_module(ROOT / "scripts" / "bench" / "attention_bwd.py", "bench_attention_bwd")


def test_flops_of_each_timing() -> None:
    fwd = 2 * 2 * 2 * 8 * 1024 * 1024 * 64  # two matmuls of 2 N^2 D per (batch, query head)
    assert bench.flops(2, 8, 1024, 64, False, what="fwd") == fwd
    assert bench.flops(2, 8, 1024, 64, False, what="bwd") == 2.5 * fwd == bench.flops(2, 8, 1024, 64, False, True)
    assert bench.flops(2, 8, 1024, 64, True, what="fwdbwd") == 3.5 * fwd / 2 == bench.flops(2, 8, 1024, 64, True)


def test_gqa_must_divide_the_heads(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--dry-run", "--heads", "16", "--gqa", "3"])
    assert "--gqa 3: the query heads (16) must be a positive multiple of G" in capsys.readouterr().err


@pytest.mark.parametrize("variant, kernels, with_g", [
    ([], ["attention_bwd", "attention_bwd_dq_convert"], 2),  # the default, fused: fwd and the main kernel have G
    (["--variant", "three-kernel"], ["attention_bwd_dkdv", "attention_bwd_dq"], 3),  # fwd, dK/dV, dQ
])
def test_dry_run_compiles_the_kernels_with_g(capsys: pytest.CaptureFixture, variant: list, kernels: list,
                                             with_g: int) -> None:
    assert bench.main(["--dry-run", "--gqa", "4", "--n", "1536", "--causal", "1", "--d", "64", *variant]) == 0
    out = capsys.readouterr().out
    assert out.count('"G": 4') == with_g and "attention_bwd_prep" in out  # prep has no G
    assert all(f'"{k}"' in out for k in kernels), out


def test_the_deterministic_variant_compiles_det_kernels(capsys: pytest.CaptureFixture) -> None:
    """--variant fused-deterministic: the fused kernels with DET=1 (the convert with the main kernel's BKV)."""
    assert bench.main(["--dry-run", "--variant", "fused-deterministic", "--n", "1536", "--causal", "1",
                       "--d", "64"]) == 0
    out = capsys.readouterr().out
    assert out.count('"DET": 1') == 2 and '"attention_bwd_dq_convert"' in out and "attention_bwd_dkdv" not in out
    assert bench.VARIANTS["fused-deterministic"] == ("fused", True)


def test_head_dim_256_takes_the_fused_backward_only(capsys: pytest.CaptureFixture) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--dry-run", "--d", "256", "--variant", "three-kernel"])
    assert "only the fused backward takes D = 256" in capsys.readouterr().err


def test_the_table_shows_the_forward_and_a_refusing_peer() -> None:
    def timing(ms: float, peer: float | None) -> dict:
        return dict(tkir_ms=ms, tkir_tflops=1.0, cudnn_ms=peer, cudnn_tflops=None, cudnn_ratio=None if peer is None
                    else peer / ms, flash_ms=2 * ms, flash_tflops=1.0, flash_ratio=2.0)
    row = dict(B=2, H=8, N=1000, D=64, causal=True, G=4, ok=True, rel_err={"O": 1e-3},
               fwd=timing(1.0, None), fwdbwd=timing(3.0, 3.3), bwd=timing(2.0, 2.2))
    lines = bench.format_table([row]).splitlines()
    assert [ln.split()[3] for ln in lines[2:]] == ["fwd", "fwdbwd", "bwd"]
    assert "2x8x1000x64 G=4" in lines[2] and "n/a" in lines[2] and "1.100" in lines[3]
