"""tkir/tools/report.py on the examples after the layout passes, and on hand-written IR with TMA/occupancy."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import tkir
from tkir.access_report import AccessReport, reports_of
from tkir.api import build_module
from tkir.parser import parse_module
from tkir.passes.registry import DEFAULT_PIPELINE, load_registry
from tkir.passmanager import Options, PassManager
from tkir.tools.examples import load_companion
from tkir.tools.report import build_report, format_report, highest_register, peak_live_registers, register_comparison
from tkir.types import format_attr_value

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROW_KERNELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "rows"  # the row kernels with every knob
GEMM_CONSTS = load_companion(str(EXAMPLES / "gemm.tk")).DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
# the front end cannot choose auto consts: gemm.tk's at the header's old values, attention_fwd.tk's tile as auto chooses
FRONT_END_CONSTS = {"gemm": GEMM_CONSTS, "attention_fwd": {"BQ": 128, "BKV": 128}}
LAYOUT_PASSES = ["canonicalize", "infer-layouts", "select-swizzle", "bank-conflicts"]


def report_of(name: str, **options: object) -> dict:
    base = ROW_KERNELS if name in ("layernorm", "rmsnorm", "softmax") else EXAMPLES
    module = build_module(str(base / f"{name}.tk"), FRONT_END_CONSTS.get(name))
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
    """--swizzle=none: wgmma operands take the interleaved layout (span 16: conflict-free core-matrix
    reads and TMA box writes, where plain 128-byte rows would be 8-way), everything else plain rows."""
    for name in ("gemm", "attention_fwd"):
        rep = report_of(name, swizzle="none")
        assert {t["swizzle"] for t in rep["shared_tiles"]} <= {0, 16}
        wgmma = [a for a in rep["accesses"] if a["op"] == "wgmma.desc"]
        assert wgmma and all(a["degree"] == 1 and a["degree_before"] == 8 for a in wgmma)
        tma = [a for a in rep["accesses"] if a["op"] == "tma"]
        assert tma and all(a["degree"] == 1 for a in tma)


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


# --- registers: plan-occupancy's prediction beside ptxas -------------------------------------------

BUDGET_IR = TMA_IR.replace("smem_bytes = 197632,", "smem_bytes = 197632, threads = 384,").replace(
    "regs = 232}}}}", "regs = 232}}, budget = {acc_regs = 128, live_tile_regs = 0, addr_regs = 14, overhead = 16}}}")


def test_register_comparison_of_a_warp_specialized_plan() -> None:
    regs = register_comparison(parse_module(BUDGET_IR), ptxas=168, sass=200)
    assert regs == {"role": "consumer", "predicted": 232, "predicted_total": 158,
                    "budget": {"acc_regs": 128, "live_tile_regs": 0, "addr_regs": 14, "overhead": 16},
                    "setmaxnreg": True, "ptxas": 168, "sass_regs": 200, "sass_live_peak": None,
                    "within_10pct": False}
    line = format_report({"registers": regs})
    assert "predicted 232 (setmaxnreg" in line and "ptxas 168 (-28%, off by more than 10%)" in line
    assert "R0..R199" in line


def test_register_comparison_tolerance_and_missing_ptxas() -> None:
    module = parse_module(BUDGET_IR)
    assert register_comparison(module, ptxas=int(232 * 0.9) + 1)["within_10pct"] is True
    assert register_comparison(module, ptxas=int(232 * 0.9) - 1)["within_10pct"] is False
    regs = register_comparison(module, ptxas=None)
    assert regs["ptxas"] is None and regs["within_10pct"] is None
    assert "ptxas: not run" in format_report({"registers": regs})
    assert register_comparison(parse_module('tk.kernel @k {grid = ["1"]} {\n}\n'), ptxas=40) is None


def test_highest_register_reads_sass_operands() -> None:
    sass = ("        /*0070*/                   IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28] ;\n"
            "        /*0080*/                   LDS.128 R196, [R3+0x10] ;\n"
            "        /*0090*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR4], R24 ;\n")
    assert highest_register(sass) == 197
    assert highest_register("        /*0000*/                   EXIT ;\n") is None


def test_cli_report_json_has_registers(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    from tkir.cli import main

    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path))

    assert main(["report", str(EXAMPLES / "softmax.tk"), "--json"]) == 0
    regs = json.loads(capsys.readouterr().out)["registers"]
    assert set(regs) >= {"predicted", "predicted_total", "ptxas", "within_10pct"}
    assert regs["role"] == "compute" and regs["predicted"] % 8 == 0
    assert regs["predicted_total"] <= regs["predicted"] < regs["predicted_total"] + 8
    assert isinstance(regs["ptxas"], int) and regs["ptxas"] > 0
    assert regs["within_10pct"] == (abs(regs["ptxas"] - regs["predicted"]) <= 0.1 * regs["predicted"])


def test_cli_report_shows_the_blocks_per_sm_the_ptx_asks_for(capsys: pytest.CaptureFixture[str],
                                                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A kernel without warp roles streams two blocks where the plan has one (tkir/launch_bounds.py): the report
    says what the PTX asks ptxas for beside the plan's count; a warp-specialized gemm asks for the plan's."""
    from tkir.cli import main
    from tkir.tools.report import ptx_min_blocks

    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path))
    assert main(["report", str(EXAMPLES / "layernorm_bwd.tk"), "--json"]) == 0
    occ = json.loads(capsys.readouterr().out)["occupancy"]
    assert (occ["blocks_per_sm"], occ["minnctapersm"]) == (1, 2), occ
    assert main(["report", str(EXAMPLES / "layernorm_bwd.tk")]) == 0
    assert "occupancy: stages 1, blocks/SM 1 planned, 2 in the PTX (.minnctapersm), " in capsys.readouterr().out
    assert main(["report", str(EXAMPLES / "gemm.tk")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("occupancy:"))
    assert re.fullmatch(r"occupancy: stages \d+, blocks/SM 1, shared memory \d+ bytes", line), line
    assert ptx_min_blocks(".entry k\n.maxntid 128, 1, 1\n.minnctapersm 3\n{") == 3 and ptx_min_blocks(".entry k {") is None


def test_cli_report_survives_a_backend_failure(capsys: pytest.CaptureFixture[str],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import tkir.backend.lower as backend
    from tkir.cli import main

    def broken(module: object, options: object) -> dict:
        raise NotImplementedError("backend: no slot formulas for layout 'mma_c'")

    monkeypatch.setenv("TKIR_CACHE", "0")
    monkeypatch.setattr(backend, "compile_module", broken)
    assert main(["report", str(EXAMPLES / "gemm.tk")]) == 0
    out = capsys.readouterr().out
    assert "backend: not compiled: NotImplementedError: backend: no slot formulas" in out
    assert "predicted 232 (setmaxnreg" in out and "ptxas: not run" in out


def test_peak_live_registers_skips_calls_and_subroutines() -> None:
    plr = ("        /*0000*/                   LDC R1, c[0x0][0x28] ;                      // |   5   |        |\n"
           "        /*0490*/                   SHF.L.U32 R36, R19, 0x10, RZ ;              // |  38   |   1    |\n"
           "        /*04a0*/                   CALL.REL.NOINC `($__internal_0_rcp) ;       // |  90   |        |\n"
           "$__internal_0_$__cuda_sm20_rcp_rn_f32_slowpath:                                // |       |        |\n"
           "        /*04b0*/                   FFMA R2, R3, R4, R5 ;                       // |  99   |        |\n")
    assert peak_live_registers(plr) == 38
    assert peak_live_registers("") is None


# --- access reports: the staged epilogue, and the typed entries -------------------------------------


def test_default_pipeline_reports_the_staging_tile() -> None:
    """The epilogue staging tile create-tma adds is in the report: its select-swizzle layout and its
    bank-conflicts entries (bf16 pairs 8-way on plain rows, conflict-free at 128B; the TMA store)."""
    from tkir.passes.registry import DEFAULT_PIPELINE

    module = build_module(str(EXAMPLES / "gemm.tk"), GEMM_CONSTS)
    PassManager(load_registry(), DEFAULT_PIPELINE).run(module, Options())
    rep = build_report(module)
    tiles = {t["name"]: t for t in rep["shared_tiles"]}
    assert tiles["C_stage"] == {"name": "C_stage", "dtype": "bf16", "shape": [128, 128], "swizzle": 128,
                                "align": 1024, "bytes": 32768}
    staged = [a for a in rep["accesses"] if a["tile"] == "C_stage"]
    assert staged == [{"op": "st.shared.b32", "tile": "C_stage", "degree": 1, "degree_before": 8, "hardware": False},
                      {"op": "tma", "tile": "C_stage", "degree": 1, "degree_before": 1, "hardware": True}]
    assert "st.shared.b32  C_stage" in format_report(rep)


@pytest.mark.parametrize("report", [AccessReport("ldmatrix.x4", "p", 1, 8),
                                    AccessReport("tma", "a", 1, 1, hardware=True),
                                    AccessReport("wgmma.desc", "b", 1, 8, hardware=True, major="MN")])
def test_access_report_round_trips_through_its_attribute(report: AccessReport) -> None:
    attr = report.to_attr()
    assert AccessReport.from_attr(attr) == report
    assert list(attr)[:4] == ["op", "tile", "degree", "degree_before"]  # the IR text's key order
    assert ("hardware" in attr) == report.hardware and ("major" in attr) == (report.major is not None)
    ops = parse_module(f'tk.kernel @k {{grid = ["1"]}} {{\n  tk.barrier {{access = [{format_attr_value(attr)}]}}\n}}\n')
    assert reports_of(ops.kernel.body.ops[0].attrs) == [report]


@pytest.mark.parametrize("attr, words", [
    ({"op": "tma", "tile": "a", "degree": 1}, "'degree_before' must be an integer"),
    ({"op": "tma", "tile": "a", "degree": 1, "degree_before": 1, "fix": 32}, "unknown keys ['fix']"),
    ({"op": "tma", "tile": "a", "degree": 0, "degree_before": 1}, "degrees are 1 or more"),
    ({"op": "tma", "tile": "a", "degree": 1, "degree_before": 1, "hardware": 1}, "'hardware' must be true or false"),
    ({"op": "wgmma.desc", "tile": "a", "degree": 1, "degree_before": 1, "major": "M"}, "major must be one of"),
    ([1, 2], "is a dict"),
])
def test_access_report_refuses_malformed_entries(attr: object, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        AccessReport.from_attr(attr)


def test_register_copies_say_which_edge_tests_are_left_out() -> None:
    """tkc report's `register_copies` (tkir/bounds.py's proofs): one row at block.x of grid(N) and chunk
    indices of a constant-bound loop need no tests; 16 rows per block of N rows do; a copy the backend
    makes element by element is reported as such, with every dim tested."""
    import tkir
    from tkir.tools.report import build_report

    chunked = build_report(tkir.compile("tests/data/rows/layernorm.tk", D=16384, DC=2048, ROWS=1, WG=4).module)
    by_tile = {c["tile"]: c for c in chunked["register_copies"]}
    assert by_tile["xc"] == {"op": "load", "tensor": "X", "tile": "xc", "access": "8-byte vectors",
                             "l2": "evict_last", "rows": "one row at block.x of grid cdiv(N, 1)",
                             "cols": "index <= 7: 2048 x 8 <= 16384"}
    assert by_tile["ws"]["rows"] == "-" and by_tile["ws"]["cols"].startswith("index <= 7")
    stores = [c for c in chunked["register_copies"] if c["op"] == "store"]
    assert stores and {c["l2"] for c in stores} == {"-"}  # cache-policy marks loads only
    ablated = tkir.compile("tests/data/rows/layernorm.tk", D=16384, DC=2048, ROWS=1, WG=4,
                           passes="canonicalize,infer-layouts,plan-occupancy,canonicalize")
    assert {c["l2"] for c in build_report(ablated.module)["register_copies"]} == {"-"}
    header = build_report(tkir.compile("tests/data/rows/layernorm.tk").module)
    assert {c["rows"] for c in header["register_copies"] if c["rows"] != "-"} == {"tested"}
    gemm = build_report(tkir.compile("examples/gemm.tk", target="sm_80").module)
    assert [(c["op"], c["access"], c["cols"]) for c in gemm["register_copies"]] == [
        ("store", "16-byte vectors via shared (stage-epilogue)", "tested")]
    no_stage = ",".join(p for p in tkir.api.default_pipeline() if p != "stage-epilogue")
    plain = build_report(tkir.compile("examples/gemm.tk", target="sm_80", passes=no_stage).module)
    assert all(c["access"] == "element-wise" and c["cols"] == "tested" for c in plain["register_copies"])


def test_cp_async_loops_show_the_rotation_and_a_ahead() -> None:
    """sm_80's cp.async main loops in the report: gemm's is rotated a whole k16 step (4 units) before the end,
    its fragments loaded a step ahead (pipeline-cp-async's step_ahead) and A with them; with step_ahead=false,
    one unit and the backend's distance; with pipeline-cp-async{rotate=0,a_ahead=false,step_ahead=false} none
    of it; attention's two loops (split-masks) keep the top-of-loop barrier and the backend's rules."""
    def loops(path: str, **kw: object) -> list[dict]:
        return build_report(tkir.compile(path, target="sm_80", **kw).module)["cp_async_loops"]

    def with_cp(params: str) -> str:
        return ",".join(f"pipeline-cp-async{{{params}}}" if p == "pipeline-cp-async" else p for p in DEFAULT_PIPELINE)

    assert loops("examples/gemm.tk") == [{"stages": 4, "ahead": 3, "rotate": 4, "fragments": 4, "a_ahead": True}]
    assert loops("examples/gemm.tk", passes=with_cp("step_ahead=false")) == [
        {"stages": 4, "ahead": 3, "rotate": 1, "fragments": "rule", "a_ahead": True}]
    off = with_cp("rotate=0,a_ahead=false,step_ahead=false")
    assert loops("examples/gemm.tk", passes=off) == [
        {"stages": 4, "ahead": 3, "rotate": 0, "fragments": "rule", "a_ahead": False}]
    assert all(lp["rotate"] == 0 and lp["a_ahead"] == "rule" and lp["fragments"] == "rule"
               for lp in loops("examples/attention_fwd.tk"))
    text = format_report(build_report(tkir.compile("examples/gemm.tk", target="sm_80").module))
    assert re.search(r"cp\.async main loops:\n\s+stages\s+ahead\s+rotate\s+fragments\s+a_ahead\n\s+4\s+3\s+4\s+4\s+true",
                     text)
