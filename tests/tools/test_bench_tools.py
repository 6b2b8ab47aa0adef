"""scripts/bench/sm80_gemm.py's row specs and --dump-ptx, scripts/bench/ab.py's points and dump, and the
gemm_wg.tk variant they time, checked on CPU (no torch, no GPU): the variants are parameters of the tools, so a
spec that stops parsing or compiling fails here instead of on the device."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import check_interpreted, load_companion

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "scripts" / "bench"


def _load(name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


sm80 = _load("sm80_gemm")
ab = _load("ab")


def test_sm80_row_spec_tokens() -> None:
    row = sm80.parse_row("sm_80 BM=256 BN=128 BK=64 STAGES=4 pipeline-cp-async{step_ahead=false} -stage-epilogue")
    assert row["target"] == "sm_80" and row["file"] == "examples/gemm.tk"
    assert row["consts"] == dict(BM=256, BN=128, BK=64, STAGES=4)
    assert row["replace"] == {"pipeline-cp-async": "pipeline-cp-async{step_ahead=false}", "stage-epilogue": ""}
    row = sm80.parse_row("sm_90a")
    assert row["target"] == "sm_90a" and row["consts"] == {} and row["replace"] == {}
    row = sm80.parse_row("file=scripts/bench/gemm_wg.tk WG=1 ptx=/tmp/x.ptx l2_128b")
    assert (row["file"], row["ptx"], row["rewrite"], row["consts"]) == (
        "scripts/bench/gemm_wg.tk", "/tmp/x.ptx", "l2_128b", {"WG": 1})
    with pytest.raises(ValueError, match="cannot read"):
        sm80.parse_row("sm_80 bogus")
    assert sm80.parse_triton("128x128x32:4:4") == (128, 128, 32, 4, 4)
    assert "=" not in sm80.row_slug("sm_80 BM=256 plan-occupancy{producer_warps=0}")


def test_sm80_dump_ptx_applies_the_pass_replacements(tmp_path: Path) -> None:
    specs = ["sm_80 BM=128 BN=256 BK=32 STAGES=4", "sm_80 BM=128 BN=256 BK=32 STAGES=4 -stage-epilogue",
             "sm_80 file=scripts/bench/gemm_wg.tk BM=128 BN=128 BK=32 STAGES=4 WG=1 plan-occupancy{producer_warps=0}"]
    assert sm80.dump_ptx(specs, tmp_path) == 0
    ptx = [(tmp_path / f"{sm80.row_slug(s)}.ptx").read_text() for s in specs]
    assert all("mma.sync" in p and "wgmma" not in p for p in ptx)
    assert ptx[0] != ptx[1]   # stage-epilogue left out changes the epilogue
    # a row that loads another PTX in place of its own: the dumped file comes back unchanged
    k = sm80.compile_row(tkir, sm80.parse_row(f"{specs[1]} ptx={tmp_path / (sm80.row_slug(specs[0]) + '.ptx')}"))
    assert k.asm["ptx"] == ptx[0]


def test_gemm_wg_variant_is_correct_with_four_warps() -> None:
    path = str(BENCH / "gemm_wg.tk")
    consts = dict(BM=128, BN=128, BK=32, STAGES=2, WG=1)
    k = tkir.compile(path, target="sm_80", **consts)
    res = check_interpreted(k.module, load_companion(path), dict(M=128, N=128, K=64), consts, seed=3)
    assert all(r.ok for r in res), res


def test_ab_points_and_dump(tmp_path: Path) -> None:
    p = ab.parse_point("g80=gemm@sm_80:M=4096,N=4096,K=4096:BM=256,BN=128")
    assert p == dict(label="g80", kernel="gemm", target="sm_80", sizes=dict(M=4096, N=4096, K=4096),
                     consts=dict(BM=256, BN=128))
    assert ab.parse_point("ln=layernorm:N=65536")["consts"] == {}
    assert ab.kernel_path(ROOT, "scripts/bench/gemm_wg.tk") == BENCH / "gemm_wg.tk"
    with pytest.raises(ValueError):
        ab.parse_point("bad=gemm")
    assert ab.main(["dump", "--label", "head", "--out", str(tmp_path), "rot=rotary:T=65536"]) == 0
    assert json.loads((tmp_path / "points.json").read_text())[0]["label"] == "rot"
    meta = json.loads((tmp_path / "head" / "rot.json").read_text())
    assert "launch" in meta and (tmp_path / "head" / "rot.ptx").read_text().startswith("//")
