"""`tkc report --measure`: the report's predictions beside Nsight Compute's counts for one launch.

    rep = build_report(k.module)                     # tkir/tools/report.py, plus the CLI's ptxas keys
    rep["measured"] = measure(k, rep, "examples/gemm.tk", {"M": 4096, "N": 4096, "K": 4096}, {})
    print(format_measured(rep["measured"]))

`measure` writes the compiled kernel (PTX and launch description) to a temporary folder, runs
tkir/tools/measure_launch.py on it under ncu (tkir/tools/ncu.py: one launch, the METRICS table) and hands
the counts to `compare`, a pure function of the report, the counts and the predictions, which gives:

* `shared`: per instruction class (ld: ld.shared and ldmatrix; st: st.shared and stmatrix; ldgsts:
  cp.async) the report's accesses of that class, the measured instructions, wavefronts, wavefronts per
  instruction and bank conflicts (ld and st from ncu's source page, summed over the class's SASS
  instructions: their own wavefronts and the excess over ideal; the L1 unit's counters, which also count
  waits behind TMA and wgmma traffic to the same banks, beside them as `unit_*`), the predicted wavefronts
  per instruction (each access's degree times
  the wavefronts a conflict-free instruction of its width takes: 1 for 4 bytes a lane or less, 2 for 8, 4
  for 16 and for ldmatrix/stmatrix .x4) and a verdict. TMA and wgmma operand reads are hardware paths with
  no LSU instruction and are not counted. A class is `ok` when its conflicts are the predicted ones to
  within CONFLICT_TOLERANCE of its wavefronts (none where every access is 1-way) and its wavefronts per
  instruction lie within the predicted ones (to the same tolerance); shared traffic the report does not
  list (`unreported`) is held to no conflicts;
* `registers`: plan-occupancy's prediction, ptxas's count, the SASS live peak and the launch's
  registers (launch__registers_per_thread; the driver's own compile for an sm_80 kernel on a Hopper GPU),
  `ok` when ptxas is within REGISTER_TOLERANCE of the prediction (tkir/tools/report.py);
* `shared_memory`: planned bytes beside the launch's static and dynamic shared memory;
* `occupancy`: the planned blocks per SM against the most the launch's registers, shared memory, warp
  and block slots allow (launch__occupancy_limit_*; `ok` when the plan fits), the planned, theoretical and
  achieved occupancy;
* `dram`: tkir/tools/traffic.py's bytes against dram__bytes_read + dram__bytes_write, `ok` within
  DRAM_TOLERANCE for memory-bound kernels (for the others the prediction is a floor: no verdict);
* `tensor_pipe_pct`, `duration_ns` and `roofline`: max(FLOPs / peak tensor rate, bytes / copy bandwidth)
  against the measured duration (PEAKS: the device's, by its name).
`off` lists what is off, one line each.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from tkir.target import MAX_WARPS_PER_SM, PEAK_TENSOR_FLOPS, WARP
from tkir.tools.ncu import METRICS, MeasureError, NcuRun, find_ncu, run_ncu, source_shared
from tkir.tools.report import REGISTER_TOLERANCE
from tkir.tools.traffic import predict_dram

CONFLICT_TOLERANCE = 0.01  # measured conflicts within 1% of the class's wavefronts of the predicted ones
DRAM_TOLERANCE = 0.10      # measured DRAM bytes within 10% of the prediction (memory-bound kernels)
WAVEFRONT_BYTES = 128      # one shared-memory wavefront serves 32 banks x 4 bytes
WIDTH_BYTES = {"b8": 1, "b16": 2, "b32": 4, "f32": 4, "b64": 8, "v2": 8, "v4": 16, "b128": 16}  # ld/st.shared suffixes
SOURCE_COUNTED = ("ld", "st")  # counted per SASS instruction from ncu's source page where it has one
CP_ASYNC_BYTES = 16        # a cp.async chunk per lane (tkir/layout.py tma_pattern: 16-byte chunks)
HARDWARE_PATHS = ("tma", "wgmma.desc")  # no LSU instruction: the tensor core and TMA read shared memory


@dataclass(frozen=True)
class Peaks:
    device: str
    tensor_flops: float        # dense bf16/f16 FLOP/s
    copy_bytes_per_s: float    # device-to-device copy, bytes read + written per second
    source: str


# Per GPU, by a word of its name. The tensor peak is the datasheets' dense bf16 rate (H100 SXM and H200
# SXM: the same GH100 SMs and clocks; tkir/tools/tune_model.py). Copy: what `tkc bench` measured there.
PEAKS = {
    "H200": Peaks("H200", PEAK_TENSOR_FLOPS, 4250e9, "copy 4226-4259 GB/s measured on the H200 (docs/experiments.md)"),
    "H100": Peaks("H100", PEAK_TENSOR_FLOPS, 3005e9, "copy 3005 GB/s measured on an H100 (docs/experiments.md)"),
}
DEFAULT_PEAKS = "H100"

# metric names compare reads (tkir/tools/ncu.py METRICS lists them all, with sources)
SHARED_COUNTERS = {  # class -> (instruction metrics, wavefront metric, conflict metric)
    "ld": (("smsp__sass_inst_executed_op_shared_ld.sum", "smsp__inst_executed_op_ldsm.sum"),
           "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum"),
    "st": (("smsp__sass_inst_executed_op_shared_st.sum", "smsp__inst_executed_op_stsm.sum"),
           "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
           "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum"),
    "ldgsts": (("smsp__inst_executed_op_ldgsts.sum",),
               "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ldgsts.sum", None),
}
CLASS_NAMES = {"ld": "shared ld (ld.shared, ldmatrix)", "st": "shared st (st.shared, stmatrix)",
               "ldgsts": "cp.async (LDGSTS)"}
OCCUPANCY_LIMITS = ("registers", "shared_mem", "warps", "blocks")  # launch__occupancy_limit_<name>
TENSOR_PIPES = ("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
                "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active")


def measure(k: object, report: dict, path: str, sizes: dict[str, int], consts: dict, *,
            seed: int | None = None) -> dict:
    """Run compiled kernel `k` (tkir.compile's result, `report` built from it) once under ncu at `sizes`
    and compare; MeasureError when there is no ncu, no GPU, or ncu fails."""
    ncu = find_ncu()
    problem = gpu_problem()
    if problem:
        raise MeasureError(f"--measure needs a CUDA GPU: {problem}")
    from tkir.tools.examples import load_companion

    companion_file = Path(path).with_suffix(".py")
    companion = load_companion(path) if companion_file.is_file() else None
    launch = k.launch  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="tkir-measure-") as tmp:
        folder = Path(tmp)
        (folder / "kernel.ptx").write_text(k.asm["ptx"])  # type: ignore[attr-defined]
        (folder / "launch.json").write_text(launch.to_text())
        (folder / "request.json").write_text(json.dumps({
            "sizes": sizes, "consts": consts, "seed": seed,
            "companion": str(companion_file.resolve()) if companion else None}))
        program = [sys.executable, "-m", "tkir.tools.measure_launch", str(folder)]
        run = run_ncu(ncu, launch.kernel, program, env=_child_env(), source_dir=folder)
        info_file = folder / "info.json"
        info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    flops = companion.flops(sizes, consts) if companion is not None else None
    dram = predict_dram(k.module, sizes).as_dict()  # type: ignore[attr-defined]
    measured = compare(report, _first_launch(run, launch.kernel), dram=dram, flops=flops,
                       device=str(info.get("device", "unknown")),
                       source=source_shared(run.source) if run.source is not None else None, source_rows=run.source)
    measured.update(ncu=ncu_version(ncu), command=shlex.join(run.command), unavailable=run.unavailable,
                    sizes=dict(sizes), consts=dict(consts), kernel=launch.kernel)
    if info:
        measured["launch"] = {key: info[key] for key in ("grid", "block", "sms") if key in info}
    return measured


def gpu_problem() -> str | None:
    """Why no CUDA GPU can run the kernel here, or None."""
    try:
        from tkir.backend import cuda as tkcuda

        tkcuda.device_count()
    except Exception as e:  # noqa: BLE001 -- no driver library, no device: one line for the user
        return str(e) or type(e).__name__
    return None


def ncu_version(ncu: list[str]) -> str:
    """`ncu --version`'s last line ("Version 2025.1.0.0 (build ...)"); '' if it will not say."""
    try:
        out = subprocess.run([*ncu, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""
    lines = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def compare(report: dict, metrics: dict[str, float | None], *, dram: dict | None, flops: float | None,
            device: str, source: dict[str, dict[str, float]] | None = None, source_rows: list | None = None) -> dict:
    """The measured section: every prediction of `report` (and `dram`, `flops`) beside `metrics` (ncu's
    counts of one launch, base units) and `source` (ncu.source_shared of the source page, when ncu printed
    one; `source_rows` its instructions), each with a verdict; `off` lists those that are off."""
    out: dict[str, object] = {"device": device, "metrics": dict(metrics)}
    out["shared"] = shared_classes(report.get("accesses", []), metrics, source, source_rows)
    out["registers"] = register_check(report.get("registers"), report.get("ptxas"), metrics)
    out["shared_memory"] = {"planned": (report.get("occupancy") or {}).get("smem_bytes"),
                            "static": metrics.get("launch__shared_mem_per_block_static"),
                            "dynamic": metrics.get("launch__shared_mem_per_block_dynamic")}
    out["occupancy"] = occupancy_check(report.get("occupancy"), metrics)
    out["dram"] = dram_check(dram, metrics)
    pipes = [metrics.get(m) for m in TENSOR_PIPES if metrics.get(m) is not None]
    out["tensor_pipe_pct"] = max(pipes) if pipes else None
    out["duration_ns"] = metrics.get("gpu__time_duration.sum")
    out["roofline"] = roofline(flops, dram["read_bytes"] + dram["write_bytes"] if dram else None,
                               out["duration_ns"], peaks_for(device))
    off = [f"{c['class']}: {c['why']}" for c in out["shared"] if c["verdict"] == "off"]  # type: ignore[union-attr]
    for key in ("registers", "occupancy", "dram"):
        part = out[key]
        if isinstance(part, dict) and part.get("verdict") == "off":
            off.append(f"{key}: {part['why']}")
    out["off"] = off
    return out


def access_class(op: str) -> tuple[str, int] | None:
    """(instruction class, wavefronts of a conflict-free instruction) of an access the report lists; None
    for the hardware paths (TMA, wgmma descriptor reads) and for ops this table does not know."""
    if op in HARDWARE_PATHS:
        return None
    if op.startswith("cp.async"):
        return "ldgsts", max(1, WARP * CP_ASYNC_BYTES // WAVEFRONT_BYTES)
    m = re.match(r"(ld|st)matrix\.x(\d)", op)
    if m:  # each 8x8 matrix (8 rows of 16 bytes) is one wavefront
        return m.group(1), int(m.group(2))
    m = re.match(r"(ld|st)\.shared\.(\w+)$", op)
    if m and m.group(2) in WIDTH_BYTES:
        return m.group(1), max(1, WARP * WIDTH_BYTES[m.group(2)] // WAVEFRONT_BYTES)
    return None


# SASS shared-memory opcodes by the bytes a lane moves (ncu's source page prints LDS/STS with these suffixes; no
# suffix is 32-bit) and the PTX access names the report lists, mapped to one key per instruction width
SASS_WIDTH_SUFFIX = {"128": 16, "64": 8, "U16": 2, "S16": 2, "U8": 1, "S8": 1}
MATRIX_COUNT = re.compile(r"\.(\d)$")  # LDSM.16.M88.4 / STSM.16.MT88.2: the matrices a lane group moves


def sass_key(sass: str) -> tuple[str, str] | None:
    """(class, width key) of a source-page instruction: "STS.128 [R2], R4" -> ("st", "STS.128"), "LDS R0, [R1]"
    -> ("ld", "LDS.32"), "@P0 LDSM.16.MT88.4 R4, [R5]" -> ("ld", "LDSM.x4"); None for other opcodes."""
    words = sass.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    if not words:
        return None
    parts = words[0].split(".")
    base = parts[0]
    if base in ("LDSM", "STSM"):
        m = MATRIX_COUNT.search(words[0])
        return ("ld" if base == "LDSM" else "st"), f"{base}.x{m.group(1) if m else 1}"
    if base in ("LDS", "STS"):
        width = next((SASS_WIDTH_SUFFIX[p] for p in parts[1:] if p in SASS_WIDTH_SUFFIX), 4)
        return ("ld" if base == "LDS" else "st"), f"{base}.{width * 8}"
    return None


def access_key(op: str) -> tuple[str, str] | None:
    """The (class, width key) of sass_key that a listed access's instructions have: ld.shared.v4 -> ("ld",
    "LDS.128"), stmatrix.x4 -> ("st", "STSM.x4"), ldmatrix.x4.trans -> ("ld", "LDSM.x4"); None for others."""
    m = re.match(r"(ld|st)matrix\.x(\d)", op)
    if m:
        return m.group(1), f"{'LDSM' if m.group(1) == 'ld' else 'STSM'}.x{m.group(2)}"
    m = re.match(r"(ld|st)\.shared\.(\w+)$", op)
    if m and m.group(2) in WIDTH_BYTES:
        return m.group(1), f"{'LDS' if m.group(1) == 'ld' else 'STS'}.{WIDTH_BYTES[m.group(2)] * 8}"
    return None


def _degrees(want: list[int]) -> str:
    """'2', '1..4', or '1 (unlisted)' for a width group's predicted degrees."""
    if not want:
        return "1 (unlisted)"
    return f"{want[0]}" if want[0] == want[-1] else f"{want[0]}..{want[-1]}"


def width_groups(accesses: list[dict], rows: list) -> list[dict]:
    """The source page's shared ld/st instructions (ncu.SourceRow) grouped by class and width (sass_key), each
    beside the degrees the report lists for accesses of that width: `measured_degree` = wavefronts / ideal
    wavefronts of the group's executed instructions; `predicted_degrees` the listed degrees. Verdict ok when one
    degree is predicted and the measured one is within CONFLICT_TOLERANCE of it, or several are and it lies
    between them, or none is (unlisted instructions) and it is 1 within the tolerance."""
    predicted: dict[tuple[str, str], set[int]] = {}
    for a in accesses:
        key = access_key(a["op"])
        if key is not None:
            predicted.setdefault(key, set()).add(int(a["degree"]))
    sums: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        key = sass_key(r.sass)
        if key is None or r.klass not in SOURCE_COUNTED:
            continue
        acc = sums.setdefault(key, [0.0, 0.0, 0.0])
        acc[0] += r.executed
        acc[1] += r.wavefronts
        acc[2] += r.ideal
    out = []
    for key in sorted(sums):
        executed, wavefronts, ideal = sums[key]
        if not ideal and not wavefronts:
            continue  # executed without shared traffic counted (predicated off, or no wavefront metric): no data
        degree = wavefronts / ideal if ideal else None
        want = sorted(predicted.get(key, ()))
        lo, hi = (want[0], want[-1]) if want else (1, 1)
        ok = degree is not None and lo * (1 - CONFLICT_TOLERANCE) <= degree <= hi * (1 + CONFLICT_TOLERANCE)
        out.append({"class": key[0], "width": key[1], "instructions": executed, "wavefronts": wavefronts,
                    "ideal": ideal, "measured_degree": degree, "predicted_degrees": want,
                    "verdict": "ok" if ok else "off"})
    return out


def shared_classes(accesses: list[dict], metrics: dict[str, float | None],
                   source: dict[str, dict[str, float]] | None = None, source_rows: list | None = None) -> list[dict]:
    """One entry per instruction class that the report lists an access of or the GPU executed. The ld and st
    classes take their counts from the source page where there is one (SOURCE_COUNTED: the instructions' own
    wavefronts; conflicts = wavefronts - ideal) and keep the L1 unit's as `unit_wavefronts` / `unit_conflicts`,
    which also count waits behind other traffic to the banks; cp.async keeps the unit's. With the source page's
    instructions (`source_rows`) each ld/st class also gets `by_width` (width_groups) and is judged by its widths,
    each against its own listed degree: a class that mixes widths of different degrees has no one predicted
    count of conflicts, and the class's instruction count includes instructions that move nothing (predicated
    off), which the per-instruction range would count as conflict-free ones."""
    groups = width_groups(accesses, source_rows) if source_rows is not None else None
    predicted: dict[str, list[dict]] = {c: [] for c in SHARED_COUNTERS}
    for a in accesses:
        cls = access_class(a["op"])
        if cls is not None:
            predicted[cls[0]].append({"op": a["op"], "tile": a["tile"], "degree": a["degree"],
                                      "wavefronts_per_instruction": a["degree"] * cls[1]})
    out = []
    for cls, (inst_metrics, wave_metric, conflict_metric) in SHARED_COUNTERS.items():
        counts = [metrics.get(m) for m in inst_metrics]
        instructions = sum(c for c in counts if c is not None) if any(c is not None for c in counts) else None
        wavefronts = metrics.get(wave_metric)
        conflicts = metrics.get(conflict_metric) if conflict_metric else None
        unit = {"unit_wavefronts": wavefronts, "unit_conflicts": conflicts}
        counted_by = "l1tex unit"
        if source is not None and cls in SOURCE_COUNTED:
            own = source.get(cls, {"instructions": 0.0, "wavefronts": 0.0, "ideal": 0.0})
            instructions, wavefronts = own["instructions"], own["wavefronts"]
            conflicts = own["wavefronts"] - own["ideal"]
            counted_by = "source page"
        if not predicted[cls] and not instructions:
            continue
        entry = {"class": cls, "name": CLASS_NAMES[cls], "accesses": predicted[cls], "instructions": instructions,
                 "wavefronts": wavefronts, "conflicts": conflicts, "counted_by": counted_by, **unit}
        entry.update(class_verdict(predicted[cls], instructions, wavefronts, conflicts))
        if groups is not None and cls in SOURCE_COUNTED:
            entry["by_width"] = [g for g in groups if g["class"] == cls]
            if entry["by_width"] and instructions:
                bad = [g for g in entry["by_width"] if g["verdict"] == "off"]
                entry["verdict"] = "off" if bad else "ok"
                entry["why"] = "; ".join(f"{g['width']}: degree {_num(g['measured_degree'], 3)} measured, "
                                         f"predicted {_degrees(g['predicted_degrees'])}"
                                         for g in bad) if bad else "each width at its listed degree"
        out.append(entry)
    return out


def class_verdict(predicted: list[dict], instructions: float | None, wavefronts: float | None,
                  conflicts: float | None) -> dict:
    """The verdict on one instruction class (module docstring): its measured wavefronts per instruction,
    the predicted range, the predicted conflicts (None when the accesses' widths or degrees differ), why."""
    wpis = [p["wavefronts_per_instruction"] for p in predicted]
    lo, hi = (min(wpis), max(wpis)) if wpis else (None, None)
    out: dict[str, object] = {"measured_per_instruction": None, "predicted_per_instruction": [lo, hi] if wpis else None,
                              "predicted_conflicts": None, "verdict": "-", "why": ""}
    if instructions is None or wavefronts is None:
        out["why"] = "not measured (ncu gave no count)"
        return out
    if instructions == 0:
        out["why"] = "not executed at these sizes" if predicted else ""
        return out
    wpi = wavefronts / instructions
    out["measured_per_instruction"] = wpi
    slack = CONFLICT_TOLERANCE * wavefronts
    if not predicted:
        out["predicted_conflicts"] = 0
        ok = conflicts is None or conflicts <= slack
        out["verdict"] = "ok" if ok else "off"
        out["why"] = (f"shared traffic the report does not list, {wpi:.3g} wavefronts per instruction"
                      + ("" if conflicts is None else f", {conflicts:.0f} conflicts ({_pct(conflicts, wavefronts)})"))
        return out
    one_way = all(p["degree"] == 1 for p in predicted)
    same = lo == hi
    if one_way:
        expected = 0.0
    elif len({(p["degree"], p["wavefronts_per_instruction"]) for p in predicted}) == 1:
        # one pattern: each instruction takes lo wavefronts where a conflict-free one takes lo / degree
        expected = instructions * (lo - lo // predicted[0]["degree"])
    else:
        expected = None
    out["predicted_conflicts"] = expected
    reasons = []
    if conflicts is not None and expected is not None and abs(conflicts - expected) > slack:
        reasons.append(f"{conflicts:.0f} conflicts in {wavefronts:.0f} wavefronts ({_pct(conflicts, wavefronts)}), "
                       f"predicted {expected:.0f}")
    if not lo * (1 - CONFLICT_TOLERANCE) <= wpi <= hi * (1 + CONFLICT_TOLERANCE):
        want = f"{lo}" if same else f"{lo}..{hi}"
        reasons.append(f"{wpi:.3g} wavefronts per instruction ({wavefronts:.0f} for {instructions:.0f}), "
                       f"predicted {want}")
    out["verdict"] = "off" if reasons else "ok"
    out["why"] = "; ".join(reasons)
    return out


def register_check(registers: dict | None, ptxas: dict | None, metrics: dict[str, float | None]) -> dict:
    """plan-occupancy's registers beside ptxas's, the SASS live peak and the launch's; `ok` when ptxas (or,
    without it, the launch) is within REGISTER_TOLERANCE of the prediction."""
    launch = metrics.get("launch__registers_per_thread")
    out: dict[str, object] = {"predicted": None, "ptxas": (ptxas or {}).get("registers"), "sass_live_peak": None,
                              "launch": launch, "spill_stores": (ptxas or {}).get("spill_stores"),
                              "spill_loads": (ptxas or {}).get("spill_loads"), "verdict": "-", "why": ""}
    if not registers:
        out["why"] = "no register prediction (no occupancy plan)"
        return out
    predicted = registers["predicted"]
    out.update(predicted=predicted, role=registers.get("role"), setmaxnreg=registers.get("setmaxnreg"),
               sass_live_peak=registers.get("sass_live_peak"))
    counted = out["ptxas"] if out["ptxas"] is not None else launch
    if counted is None:
        out["why"] = "neither ptxas nor the launch gave a count"
        return out
    diff = (counted - predicted) / predicted
    within = abs(diff) <= REGISTER_TOLERANCE
    out["verdict"] = "ok" if within else "off"
    source = "ptxas" if out["ptxas"] is not None else "the launch"
    out["why"] = f"predicted {predicted}, {source} {counted:.0f} ({diff:+.0%})"
    return out


def occupancy_check(plan: dict | None, metrics: dict[str, float | None]) -> dict:
    """The planned blocks per SM against what the launch's resources allow (launch__occupancy_limit_*)."""
    limits = {name: metrics.get(f"launch__occupancy_limit_{name}") for name in OCCUPANCY_LIMITS}
    threads = metrics.get("launch__block_size")
    out: dict[str, object] = {"planned_blocks_per_sm": None, "limits": limits,
                              "theoretical_pct": metrics.get("sm__maximum_warps_per_active_cycle_pct"),
                              "achieved_pct": metrics.get("sm__warps_active.avg.pct_of_peak_sustained_active"),
                              "planned_pct": None, "verdict": "-", "why": ""}
    if not plan or plan.get("blocks_per_sm") is None:
        out["why"] = "no occupancy plan"
        return out
    planned = int(plan["blocks_per_sm"])
    out["planned_blocks_per_sm"] = planned
    if threads:
        out["planned_pct"] = 100.0 * min(MAX_WARPS_PER_SM, planned * threads / WARP) / MAX_WARPS_PER_SM
    known = {n: v for n, v in limits.items() if v is not None}
    if not known:
        out["why"] = "ncu gave no occupancy limit"
        return out
    holds = min(known.values())
    out["holds_blocks_per_sm"] = holds
    binding = min(known, key=lambda n: known[n])
    out["verdict"] = "ok" if holds >= planned else "off"
    out["why"] = (f"planned {planned} blocks per SM, the launch's {binding.replace('_', ' ')} allow "
                  f"{holds:.0f}")
    return out


def dram_check(dram: dict | None, metrics: dict[str, float | None]) -> dict:
    """Predicted DRAM bytes (tkir/tools/traffic.py) beside dram__bytes_read + dram__bytes_write."""
    read, write = metrics.get("dram__bytes_read.sum"), metrics.get("dram__bytes_write.sum")
    out: dict[str, object] = {"predicted_read": None, "predicted_write": None, "measured_read": read,
                              "measured_write": write, "memory_bound": None, "verdict": "-", "why": ""}
    if not dram:
        return out
    out.update(predicted_read=dram["read_bytes"], predicted_write=dram["write_bytes"],
               memory_bound=dram["memory_bound"])
    predicted = dram["read_bytes"] + dram["write_bytes"]
    if read is None or write is None or predicted == 0:
        out["why"] = "not measured" if predicted else "no global tensor read or written"
        return out
    measured = read + write
    diff = (measured - predicted) / predicted
    out["why"] = f"predicted {_bytes(predicted)}, measured {_bytes(measured)} ({diff:+.1%})"
    if dram["memory_bound"]:
        out["verdict"] = "ok" if abs(diff) <= DRAM_TOLERANCE else "off"
    else:
        out["why"] += "; the prediction is a floor here (tiles re-read from the L2), no verdict"
    return out


def peaks_for(device: str) -> Peaks:
    """The PEAKS entry whose key the device's name contains (H100 when none does)."""
    return next((p for key, p in PEAKS.items() if key in device), PEAKS[DEFAULT_PEAKS])


def roofline(flops: float | None, nbytes: float | None, duration_ns: float | None, peaks: Peaks) -> dict:
    """The time bound max(FLOPs / tensor peak, bytes / copy bandwidth) against the measured duration."""
    t_flops = flops / peaks.tensor_flops * 1e9 if flops else None
    t_bytes = nbytes / peaks.copy_bytes_per_s * 1e9 if nbytes else None
    parts = [t for t in (t_flops, t_bytes) if t is not None]
    bound = max(parts) if parts else None
    limit = None if bound is None else ("tensor" if bound == t_flops else "memory")
    return {"flops": flops, "bytes": nbytes, "peak_tensor_flops": peaks.tensor_flops,
            "copy_bytes_per_s": peaks.copy_bytes_per_s, "peaks": peaks.device, "peaks_source": peaks.source,
            "tensor_ns": t_flops, "memory_ns": t_bytes, "bound_ns": bound, "limit": limit,
            "measured_ns": duration_ns,
            "fraction_of_bound": bound / duration_ns if bound and duration_ns else None}


def _unit_conflicts(c: dict) -> str:
    """The L1 unit's conflict count of a class counted from the source page ('-' where it is the same count)."""
    unit, waves = c.get("unit_conflicts"), c.get("unit_wavefronts")
    if c.get("counted_by") != "source page" or unit is None:
        return "-"
    return f"{unit:.0f} ({_pct(unit, waves)})" if waves else f"{unit:.0f}"


def format_measured(m: dict) -> str:
    """The measured section as text (what `tkc report --measure` prints after the report)."""
    size = " ".join(f"{k}={v}" for k, v in {**m.get("sizes", {}), **m.get("consts", {})}.items())
    lines = [f"measured: {m.get('kernel', '')} [{size}], one launch on {m.get('device', '?')} "
             f"(ncu {m.get('ncu', '?')})"]
    rows = []
    for c in m.get("shared", []):
        accesses = ", ".join(f"{a['op']} {a['tile']} {a['degree']}-way" for a in c["accesses"]) or "(unreported)"
        pred = c.get("predicted_per_instruction")
        conflicts = c["conflicts"]
        rows.append([c["name"], accesses, _num(c["instructions"]), _num(c["wavefronts"]),
                     _num(c.get("measured_per_instruction"), 3),
                     "-" if not pred else (f"{pred[0]}" if pred[0] == pred[1] else f"{pred[0]}..{pred[1]}"),
                     "-" if conflicts is None else f"{conflicts:.0f} ({_pct(conflicts, c['wavefronts'])})",
                     _unit_conflicts(c), c["verdict"]])
    if rows:
        lines += _table("shared memory, per instruction class (wavefronts per instruction; ld, st: the instructions' "
                        "own, from ncu's source page; l1tex: the L1 unit's count, waits behind other traffic "
                        "included):",
                        ["class", "accesses", "instructions", "wavefronts", "measured", "predicted", "conflicts",
                         "l1tex conflicts", "verdict"], rows)
    else:
        lines.append("shared memory: no LSU shared-memory instruction predicted or executed")
    widths = [[g["width"], _num(g["instructions"]), _num(g["wavefronts"]), _num(g["measured_degree"], 3),
               _degrees(g["predicted_degrees"]), g["verdict"]]
              for c in m.get("shared", []) for g in c.get("by_width", [])]
    if widths:
        lines += _table("shared memory, per instruction width (ncu's source page; degree = wavefronts / ideal):",
                        ["width", "instructions", "wavefronts", "degree", "predicted", "verdict"], widths)
    r = m.get("registers", {})
    lines.append(f"registers: predicted {_num(r.get('predicted'))}, ptxas {_num(r.get('ptxas'))}, SASS live peak "
                 f"{_num(r.get('sass_live_peak'))}, launch {_num(r.get('launch'))}; spills (ptxas) "
                 f"{_num(r.get('spill_stores'))} stores, {_num(r.get('spill_loads'))} loads  -> {_verdict(r)}")
    s = m.get("shared_memory", {})
    lines.append(f"shared memory per block: planned {_num(s.get('planned'))} B, launch {_num(s.get('dynamic'))} B "
                 f"dynamic + {_num(s.get('static'))} B static")
    o = m.get("occupancy", {})
    limits = ", ".join(f"{n.replace('_', ' ')} {_num(v)}" for n, v in (o.get("limits") or {}).items())
    lines.append(f"occupancy: planned {_num(o.get('planned_blocks_per_sm'))} blocks/SM "
                 f"({_num(o.get('planned_pct'), 3)}% of warp slots); the launch allows {limits}; theoretical "
                 f"{_num(o.get('theoretical_pct'), 3)}%, achieved {_num(o.get('achieved_pct'), 3)}%  -> {_verdict(o)}")
    d = m.get("dram", {})
    lines.append(f"DRAM: predicted read {_bytes(d.get('predicted_read'))} + write {_bytes(d.get('predicted_write'))}; "
                 f"measured read {_bytes(d.get('measured_read'))} + write {_bytes(d.get('measured_write'))}  -> "
                 f"{_verdict(d)}")
    lines.append(f"tensor pipe: {_num(m.get('tensor_pipe_pct'), 3)}% of peak; duration "
                 f"{_num(m.get('duration_ns') and m['duration_ns'] / 1e3, 4)} us")
    rf = m.get("roofline", {})
    if rf.get("bound_ns"):
        parts = []
        if rf.get("tensor_ns") is not None:
            parts.append(f"{rf['flops'] / 1e9:.4g} GFLOP at {rf['peak_tensor_flops'] / 1e12:.1f} TFLOP/s = "
                         f"{rf['tensor_ns'] / 1e3:.4g} us")
        if rf.get("memory_ns") is not None:
            parts.append(f"{_bytes(rf['bytes'])} at {rf['copy_bytes_per_s'] / 1e9:.0f} GB/s = "
                         f"{rf['memory_ns'] / 1e3:.4g} us")
        frac = rf.get("fraction_of_bound")
        lines.append(f"roofline ({rf['peaks']}): " + "; ".join(parts) + f"; bound {rf['bound_ns'] / 1e3:.4g} us "
                     f"({rf['limit']}), measured {_num(rf.get('measured_ns') and rf['measured_ns'] / 1e3, 4)} us"
                     + (f": {frac:.0%} of the roofline" if frac else ""))
    if m.get("unavailable"):
        lines.append("metrics this ncu does not know (dropped): " + ", ".join(m["unavailable"]))
    off = m.get("off", [])
    lines.append("off: none" if not off else "off:")
    lines += [f"  {o}" for o in off]
    return "\n".join(lines) + "\n"


def metric_table() -> str:
    """METRICS as a markdown table (docs/cli.md shows it)."""
    rows = ["| metric | counts | name from |", "|---|---|---|"]
    rows += [f"| `{m.name}` | {m.what} | {m.source} |" for m in METRICS]
    return "\n".join(rows)


# --- helpers -------------------------------------------------------------------------------------


def _first_launch(run: NcuRun, kernel: str) -> dict[str, float | None]:
    named = [la for la in run.launches if la.kernel.split("(")[0].strip() == kernel]
    return (named or run.launches)[0].metrics


def _child_env() -> dict[str, str]:
    """The environment of the launcher: this one, with the tkir that runs here first on PYTHONPATH."""
    root = str(Path(__file__).resolve().parents[2])  # tkir/tools/measure.py -> the folder holding tkir/
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])])
    return env


def _table(title: str, header: list[str], rows: list[list[str]]) -> list[str]:
    cells = [header, *rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    return [title] + ["  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]


def _verdict(part: dict) -> str:
    v = part.get("verdict", "-")
    why = part.get("why", "")
    return f"{v}" + (f" ({why})" if why else "")


def _num(v: float | None, digits: int = 0) -> str:
    if v is None:
        return "n/a"
    if digits:
        return f"{v:.{digits}g}"
    return f"{v:.0f}"


def _pct(part: float, whole: float | None) -> str:
    return f"{100 * part / whole:.2f}%" if whole else "-"


def _bytes(n: float | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 1e6:.2f} MB" if n >= 1e5 else f"{n:.0f} B"
