"""`tkc report --measure` on the GPU: every prediction of the report holds on Nsight Compute's counts.

For every example on both targets (sm_90a, and sm_80 through the driver's JIT) at a moderate size, and a
sample of conformance cases with shared-memory traffic, `tkc report FILE --measure --json` runs the kernel
once under ncu (tkir/tools/measure.py) and each check fails when its verdict is "off":

* conflicts: per instruction class (shared ld, shared st, cp.async), the measured conflicts equal the
  predicted ones within 1% of the class's wavefronts and the wavefronts per instruction match the
  accesses' degrees (a class the report predicts but ncu did not count fails too);
* registers: plan-occupancy's prediction within 10% of ptxas's count;
* occupancy: the planned blocks per SM fit what the launch's registers and shared memory allow;
* dram: the predicted bytes within 10% of dram__bytes_read + dram__bytes_write (memory-bound examples,
  at sizes that move about a GB, so the few tens of MB of output the L2 may still hold at the end, never
  written back during the launch, stay under the tolerance).

Mismatches measured before this test existed are strict xfails (KNOWN_OFF): fixing one fails the run
until its mark goes. Without ncu the tests skip, naming TKIR_NCU; with TKIR_REQUIRE_GPU=1 they fail
instead (tests/conftest.py). They carry the `ncu` marker too: ncu profiles one process at a time, so a run under
xdist waits for tkir/tools/ncu.py's machine-wide lock (hence the long per-test limit), and the whole tier takes
tens of minutes. The quick GPU suite is `pytest -m "gpu and not ncu" -n 16 tests`; this tier is
`pytest -m ncu -n 0 tests/gpu/test_report_measure_gpu.py`. With TKIR_MEASURE_DIR=DIR each case's JSON is
written to DIR and a summary table to DIR/summary.md.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conformance.cases import all_cases, global_params, kernel_source

ROOT = Path(__file__).resolve().parents[2]
MEASURE_TIMEOUT_S = 900  # one `tkc report --measure`: compile, inputs of about a GB, ncu's replay passes
STDERR_TAIL = 60         # lines of a failing command's stderr quoted (it holds ncu's command and output)
ISSUE = "issue 46"

# a case may wait for the other xdist workers' ncu runs (one profiler at a time), then takes up to MEASURE_TIMEOUT_S
NCU_TIER_TIMEOUT_S = 4 * 3600
pytestmark = [pytest.mark.gpu, pytest.mark.ncu, pytest.mark.timeout(NCU_TIER_TIMEOUT_S, method="thread")]

# (example, sizes): moderate sizes, default consts. Memory-bound examples move 0.5-1 GB (the H100's L2 holds 50 MB).
EXAMPLES = [
    ("attention_bwd_dkdv", {"B": 2, "H": 16, "N": 2048}),
    ("attention_bwd_dq", {"B": 2, "H": 16, "N": 2048}),
    ("attention_bwd_prep", {"B": 16, "H": 16, "N": 8192}),
    ("attention_fwd", {"B": 4, "H": 16, "N": 1024}),   # D = 128 by default
    ("based", {"B": 4, "H": 16, "N": 1024}),
    ("col_sum", {"G": 8192, "C": 16384}),
    ("gemm", {"M": 2048, "N": 2048, "K": 2048}),
    ("layernorm", {"N": 262144}),
    ("layernorm_bwd", {"N": 131072}),
    ("linear", {"M": 2048, "N": 2048, "K": 2048}),
    ("linear_dgrad", {"M": 2048, "N": 2048, "K": 2048}),
    ("linear_wgrad", {"M": 2048, "N": 2048, "K": 2048}),
    ("rmsnorm", {"N": 262144}),
    ("rmsnorm_bwd", {"N": 131072}),
    ("rotary", {"T": 1048576}),
    ("softmax", {"N": 262144}),
    ("softmax_bwd", {"N": 131072}),
    ("transpose", {"M": 16384, "N": 16384}),
]
TARGETS = ("sm_90a", "sm_80")
# the examples without tk.mma: traffic.py's bytes are their whole traffic (checked against the report)
MEMORY_BOUND = {"attention_bwd_prep", "col_sum", "layernorm", "layernorm_bwd", "rmsnorm", "rmsnorm_bwd", "rotary",
                "softmax", "softmax_bwd", "transpose"}
# conformance cases with shared-memory traffic, one per access pattern the report predicts (1-, 2- and 8-way
# ld/st.shared of each width, ldmatrix and stmatrix, the staged epilogue), at the cases' own sizes
CONFORMANCE = [
    "r2s-top-bf16-sm_90a",                          # st.shared.v4 1-way
    "s2r-top-bf16-sm_80",                           # ld.shared.v4 1-way
    "swz32_w64B_tma_s2r-top-bf16-sm_90a",           # ld.shared.v4 2-way
    "swz32_w64B_r2s_tma-top-bf16-sm_90a",           # st.shared.v4 2-way
    "transpose_s2r-top-bf16-sm_90a",                # ld.shared.b16 8-way
    "transpose_s2r-top-f32-sm_80",                  # ld.shared.b32 8-way
    "sv_copy-top-bf16-sm_90a",                      # ld.shared.b32 1-way (a vector)
    "mma_ss_tA-top-bf16-sm_80",                     # ldmatrix.x4.trans 1-way
    "swznone_mma_ss_k32B_n32B-top-bf16-sm_80",      # ldmatrix 2-way
    "swznone_mma_ss_k128B_n128B-top-bf16-sm_80",    # ldmatrix 8-way
    "g2r_tile-after_pipelined_loop-bf16-sm_90a",    # the staged epilogue's st.shared.b32 after a wgmma loop
    "r2s-after_pipelined_loop-bf16-sm_80",          # ldmatrix loads and st.shared.v4 stores in one kernel
]
CHECKS = ("conflicts", "registers", "occupancy", "dram")

# Registers: plan-occupancy's prediction against ptxas (`tkc report --json`'s registers.within_10pct, the same
# number with or without a GPU), at the commit this test was written: the prediction is a budget, not an
# estimate (the issue's part 3 replaces it).
_REGISTERS_OFF = [
    "attention_bwd_dkdv-sm_80", "attention_bwd_dq-sm_80", "attention_bwd_prep-sm_90a", "attention_bwd_prep-sm_80",
    "attention_fwd-sm_80", "col_sum-sm_90a", "col_sum-sm_80", "gemm-sm_90a", "gemm-sm_80", "layernorm-sm_90a",
    "layernorm-sm_80", "layernorm_bwd-sm_90a", "layernorm_bwd-sm_80", "linear-sm_90a", "linear-sm_80",
    "linear_dgrad-sm_90a", "linear_dgrad-sm_80", "linear_wgrad-sm_90a", "linear_wgrad-sm_80", "rmsnorm-sm_90a",
    "rmsnorm-sm_80", "rmsnorm_bwd-sm_90a", "rmsnorm_bwd-sm_80", "rotary-sm_80",
    "softmax_bwd-sm_90a", "softmax_bwd-sm_80",
    "r2s-top-bf16-sm_90a", "s2r-top-bf16-sm_80", "swz32_w64B_tma_s2r-top-bf16-sm_90a",
    "swz32_w64B_r2s_tma-top-bf16-sm_90a", "transpose_s2r-top-bf16-sm_90a", "transpose_s2r-top-f32-sm_80",
    "sv_copy-top-bf16-sm_90a", "swznone_mma_ss_k32B_n32B-top-bf16-sm_80", "r2s-after_pipelined_loop-bf16-sm_80",
]
# Conflicts, as judged with ncu's source page width by width (tkir/tools/measure.py width_groups: each SASS width's
# degree against the degrees the report lists for that width), measured on an H100 (ncu 2025.3.1, 2026-12-07;
# docs/experiments.md, "Bank conflicts width by width"). That run passed every example but Based, the row
# exchanges listed (rmsnorm_bwd and layernorm_bwd once the exchange's reads were v4, as ptxas had made most of them),
# the GEMM epilogues, the sm_80 attention kernels and linear_wgrad (whose mixed classes the per-class counts had
# called off). Based's two off widths were its states' transpose after the loop (tk.transpose through the scratch
# tile, listed since): measured again with the listing (H100, 2026-12-07), every shared ld/st width is as listed
# (STS.64 2.000 / 2, LDS.32 1.109 / 1..16, LDS.128 1.2-1.33 / 1..2); what is left is its cp.async class, which the
# report lists and for which ncu gives no count (LDGSTS wavefronts), and a listed class without a count is off.
_BASED = f"{ISSUE}: every ld/st width as listed; the listed cp.async class has no count from ncu (H100)"
_NOT_REMEASURED = f"{ISSUE}: not measured with the width-by-width verdict"
_CONFLICTS_OFF = {"based-sm_80": _BASED, "based-sm_90a": _BASED}
# measured off on one GPU and within the tolerance on another: not strict
FLAKY_OFF: dict[tuple[str, str], str] = {
    ("gemm-sm_80", "conflicts"): f"{ISSUE}: ldmatrix predicted 1-way; 9,195 load conflicts in 558 K wavefronts "
                                 "(1.6%) measured on an H200, within 1% on an H100",
    ("attention_fwd-sm_90a", "conflicts"): f"{ISSUE}: every access predicted 1-way; 54 store conflicts in 3,126 "
                                           "wavefronts measured on an H200, none on an H100",
    # strict xfails before the width-by-width verdict, not in that run's sample (ncu's results of these cases
    # did not come back): 2.5 ld wavefronts an instruction against 4; 26.4 ldmatrix wavefronts against 32; a
    # vector's ld.shared.b32 at 2 against 1 (per class, H100, 2026-12-06)
    **{(case, "conflicts"): _NOT_REMEASURED for case in (
        "r2s-after_pipelined_loop-bf16-sm_80", "swznone_mma_ss_k128B_n128B-top-bf16-sm_80", "sv_copy-top-bf16-sm_90a")},
}
KNOWN_OFF: dict[tuple[str, str], str] = {
    **{(case, "conflicts"): why for case, why in _CONFLICTS_OFF.items()},
    ("attention_bwd_dq-sm_80", "occupancy"): f"{ISSUE}: 3 blocks per SM planned, the launch's 255 registers allow 2 "
                                             "(measured on an H100)",
    **{(case, "registers"): f"{ISSUE}: plan-occupancy's register budget is off ptxas's count by more than 10%"
       for case in _REGISTERS_OFF},
}


def _example_cases() -> list[tuple[str, str, dict, str]]:
    """(id, file, sizes, target) of every example on both targets."""
    return [(f"{name}-{target}", str(ROOT / "examples" / f"{name}.tk"), sizes, target)
            for name, sizes in EXAMPLES for target in TARGETS]


def _conformance_cases() -> list[tuple[str, str, dict, str]]:
    """(id, "conformance:ID", sizes, target): the case's sizes that its kernel's tensors name."""
    by_id = {c.id: c for c in all_cases()}
    out = []
    for cid in CONFORMANCE:
        case = by_id[cid]
        names = {d for _, _, dims in global_params(kernel_source(case)) for d in dims if d.isidentifier()}
        out.append((cid, f"conformance:{cid}", {n: v for n, v in case.sizes.items() if n in names}, case.target))
    return out


CASES = _example_cases() + _conformance_cases()
PARAMS = [pytest.param(case, check, id=f"{case[0]}-{check}",
                       marks=[pytest.mark.xfail(strict=True, reason=KNOWN_OFF[(case[0], check)])]
                       if (case[0], check) in KNOWN_OFF else
                       [pytest.mark.xfail(strict=False, reason=FLAKY_OFF[(case[0], check)])]
                       if (case[0], check) in FLAKY_OFF else [])
          for case in CASES for check in CHECKS
          if check != "dram" or case[0].rsplit("-", 1)[0] in MEMORY_BOUND]
_MEASURED: dict[str, dict | str] = {}  # case id -> the measured JSON, or why the measurement failed


@pytest.fixture(scope="module")
def ncu_present() -> None:
    """Skip (naming TKIR_NCU) where Nsight Compute is absent; under TKIR_REQUIRE_GPU=1 that is a failure."""
    from tkir.tools.ncu import MeasureError, find_ncu

    try:
        find_ncu()
    except MeasureError as e:
        if os.environ.get("TKIR_REQUIRE_GPU", "").strip() not in ("", "0"):
            pytest.fail(f"TKIR_REQUIRE_GPU is set and Nsight Compute is missing: {e}", pytrace=False)
        pytest.skip(f"needs Nsight Compute: {e}")


@pytest.fixture(scope="module")
def sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder for the conformance cases' .tk files."""
    return tmp_path_factory.mktemp("measure-cases")


