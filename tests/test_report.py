"""tkir/report.py on the examples after the layout passes, and on hand-written IR with TMA/occupancy."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tkir.api import build_module
from tkir.parser import parse_module
from tkir.passes.registry import load_registry
from tkir.passmanager import Options, PassManager
from tkir.report import build_report, format_report

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
LAYOUT_PASSES = ["canonicalize", "infer-layouts", "select-swizzle", "bank-conflicts"]


def report_of(name: str, **options: object) -> dict:
    module = build_module(str(EXAMPLES / f"{name}.tk"))
    PassManager(load_registry(), LAYOUT_PASSES).run(module, Options(**options))
    rep = build_report(module)
    json.dumps(rep)  # JSON-serialisable as `tkc report --json` prints it
    return rep


@pytest.mark.parametrize("name", ["gemm", "attention_fwd", "layernorm", "softmax", "rotary"])
def test_every_access_is_conflict_free(name: str) -> None:
    rep = report_of(name)
    assert all(a["degree"] == 1 for a in rep["accesses"]), rep["accesses"]
    assert rep["register_tiles"] and all(r["regs_per_thread"] > 0 for r in rep["register_tiles"])


def test_gemm_report() -> None:
    rep = report_of("gemm")
    tiles = {t["name"]: t for t in rep["shared_tiles"]}
    assert tiles["a"] == {"name": "a", "dtype": "bf16", "shape": [128, 64], "swizzle": 128, "align": 1024,
                          "bytes": 16384}
    assert tiles["b"]["swizzle"] == 128 and tiles["b"]["bytes"] == 32768
    acc = {r["name"]: r for r in rep["register_tiles"]}["acc"]
    assert acc["layout"] == "{kind = wgmma_acc, wg = 2}" and acc["regs_per_thread"] == 128
    assert {(a["op"], a["tile"]) for a in rep["accesses"]} == {("tma", "a"), ("tma", "b"),
                                                              ("wgmma.desc", "a"), ("wgmma.desc", "b")}
    text = format_report(rep)
    assert "shared tiles:" in text and "wgmma_acc" in text and "128B" in text


def test_swizzle_none_shows_the_conflicts() -> None:
    for name in ("gemm", "attention_fwd"):
        rep = report_of(name, swizzle="none")
        assert all(t["swizzle"] == 0 for t in rep["shared_tiles"])
        wgmma = [a for a in rep["accesses"] if a["op"] == "wgmma.desc"]
        # 16-byte core-matrix rows of 128-byte (or wider) rows: 8-way
        assert wgmma and all(a["degree"] == 8 == a["degree_before"] for a in wgmma)


def test_sm80_gemm_uses_ldmatrix() -> None:
    rep = report_of("gemm", target="sm_80")
    ops = {a["op"]: a for a in rep["accesses"]}
    assert ops["ldmatrix.x4"]["degree"] == 1 and ops["ldmatrix.x4"]["degree_before"] == 8
    assert ops["ldmatrix.x4.trans"]["degree"] == 1


TMA_IR = """
tma.desc @A_tma {tensor = "A", param = 0, dtype = "bf16", rank = 2, dims = ["K", "M"], strides = ["K * 2"], \
box = [64, 128], elem_strides = [1, 1], swizzle = 128, l2_promotion = 128, oob_fill = "zero"}
tk.kernel @k {grid = ["M / 128"], occupancy = {stages = 4, blocks_per_sm = 1, smem_bytes = 197632, \
roles = {producer = {warpgroups = 1, regs = 40}, consumer = {warpgroups = 2, regs = 232}}}} {
  ^(%A: gl<bf16>[M, K])
  %a = tk.alloc : st<bf16, 128, 64, swizzle=128, align=1024>
  %v = tk.alloc : sv<f32, 64>
  %acc = tk.fill {value = 0.0} : rt<f32, 64, 64, layout={kind = wgmma_acc, wg = 1}>
}
"""


def test_tma_and_occupancy_keys() -> None:
    rep = build_report(parse_module(TMA_IR))
    assert rep["tma"] == [{"name": "A_tma", "tensor": "A", "dtype": "bf16", "dims": ["K", "M"],
                           "strides": ["K * 2"], "box": [64, 128], "swizzle": 128, "oob_fill": "zero"}]
    assert rep["occupancy"] == {"stages": 4, "blocks_per_sm": 1, "smem_bytes": 197632,
                                "roles": [{"role": "producer", "warpgroups": 1, "regs_per_thread": 40},
                                          {"role": "consumer", "warpgroups": 2, "regs_per_thread": 232}]}
    assert rep["shared_tiles"][1] == {"name": "v", "dtype": "f32", "shape": [64], "swizzle": 0, "align": 128,
                                      "bytes": 256}
    assert rep["register_tiles"] == [{"name": "acc", "dtype": "f32", "shape": [64, 64],
                                      "layout": "{kind = wgmma_acc, wg = 1}", "regs_per_thread": 32}]
    text = format_report(rep)
    assert "tma descriptors:" in text and "A_tma" in text and "consumer" in text and "blocks/SM 1" in text


def test_without_tma_and_occupancy_the_keys_are_absent() -> None:
    rep = build_report(parse_module(TMA_IR.split("tk.kernel")[0].replace("tma.desc", "// ")
                                    + "tk.kernel @k {grid = [\"1\"]} {\n}\n"))
    assert "tma" not in rep and "occupancy" not in rep
    assert rep["shared_tiles"] == [] and rep["accesses"] == []
