"""`tkc report --measure` without a GPU: ncu's CSV read back (tkir/tools/ncu.py, on fixtures written from ncu's
documented layouts in tests/data/ncu/), the predicted-vs-measured verdicts (tkir/tools/measure.py), the DRAM
predictor (tkir/tools/traffic.py), and the CLI's errors and whole flow with a stand-in ncu that prints a fixture."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tkir.cli import main
from tkir.tools import measure as measure_mod
from tkir.tools import ncu as ncu_mod
from tkir.tools.examples import load_companion
from tkir.tools.measure import (
    PEAKS,
    access_class,
    access_key,
    class_verdict,
    compare,
    dram_check,
    format_measured,
    metric_table,
    occupancy_check,
    peaks_for,
    register_check,
    roofline,
    sass_key,
    shared_classes,
    width_groups,
)
from tkir.tools.ncu import (
    METRIC_NAMES,
    METRICS,
    SourceRow,
    metric_value,
    parse_ncu_csv,
    parse_source_csv,
    source_shared,
    unknown_metrics,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "data" / "ncu"
GEMM_CONSTS = load_companion(str(ROOT / "examples" / "gemm.tk")).DEFAULT_CONSTS  # gemm.tk's auto consts, old values


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- ncu's CSV --------------------------------------------------------------------------------------


def test_the_details_page_is_read_in_base_units() -> None:
    [launch] = parse_ncu_csv(fixture("details_gemm_sm90a.csv"))
    assert launch.kernel == "gemm" and launch.id == "0"
    m = launch.metrics
    assert m["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum"] == 17609  # "17,609"
    assert m["smsp__sass_inst_executed_op_shared_st.sum"] == 16384
    assert m["launch__shared_mem_per_block_dynamic"] == 230464
    assert m["sm__warps_active.avg.pct_of_peak_sustained_active"] == pytest.approx(18.61)
    assert launch.units["gpu__time_duration.sum"] == "nsecond"
    assert set(m) == set(METRIC_NAMES)  # the fixture answers every metric asked for


def test_the_raw_page_is_read_with_its_units_row() -> None:
    [launch] = parse_ncu_csv(fixture("raw_transpose.csv"))
    assert launch.kernel == "transpose"
    assert launch.metrics["l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum"] == 196608
    assert launch.metrics["smsp__sass_inst_executed_op_shared_ld.sum"] == 49152
    assert launch.metrics["dram__bytes_read.sum"] == 134217728 and launch.units["dram__bytes_read.sum"] == "byte"
    assert "Grid Size" not in launch.metrics and "CC" not in launch.metrics


def test_scaled_units_na_and_two_launches() -> None:
    first, second = parse_ncu_csv(fixture("details_scaled_units.csv"))
    assert (first.id, second.id) == ("0", "1")
    assert first.metrics["dram__bytes_read.sum"] == pytest.approx(1.25e6)      # 1.25 Mbyte
    assert second.metrics["gpu__time_duration.sum"] == pytest.approx(25_000)   # 25 usecond
    assert first.metrics["launch__shared_mem_per_block_dynamic"] == 48_000    # 48 Kbyte/block
    assert first.units["launch__shared_mem_per_block_dynamic"] == "byte/block"
    assert first.metrics["sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active"] is None


@pytest.mark.parametrize("text, unit, value", [("17,609", "", 17609.0), ("1,048,576.5", "byte", 1048576.5),
                                              ("0.5", "Gbyte", 5e8), ("3", "msecond", 3e6), ("-2", "", -2.0),
                                              ("n/a", "", None), ("", "", None), ("(128, 1, 1)", "", None),
                                              ("12,34", "", None)])
def test_metric_value(text: str, unit: str, value: float | None) -> None:
    assert metric_value(text, unit) == value


def test_output_without_a_csv_header_has_no_launch() -> None:
    assert parse_ncu_csv("==PROF== Connected to process 1\n==WARNING== No kernels were profiled.\n") == []


def test_an_error_line_naming_a_metric_marks_it_unknown() -> None:
    out = ("==ERROR== Failed to find metric smsp__inst_executed_op_stsm\n"
           "==PROF== Connected to process 1\nsmsp__sass_inst_executed_op_shared_st.sum appears outside an error\n")
    assert unknown_metrics(out, list(METRIC_NAMES)) == ["smsp__inst_executed_op_stsm.sum"]
    other = "==ERROR== The application returned an error code (1) after reading dram__bytes_read.sum\n"
    assert unknown_metrics(other, list(METRIC_NAMES)) == []  # an error not about a metric drops none


def test_every_metric_has_a_source_and_the_table_lists_it() -> None:
    table = metric_table()
    for m in METRICS:
        assert m.what and m.source and f"`{m.name}`" in table


# --- predicted vs measured -------------------------------------------------------------------------


@pytest.mark.parametrize("op, cls", [("ldmatrix.x4", ("ld", 4)), ("ldmatrix.x4.trans", ("ld", 4)),
                                     ("stmatrix.x4", ("st", 4)), ("ldmatrix.x2", ("ld", 2)),
                                     ("ld.shared.v4", ("ld", 4)), ("st.shared.v2", ("st", 2)),
                                     ("st.shared.b32", ("st", 1)), ("ld.shared.b16", ("ld", 1)),
                                     ("cp.async", ("ldgsts", 4)), ("tma", None), ("wgmma.desc", None),
                                     ("ld.shared.q9", None)])
def test_access_class(op: str, cls: tuple[str, int] | None) -> None:
    assert access_class(op) == cls


def _acc(op: str, degree: int, tile: str = "t") -> dict:
    cls = access_class(op)
    assert cls is not None
    return {"op": op, "tile": tile, "degree": degree, "wavefronts_per_instruction": degree * cls[1]}


def test_a_one_way_class_is_ok_only_within_one_percent_of_its_wavefronts() -> None:
    acc = [_acc("st.shared.b32", 1)]
    assert class_verdict(acc, 16384, 16384, 0)["verdict"] == "ok"
    assert class_verdict(acc, 16384, 16384 + 163, 163)["verdict"] == "ok"  # 163 < 1% of 16547
    off = class_verdict(acc, 16384, 17609, 355)  # the gemm epilogue's stores (issue's table)
    assert off["verdict"] == "off" and off["predicted_conflicts"] == 0
    assert "355 conflicts in 17609 wavefronts (2.02%), predicted 0" in off["why"]
    assert "1.07 wavefronts per instruction (17609 for 16384), predicted 1" in off["why"]


def test_a_predicted_four_way_load_is_ok_at_four_wavefronts_per_instruction() -> None:
    acc = [_acc("ld.shared.b16", 4)]  # transpose's column reads
    ok = class_verdict(acc, 49152, 196608, 147456)
    assert ok["verdict"] == "ok" and ok["predicted_conflicts"] == 147456 and ok["measured_per_instruction"] == 4
    fewer = class_verdict(acc, 49152, 98304, 49152)  # measured 2-way where 4-way was predicted
    assert fewer["verdict"] == "off" and "predicted 4" in fewer["why"]


def test_an_eight_way_ldmatrix_predicted_and_measured() -> None:
    acc = [_acc("ldmatrix.x4", 8, "a"), _acc("ldmatrix.x4.trans", 8, "b")]  # gemm sm_80 --swizzle=none
    ok = class_verdict(acc, 134_000, 134_000 * 32, 134_000 * 28)
    assert ok["verdict"] == "ok" and ok["predicted_per_instruction"] == [32, 32]
    assert class_verdict(acc, 134_000, 134_000 * 4, 0)["verdict"] == "off"


def test_mixed_widths_bound_the_wavefronts_per_instruction() -> None:
    acc = [_acc("ld.shared.v4", 1), _acc("ld.shared.b32", 2)]  # 4 and 2 wavefronts per instruction
    mixed = class_verdict(acc, 1000, 3000, 0)
    assert mixed["verdict"] == "ok" and mixed["predicted_per_instruction"] == [2, 4]
    assert mixed["predicted_conflicts"] is None  # the instructions of each access are not counted apart
    assert class_verdict(acc, 1000, 5000, 0)["verdict"] == "off"


@pytest.mark.parametrize(("sass", "key"), [("STS.128 [R2+UR4], R4", ("st", "STS.128")), ("LDS R0, [R1]", ("ld", "LDS.32")),
                                          ("@!P0 LDS.64 R2, [R3]", ("ld", "LDS.64")), ("LDS.U16 R2, [R3]", ("ld", "LDS.16")),
                                          ("STS.U8 [R1], R2", ("st", "STS.8")),
                                          ("LDSM.16.MT88.4 R4, [R5]", ("ld", "LDSM.x4")),
                                          ("STSM.16.M88.2 [R1], R4", ("st", "STSM.x2")), ("LDGSTS.E [R1], [R2]", None),
                                          ("FFMA R1, R2, R3, R4", None)])
def test_sass_key(sass: str, key: tuple[str, str] | None) -> None:
    assert sass_key(sass) == key


@pytest.mark.parametrize(("op", "sass"), [("ld.shared.v4", "LDS.128 R4, [R2]"), ("st.shared.f32", "STS [R1], R2"),
                                        ("st.shared.b32", "STS [R1], R2"), ("ld.shared.v2", "LDS.64 R4, [R2]"),
                                        ("ld.shared.b16", "LDS.U16 R4, [R2]"), ("st.shared.b8", "STS.U8 [R1], R2"),
                                        ("ldmatrix.x4.trans", "LDSM.16.MT88.4 R4, [R5]"),
                                        ("stmatrix.x4", "STSM.16.M88.4 [R1], R4")])
def test_a_listed_access_and_its_sass_instruction_have_one_key(op: str, sass: str) -> None:
    assert access_key(op) == sass_key(sass) is not None


def _row(sass: str, executed: float, wavefronts: float, ideal: float) -> SourceRow:
    klass = "ld" if sass.startswith("LD") else "st"
    return SourceRow(sass, klass, executed, wavefronts, ideal)


def test_mixed_widths_are_judged_width_by_width_on_the_source_page() -> None:
    """A class of widths with different listed degrees (Based's 2-way v4 scratch stores among 1-way f32 and stmatrix
    stores) has no one predicted count of conflicts; the source page's instructions, grouped by width, each
    against its own listed degree, decide it."""
    acc = [_acc("st.shared.v4", 2, "scratch"), _acc("st.shared.f32", 1, "scratch"), _acc("stmatrix.x4", 1, "a1s")]
    rows = [_row("STS.128 [R2], R4", 100, 800, 400), _row("STS [R1], R2", 1000, 1000, 1000),
            _row("STSM.16.M88.4 [R1], R4", 10, 40, 40)]
    metrics = {m: None for m in METRIC_NAMES}
    src = source_shared(rows)
    (st,) = shared_classes(acc, metrics, src, rows)
    assert st["verdict"] == "ok" and st["why"] == "each width at its listed degree"
    assert [(g["width"], g["measured_degree"], g["predicted_degrees"]) for g in st["by_width"]] == [
        ("STS.128", 2.0, [2]), ("STS.32", 1.0, [1]), ("STSM.x4", 1.0, [1])]
    assert shared_classes(acc, metrics, src)[0]["verdict"] == "ok"  # without the rows: the per-instruction range
    half = [_row("STS.128 [R2], R4", 100, 600, 400)] + rows[1:]  # 1.5-way where 2-way was listed
    (off,) = shared_classes(acc, metrics, source_shared(half), half)
    assert off["verdict"] == "off" and "STS.128: degree 1.5 measured, predicted 2" in off["why"]


def test_instructions_that_move_nothing_form_no_group_and_the_widths_decide() -> None:
    """Measured on an H100 (swznone_mma_ss_k32B_n32B-top-bf16-sm_80): 16 ldmatrix.x4 at 2-way as listed, and 24 LDS
    that moved nothing (no wavefronts, no ideal ones). The class-level count (40 instructions, 128 wavefronts:
    3.2 a instruction against the 8 of a 2-way x4) called it off; the widths say the listing is exact."""
    acc = [_acc("ldmatrix.x4", 2, "a"), _acc("ldmatrix.x4.trans", 2, "b")]
    rows = [_row("LDSM.16.M88.4 R4, [R5]", 16, 128, 64), _row("LDS R0, [R1]", 24, 0, 0)]
    metrics = {m: None for m in METRIC_NAMES}
    assert class_verdict(acc, 40, 128, 64)["verdict"] == "off"
    (ld,) = shared_classes(acc, metrics, source_shared(rows), rows)
    assert [g["width"] for g in ld["by_width"]] == ["LDSM.x4"] and ld["verdict"] == "ok"


def test_an_unlisted_width_is_held_to_one_way() -> None:
    groups = width_groups([_acc("st.shared.v4", 1)], [_row("STS.64 [R2], R4", 10, 20, 20),
                                                      _row("STS [R1], R2", 10, 20, 10)])
    assert [(g["width"], g["predicted_degrees"], g["verdict"]) for g in groups] == [("STS.32", [], "off"),
                                                                                  ("STS.64", [], "ok")]


def test_unreported_shared_traffic_is_held_to_no_conflicts() -> None:
    assert class_verdict([], 512, 512, 0)["verdict"] == "ok"
    off = class_verdict([], 512, 700, 188)
    assert off["verdict"] == "off" and "does not list" in off["why"]


def test_a_class_not_executed_or_not_counted_has_no_verdict() -> None:
    assert class_verdict([_acc("ldmatrix.x4", 1)], 0, 0, 0)["verdict"] == "-"
    assert class_verdict([_acc("ldmatrix.x4", 1)], None, None, None)["why"].startswith("not measured")


def test_shared_classes_add_ldmatrix_to_the_loads_and_leave_out_hardware_paths() -> None:
    accesses = [{"op": "ldmatrix.x4", "tile": "a", "degree": 1}, {"op": "ld.shared.v4", "tile": "v", "degree": 1},
                {"op": "tma", "tile": "a", "degree": 1}, {"op": "wgmma.desc", "tile": "a", "degree": 1}]
    metrics = {"smsp__sass_inst_executed_op_shared_ld.sum": 100.0, "smsp__inst_executed_op_ldsm.sum": 300.0,
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 1600.0,
               "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 0.0,
               "smsp__sass_inst_executed_op_shared_st.sum": 0.0}
    [ld] = shared_classes(accesses, metrics)  # no st class: nothing predicted, nothing executed
    assert ld["class"] == "ld" and ld["instructions"] == 400 and ld["verdict"] == "ok"
    assert [a["op"] for a in ld["accesses"]] == ["ldmatrix.x4", "ld.shared.v4"]


REGISTERS = {"role": "consumer", "predicted": 232, "predicted_total": 158, "budget": {}, "setmaxnreg": True,
             "ptxas": 168, "sass_regs": 152, "sass_live_peak": 147, "within_10pct": False}


def test_registers_are_judged_against_ptxas_and_show_the_launch() -> None:
    r = register_check(REGISTERS, {"registers": 168, "spill_stores": 0, "spill_loads": 0},
                       {"launch__registers_per_thread": 168.0})
    assert r["verdict"] == "off" and r["why"] == "predicted 232, ptxas 168 (-28%)" and r["launch"] == 168
    ok = register_check(dict(REGISTERS, predicted=56), {"registers": 53}, {})
    assert ok["verdict"] == "ok"
    launch_only = register_check(dict(REGISTERS, predicted=56), None, {"launch__registers_per_thread": 64.0})
    assert launch_only["verdict"] == "off" and "the launch 64" in launch_only["why"]
    assert register_check(None, None, {})["verdict"] == "-"


def test_an_occupancy_plan_the_launch_cannot_hold_is_off() -> None:
    limits = {"launch__occupancy_limit_registers": 1.0, "launch__occupancy_limit_shared_mem": 2.0,
              "launch__occupancy_limit_warps": 8.0, "launch__occupancy_limit_blocks": 32.0,
              "launch__block_size": 256.0}
    off = occupancy_check({"blocks_per_sm": 2}, limits)
    assert off["verdict"] == "off" and off["why"] == "planned 2 blocks per SM, the launch's registers allow 1"
    assert off["planned_pct"] == 25.0  # 2 x 8 warps of 64
    assert occupancy_check({"blocks_per_sm": 1}, limits)["verdict"] == "ok"
    assert occupancy_check(None, limits)["verdict"] == "-"


def test_dram_bytes_are_judged_for_memory_bound_kernels_only() -> None:
    row = {"read_bytes": 100_000_000, "write_bytes": 100_000_000, "memory_bound": True, "tensors": []}
    m = {"dram__bytes_read.sum": 1.02e8, "dram__bytes_write.sum": 0.97e8}
    assert dram_check(row, m)["verdict"] == "ok"
    assert dram_check(row, {"dram__bytes_read.sum": 1.02e8, "dram__bytes_write.sum": 0.7e8})["verdict"] == "off"
    gemm = dict(row, memory_bound=False)
    far = dram_check(gemm, {"dram__bytes_read.sum": 3e8, "dram__bytes_write.sum": 1e8})
    assert far["verdict"] == "-" and "floor" in far["why"]


def test_roofline_takes_the_larger_bound() -> None:
    peaks = PEAKS["H100"]
    flops = 2 * 4096**3
    r = roofline(flops, 100_663_296, 171_232, peaks)
    assert r["limit"] == "tensor" and r["bound_ns"] == pytest.approx(flops / peaks.tensor_flops * 1e9)
    assert r["fraction_of_bound"] == pytest.approx(r["bound_ns"] / 171_232)
    rows = roofline(None, 268_435_456, 98_112, peaks)
    assert rows["limit"] == "memory" and rows["tensor_ns"] is None
    assert peaks_for("NVIDIA H200").device == "H200" and peaks_for("NVIDIA H100 80GB HBM3").device == "H100"
    assert peaks_for("unknown").device == "H100"


def test_compare_lists_what_is_off() -> None:
    [launch] = parse_ncu_csv(fixture("details_gemm_sm90a.csv"))
    report = {"accesses": [{"op": "tma", "tile": "a", "degree": 1, "degree_before": 1, "hardware": True},
                           {"op": "st.shared.b32", "tile": "C_stage", "degree": 1, "degree_before": 8}],
              "occupancy": {"stages": 4, "blocks_per_sm": 1, "smem_bytes": 230464, "roles": []},
              "registers": REGISTERS, "ptxas": {"registers": 168, "spill_stores": 0, "spill_loads": 0}}
    dram = {"read_bytes": 4_194_304, "write_bytes": 2_097_152, "memory_bound": False, "tensors": []}
    m = compare(report, launch.metrics, dram=dram, flops=2 * 1024**3, device="NVIDIA H100 80GB HBM3")
    assert [c["class"] for c in m["shared"]] == ["st"]
    assert [o.split(":")[0] for o in m["off"]] == ["st", "registers"]
    assert m["occupancy"]["verdict"] == "ok" and m["dram"]["verdict"] == "-"
    assert m["tensor_pipe_pct"] == pytest.approx(31.52) and m["duration_ns"] == 9824
    text = format_measured(dict(m, kernel="gemm", sizes={"M": 1024}, ncu="Version 2025.1"))
    assert "shared st (st.shared, stmatrix)  st.shared.b32 C_stage 1-way" in text
    assert "355 (2.02%)" in text and "off:\n  st: 355 conflicts" in text
    assert "roofline (H100): 2.147 GFLOP at 989.4 TFLOP/s = 2.17 us" in text
    json.dumps(m)


def test_the_launcher_draws_inputs_of_the_launch_shapes_without_a_companion() -> None:
    import numpy as np

    from tkir import api
    from tkir.tools.measure_launch import generic_inputs
    from tkir.tools.measure_launch import main as launcher_main

    launch = api.compile(str(ROOT / "examples" / "transpose.tk")).launch
    arrays, scalars = generic_inputs(launch, {"M": 64, "N": 32}, np.random.default_rng(0))
    assert [(a.shape, str(a.dtype)) for a in arrays] == [((64, 32), "bfloat16"), ((32, 64), "bfloat16")]
    assert scalars == [] and float(np.abs(arrays[0].astype(np.float32)).sum()) > 0
    assert launcher_main([]) == 2


# --- the DRAM predictor ------------------------------------------------------------------------------


def test_the_dram_prediction_counts_each_tensor_once_per_direction() -> None:
    from tkir.api import build_module
    from tkir.tools.traffic import predict_dram

    softmax = predict_dram(build_module(str(ROOT / "tests" / "data" / "rows" / "softmax.tk")), {"N": 16384})
    assert [(t.name, t.read, t.written) for t in softmax.tensors] == [("X", True, False), ("Y", False, True)]
    assert softmax.read_bytes == softmax.write_bytes == 16384 * 1024 * 2 and softmax.memory_bound
    gemm = predict_dram(build_module(str(ROOT / "examples" / "gemm.tk"), GEMM_CONSTS),
                        {"M": 256, "N": 512, "K": 128})
    assert (gemm.read_bytes, gemm.write_bytes) == ((256 + 512) * 128 * 2, 256 * 512 * 2)
    assert not gemm.memory_bound


# --- the command line --------------------------------------------------------------------------------

FAKE_NCU = '''
import os, sys
argv = sys.argv[1:]
open(os.environ["FAKE_NCU_ARGS"], "a").write(" ".join(argv) + "\\n")
if "--version" in argv:
    print("NVIDIA (R) Nsight Compute Command Line Profiler\\nVersion 2099.1.0.0 (build 1) (public-release)")
    sys.exit(0)
if "-i" in argv:  # reading the report file back: the raw page is the fixture, the source page FAKE_NCU_SOURCE
    page = argv[argv.index("--page") + 1]
    name = os.environ["FAKE_NCU_CSV"] if page == "raw" else os.environ.get("FAKE_NCU_SOURCE", "")
    if not name:
        print("==ERROR== no such page", file=sys.stderr)
        sys.exit(1)
    sys.stdout.write(open(name).read())
    sys.exit(0)
mode = os.environ.get("FAKE_NCU_MODE", "ok")
metrics = argv[argv.index("--metrics") + 1]
if mode == "perm":
    print("==PROF== Connected to process 1")
    print("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance "
          "Counters on the target device 0.", file=sys.stderr)
    sys.exit(1)
if mode == "unknown" and "smsp__inst_executed_op_stsm.sum" in metrics:
    print("==ERROR== Failed to find metric smsp__inst_executed_op_stsm.sum", file=sys.stderr)
    sys.exit(1)
if mode == "none":
    print("==PROF== Disconnected from process 1\\n==WARNING== No kernels were profiled.")
    sys.exit(0)
if "-o" in argv:  # the launch written to a report file: nothing on stdout
    open(argv[argv.index("-o") + 1], "w").write("report")
    sys.exit(0)
sys.stdout.write(open(os.environ["FAKE_NCU_CSV"]).read())
'''


@pytest.fixture
def fake_ncu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """TKIR_NCU names a stand-in that records its arguments and prints a fixture; the GPU check passes."""
    script = tmp_path / "fake_ncu.py"
    script.write_text(FAKE_NCU)
    args = tmp_path / "args.txt"
    monkeypatch.setenv("TKIR_NCU", f"{sys.executable} {script}")
    monkeypatch.setenv("FAKE_NCU_ARGS", str(args))
    monkeypatch.setenv("FAKE_NCU_CSV", str(FIXTURES / "details_gemm_sm90a.csv"))
    monkeypatch.setattr(measure_mod, "gpu_problem", lambda: None)
    return args


# the fixture's ncu numbers are of the 128 x 256 tile: gemm.tk's auto consts pinned to it (at 1024^3 the cost
# model would choose another tile)
GEMM_ARGS = ["report", str(ROOT / "examples" / "gemm.tk"), "--measure", "--size", "M=1024", "--size", "N=1024",
             "--size", "K=1024", *[a for k, v in GEMM_CONSTS.items() for a in ("-D", f"{k}={v}")]]


def test_measure_runs_the_launcher_under_ncu_and_adds_the_measured_section(
        fake_ncu: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*GEMM_ARGS, "--json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    m = rep["measured"]
    assert m["kernel"] == "gemm" and m["sizes"] == {"M": 1024, "N": 1024, "K": 1024}
    assert m["ncu"] == "Version 2099.1.0.0 (build 1) (public-release)"
    assert [o.split(":")[0] for o in m["off"]] == ["st", "registers"]
    assert m["dram"]["predicted_read"] == 2 * 1024 * 1024 * 2 and m["roofline"]["flops"] == 2 * 1024**3
    profiled = fake_ncu.read_text().splitlines()[0]
    assert "--kernel-name regex:^gemm$" in profiled and "--launch-count 1" in profiled
    assert "-m tkir.tools.measure_launch" in profiled and "--csv" in profiled
    assert "--metrics " + ",".join(METRIC_NAMES) in profiled
    assert m["command"].startswith(sys.executable)


def test_measure_prints_the_section_after_the_report(fake_ncu: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(GEMM_ARGS) == 0
    out = capsys.readouterr().out
    pinned = " ".join(f"{k}={v}" for k, v in GEMM_CONSTS.items())
    assert out.index("shared accesses:") < out.index(f"measured: gemm [M=1024 N=1024 K=1024 {pinned}]")
    assert "registers: predicted 232, ptxas 168" in out and "off:\n  st: 355 conflicts" in out


def test_the_source_page_counts_ld_and_st_by_the_instructions_own_wavefronts(
        fake_ncu: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """With a source page (recorded on an H100: linear_dgrad's 32 epilogue STS, 65,536 executed, each at its ideal
    one wavefront), the st class is counted from it: no conflicts, the verdict ok, and the L1 unit's 355 (the
    raw page's, waits behind other traffic included) shown beside it. The launch went to a report file with the
    SourceCounters section, read back page by page."""
    monkeypatch.setenv("FAKE_NCU_SOURCE", str(FIXTURES / "source_linear_dgrad_sm90a.csv"))
    assert main([*GEMM_ARGS, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["measured"]
    st = next(c for c in m["shared"] if c["class"] == "st")
    assert (st["counted_by"], st["instructions"], st["wavefronts"], st["conflicts"]) == ("source page", 65536, 65536, 0)
    assert st["verdict"] == "ok" and st["unit_conflicts"] == 355
    assert [o.split(":")[0] for o in m["off"]] == ["registers"]
    calls = fake_ncu.read_text().splitlines()
    assert "--section SourceCounters" in calls[0] and " -o " in calls[0]
    assert any("--page source --print-source sass" in c for c in calls[1:])


def test_a_report_ncu_will_not_print_is_profiled_again_without_it(
        fake_ncu: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An ncu whose import of the report prints no raw page: the launch is profiled again the old way (live CSV,
    no report file) and counted by the L1 unit, as before there was a source page."""
    empty = tmp_path / "empty.csv"
    empty.write_text("==ERROR== cannot print\n")
    script = (tmp_path / "fake_ncu.py")
    script.write_text(FAKE_NCU.replace('os.environ["FAKE_NCU_CSV"] if page == "raw"', f'"{empty}" if page == "raw"'))
    monkeypatch.setenv("TKIR_NCU", f"{sys.executable} {script}")
    assert main([*GEMM_ARGS, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["measured"]
    st = next(c for c in m["shared"] if c["class"] == "st")
    assert st["counted_by"] == "l1tex unit" and st["conflicts"] == 355
    profiled = [c for c in fake_ncu.read_text().splitlines() if "--metrics" in c]
    assert len(profiled) == 2 and " -o " in profiled[0] and " -o " not in profiled[1]


def test_source_page_rows_are_classed_by_opcode() -> None:
    """parse_source_csv keeps the shared-memory instructions (predicates and modifiers stripped) and sums them."""
    head = ('"Address","Source","Instructions Executed","L1 Wavefronts Shared","L1 Wavefronts Shared Ideal"\n')
    text = ("==PROF== Connected\n" + head + '"0x10","@!P0 LDSM.16.M88.4 R4, [R2]","1,024","8192","4096"\n'
            '"0x20","IMAD R1, R2, R3, R4","1024","0","0"\n"0x30","STS.128 [R5], R8","512","2048","2048"\n'
            '"0x40","LDS R9, [R5]","0","0","0"\n"0x50","LDGSTS.E.BYPASS.128 [R1], [R2.64]","256","1024","1024"\n')
    rows = parse_source_csv(text) or []
    assert [(r.klass, r.executed) for r in rows] == [("ld", 1024), ("st", 512), ("ldgsts", 256)]
    assert source_shared(rows)["ld"] == {"instructions": 1024, "wavefronts": 8192, "ideal": 4096}
    assert parse_source_csv("no page here") is None and parse_source_csv(head) == []


def test_a_metric_ncu_does_not_know_is_dropped_and_named(
        fake_ncu: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "unknown")
    assert main([*GEMM_ARGS, "--json"]) == 0
    m = json.loads(capsys.readouterr().out)["measured"]
    assert m["unavailable"] == ["smsp__inst_executed_op_stsm.sum"]
    assert "smsp__inst_executed_op_stsm.sum" not in m["command"]


def test_ncu_failing_quotes_the_command_and_its_output_with_the_permission_hint(
        fake_ncu: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "perm")
    assert main(GEMM_ARGS) == 1
    err = capsys.readouterr().err
    assert err.startswith("tkc report: error: ncu exited with status 1\n  command: ")
    assert "fake_ncu.py --csv" in err and "-m tkir.tools.measure_launch" in err
    assert "ERR_NVGPUCTRPERM - The user does not have permission" in err
    assert "hint: the driver restricts GPU performance counters to administrators" in err


def test_ncu_profiling_nothing_is_an_error(fake_ncu: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("FAKE_NCU_MODE", "none")
    assert main(GEMM_ARGS) == 1
    err = capsys.readouterr().err
    assert "profiled no launch of 'gemm'" in err and "No kernels were profiled" in err


def test_without_ncu_the_error_says_how_to_name_it(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("TKIR_NCU", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu_mod, "CUDA_BIN_NCU", tmp_path / "cuda" / "bin" / "ncu")
    assert main(GEMM_ARGS) == 1
    err = capsys.readouterr().err
    assert "ncu is not on PATH" in err and "TKIR_NCU=/path/to/ncu" in err
    monkeypatch.setenv("TKIR_NCU", str(tmp_path / "nowhere" / "ncu"))
    assert main(GEMM_ARGS) == 1
    assert "TKIR_NCU=" in capsys.readouterr().err


def test_without_a_gpu_the_error_says_so(monkeypatch: pytest.MonkeyPatch, fake_ncu: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(measure_mod, "gpu_problem", lambda: "no CUDA device found")
    assert main(GEMM_ARGS) == 1
    assert "there is none here: no CUDA device found" in capsys.readouterr().err


def test_measure_needs_sizes_without_a_companion(fake_ncu: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "lonely.tk"
    src.write_text((ROOT / "examples" / "softmax.tk").read_text())
    assert main(["report", str(src), "--measure"]) == 1
    assert "--measure needs the problem sizes: give --size NAME=VALUE for each (the kernel's sizes: N)" in \
        capsys.readouterr().err
    assert main(["report", str(src), "--measure", "--size", "N=4", "--size", "Q=4"]) == 1
    assert "--size Q: not a size of this kernel" in capsys.readouterr().err


def test_the_docs_show_the_metric_table() -> None:
    assert metric_table() in (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