@pytest.fixture(scope="module", autouse=True)
def summary() -> object:
    """After the module: one line per measured case (printed, and written to $TKIR_MEASURE_DIR/summary.md)."""
    yield
    if not _MEASURED:
        return
    lines = ["| case | shared classes (measured / predicted wavefronts per instruction, conflicts) | registers "
             "(predicted / ptxas / launch) | occupancy (planned / holds / achieved %) | DRAM (predicted / measured MB) "
             "| duration us | off |", "|---|---|---|---|---|---|---|"]
    for cid, m in _MEASURED.items():
        lines.append(f"| {cid} | " + (" | ".join(_summary_cells(m)) if isinstance(m, dict) else
                                       f"not measured: {m.splitlines()[0]} | | | | |") + " |")
    text = "\n".join(lines)
    print("\n" + text)
    out = os.environ.get("TKIR_MEASURE_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "summary.md").write_text(text + "\n")


@pytest.mark.parametrize("case, check", PARAMS)
def test_report_prediction_holds_on_ncu(case: tuple[str, str, dict, str], check: str, ncu_present: None,
                                        sources: Path) -> None:
    measured = _measure(case, sources)
    off = _off(measured, check, case[0])
    assert not off, (f"{case[0]}: {check} off:\n  " + "\n  ".join(off) + "\n\neverything measured for this case:\n"
                     + _table(measured) + f"\nreproduce: {measured['_command']}")


# --- helpers -------------------------------------------------------------------------------------


def _measure(case: tuple[str, str, dict, str], sources: Path) -> dict:
    """`tkc report --measure --json` for the case, once per case (every check of it reads the same run)."""
    cid, file, sizes, target = case
    if cid not in _MEASURED:
        _MEASURED[cid] = _run(cid, file, sizes, target, sources)
    m = _MEASURED[cid]
    if isinstance(m, str):
        pytest.fail(m, pytrace=False)
    return m


def _run(cid: str, file: str, sizes: dict, target: str, sources: Path) -> dict | str:
    if file.startswith("conformance:"):
        case = next(c for c in all_cases() if c.id == cid)
        path = sources / f"{cid}.tk"
        path.write_text(kernel_source(case))
        file = str(path)
    cmd = [sys.executable, "-m", "tkir.cli", "report", file, "--measure", "--json", "--target", target]
    for name, value in sizes.items():
        cmd += ["--size", f"{name}={value}"]
    shown = shlex.join(["tkc", *cmd[3:]])
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=MEASURE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{cid}: `{shown}` did not finish in {MEASURE_TIMEOUT_S} s"
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.rstrip().splitlines()[-STDERR_TAIL:])
        return f"{cid}: `{shown}` exited with status {proc.returncode}; its stderr ends:\n{tail}"
    measured = json.loads(proc.stdout)["measured"]
    measured["_command"] = shown
    out = os.environ.get("TKIR_MEASURE_DIR")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{cid}.json").write_text(json.dumps(measured, indent=1) + "\n")
    return measured


def _off(m: dict, check: str, cid: str) -> list[str]:
    """What is off for one check; a prediction that got no verdict where it should have is off too."""
    if check == "conflicts":
        out = [f"{c['name']}: {c['why']}" for c in m["shared"] if c["verdict"] == "off"]
        out += [f"{c['name']}: predicted accesses ({', '.join(a['op'] for a in c['accesses'])}) but {c['why']}"
                for c in m["shared"] if c["verdict"] == "-" and c["accesses"]]
        return out
    part = m[check]
    if check == "dram" and part.get("memory_bound") is not True:
        return [f"{cid} is listed in MEMORY_BOUND but its kernel has a tk.mma (memory_bound = "
                f"{part.get('memory_bound')}): update the list"]
    if part["verdict"] == "off":
        return [part["why"]]
    if part["verdict"] != "ok" and check in ("dram", "occupancy"):
        return [f"no verdict: {part['why']}"]
    return []


def _table(m: dict) -> str:
    rows = [f"  {c['name']}: {_accesses(c)}; instructions {c['instructions']}, wavefronts {c['wavefronts']}, "
            f"conflicts {c['conflicts']}, measured {c['measured_per_instruction']} per instruction, predicted "
            f"{c['predicted_per_instruction']} -> {c['verdict']} {c['why']}" for c in m["shared"]]
    for key in ("registers", "occupancy", "dram"):
        part = m[key]
        rows.append(f"  {key}: {part['verdict']} {part['why']}  "
                    + json.dumps({k: v for k, v in part.items() if k not in ("verdict", "why")}))
    rows.append(f"  device {m.get('device')}, ncu {m.get('ncu')}, unavailable metrics {m.get('unavailable')}")
    return "\n".join(rows)


def _accesses(c: dict) -> str:
    return ", ".join(f"{a['op']} {a['tile']} {a['degree']}-way" for a in c["accesses"]) or "unreported"


def _summary_cells(m: dict) -> list[str]:
    shared = "; ".join(f"{c['class']} {_g(c['measured_per_instruction'])}/{c['predicted_per_instruction']} "
                       f"{_g(c['conflicts'])}" for c in m["shared"]) or "-"
    r, o, d = m["registers"], m["occupancy"], m["dram"]
    regs = f"{r['predicted']} / {r['ptxas']} / {_g(r['launch'])}"
    occ = f"{o['planned_blocks_per_sm']} / {_g(o.get('holds_blocks_per_sm'))} / {_g(o['achieved_pct'])}"
    pred = None if d["predicted_read"] is None else (d["predicted_read"] + d["predicted_write"]) / 1e6
    meas = None if d["measured_read"] is None else (d["measured_read"] + (d["measured_write"] or 0)) / 1e6
    dur = m.get("duration_ns")
    return [shared, regs, occ, f"{_g(pred)} / {_g(meas)}", _g(dur / 1e3 if dur else None), "; ".join(m["off"])]


def _g(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4g}"
