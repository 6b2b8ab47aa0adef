"""Nsight Compute (`ncu`) for `tkc report --measure`: the metrics asked for, the command, and its CSV read back.

    ncu = find_ncu()                                   # TKIR_NCU, else `ncu` on PATH, else the CUDA toolkit's
    cmd = ncu_command(ncu, "gemm", METRIC_NAMES, [sys.executable, "-m", "tkir.tools.measure_launch", DIR])
    run = run_ncu(cmd)                                 # NcuRun: its CSV parsed, the metrics ncu did not know
    launches = parse_ncu_csv(text)                     # pure: one NcuLaunch per profiled kernel launch

`METRICS` is the one table of what is measured, each metric with what it counts and where its name comes
from. `parse_ncu_csv` reads both CSV layouts ncu writes: the details page (`--csv`, the default page: one
row per metric with "ID","Process ID","Process Name","Host Name","Kernel Name",...,"Section Name","Metric
Name","Metric Unit","Metric Value") and the raw page (`--page raw --csv`: one row per launch, a column per
metric, a second row of units). Values are normalised to base units (bytes, nanoseconds) whatever ncu's
`--print-units` did, and thousands separators ("17,609") are read. Lines that are not CSV (`==PROF==`,
`==WARNING==`, the program's own output) are skipped.

With `source_dir` (what --measure passes), the one profiled launch also collects the SourceCounters section
into a report file, and `run_ncu` imports it twice: the raw page (every metric, read as above) and the source
page (`--page source --print-source sass --csv`: one row per SASS instruction with its executed count and its
"L1 Wavefronts Shared" and "... Ideal"), which `source_shared` sums per instruction class. Those are the
instruction's own wavefronts: the L1 unit's l1tex__data_bank_conflicts_* counters also count the cycles a
shared access waits behind other traffic to the same banks (TMA writes of the next tile's stages, wgmma operand
reads), 44% of linear_dgrad's epilogue stores on an H100 whose instructions ncu's source page shows at their
ideal one wavefront each (docs/experiments.md, "Bank conflicts that are not the instruction's").

A metric this ncu or GPU does not know makes ncu refuse the whole run; `run_ncu` drops each metric an
`==ERROR==` line names and runs again, and lists them as `unavailable` (the first GPU runs tell which of
the names marked [U] exist).
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import io
import os
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from tkir.diagnostics import TkirError

NCU_ENV = "TKIR_NCU"  # names the ncu program (a path, or a command line such as "sudo -E /usr/local/cuda/bin/ncu")
CUDA_BIN_NCU = Path("/usr/local/cuda/bin/ncu")  # where the CUDA toolkit installs it when PATH lacks it
NCU_TIMEOUT_S = 900  # one profiled launch replays the kernel once per counter pass: a few seconds to minutes
STDERR_TAIL_LINES = 25  # how much of a failing ncu's output an error quotes
# --clock-control none: the GPU runs at its own (boost) clocks, as `tkc bench` times it, so the duration
# compares with the roofline's peaks; ncu's default (base) locks lower clocks. Counters do not depend on it.
# --cache-control all (ncu's default): caches flushed before each replay pass, so the DRAM bytes are one
# cold launch's. --print-units base: bytes and nanoseconds, not Kbyte/usecond (the parser scales either way).
NCU_FLAGS = ("--csv", "--print-units", "base", "--target-processes", "all", "--clock-control", "none",
             "--cache-control", "all", "--launch-count", "1")
MAX_DROPPED_METRICS = 8  # more unknown names than this: the error is not about names, stop and quote it
PERMISSION_ERROR = "ERR_NVGPUCTRPERM"  # ncu's code for "the driver keeps the counters from non-admin users"
PERMISSION_HINT = ("the driver restricts GPU performance counters to administrators: run as root (e.g. "
                   f"{NCU_ENV}='sudo -E ncu'), or load the driver with NVreg_RestrictProfilingToAdminUsers=0 "
                   "(https://developer.nvidia.com/ERR_NVGPUCTRPERM)")

# Where a name comes from: NVIDIA's own rule file (read: it computes ncu's "Shared Load/Store Bank Conflicts"
# from these), the ncu section that shows the metric, or [U]: public ncu scripts only (run_ncu drops a name
# this ncu does not know and reports it; the first GPU runs settle them).
SOURCE_SECTION = "SourceCounters"  # per-SASS-instruction counters (the source page's "L1 Wavefronts Shared" ...)
SHARED_RULE = "ncu rule SharedMemoryConflicts.py"
LAUNCH_STATS = "ncu sections LaunchStats, Occupancy"
MEMORY_SECTION = "ncu section MemoryWorkloadAnalysis"
TIME_SECTION = "ncu section SpeedOfLight"
COMPUTE_SECTION = "ncu section ComputeWorkloadAnalysis"
UNSURE = "[U] public ncu scripts"


@dataclass(frozen=True)
class Metric:
    name: str
    what: str
    source: str


# Every metric `tkc report --measure` asks for: what it counts, where its name comes from.
METRICS: tuple[Metric, ...] = (
    # shared memory, per instruction class: ld (LDS + LDSM), st (STS + STSM), ldgsts (cp.async)
    Metric("smsp__sass_inst_executed_op_shared_ld.sum", "ld.shared (LDS) warp instructions", SHARED_RULE),
    Metric("smsp__inst_executed_op_ldsm.sum", "ldmatrix (LDSM) warp instructions; the rule adds them to the loads",
           SHARED_RULE),
    Metric("smsp__sass_inst_executed_op_shared_st.sum", "st.shared (STS) warp instructions", SHARED_RULE),
    Metric("smsp__inst_executed_op_stsm.sum", "stmatrix (STSM) warp instructions", UNSURE),
    Metric("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "shared-load wavefronts (LDS and LDSM)",
           SHARED_RULE),
    Metric("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum", "shared-store wavefronts", SHARED_RULE),
    Metric("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum", "shared-load bank conflicts (extra wavefronts)",
           SHARED_RULE),
    Metric("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum", "shared-store bank conflicts (extra wavefronts)",
           SHARED_RULE),
    Metric("smsp__inst_executed_op_ldgsts.sum", "cp.async (LDGSTS) warp instructions", UNSURE),
    Metric("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ldgsts.sum", "cp.async shared-side wavefronts", UNSURE),
    # registers, shared memory, occupancy: what the launch got
    Metric("launch__registers_per_thread", "registers per thread of the launch", LAUNCH_STATS),
    Metric("launch__shared_mem_per_block_static", "static shared memory per block (bytes)", LAUNCH_STATS),
    Metric("launch__shared_mem_per_block_dynamic", "dynamic shared memory per block (bytes)", LAUNCH_STATS),
    Metric("launch__block_size", "threads per block", LAUNCH_STATS),
    Metric("launch__grid_size", "blocks in the grid", LAUNCH_STATS),
    Metric("launch__occupancy_limit_registers", "blocks per SM the registers allow", LAUNCH_STATS),
    Metric("launch__occupancy_limit_shared_mem", "blocks per SM the shared memory allows", LAUNCH_STATS),
    Metric("launch__occupancy_limit_warps", "blocks per SM the warp slots allow", LAUNCH_STATS),
    Metric("launch__occupancy_limit_blocks", "blocks per SM the block slots allow", LAUNCH_STATS),
    Metric("sm__maximum_warps_per_active_cycle_pct", "theoretical occupancy (% of the SM's warp slots)",
           LAUNCH_STATS),
    Metric("sm__warps_active.avg.pct_of_peak_sustained_active", "achieved occupancy (% of the SM's warp slots)",
           LAUNCH_STATS),
    # DRAM, tensor pipes, time
    Metric("dram__bytes_read.sum", "bytes read from DRAM", MEMORY_SECTION),
    Metric("dram__bytes_write.sum", "bytes written to DRAM", MEMORY_SECTION),
    Metric("sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
           "wgmma tensor pipe busy (% of peak, sm_90)", UNSURE),
    Metric("sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
           "mma.sync tensor pipe busy (% of peak)", COMPUTE_SECTION),
    Metric("gpu__time_duration.sum", "the launch's duration (ns)", TIME_SECTION),
)
METRIC_NAMES: tuple[str, ...] = tuple(m.name for m in METRICS)

# unit -> factor to the base unit (bytes, nanoseconds); ncu scales by decimal prefixes unless told not to
_UNIT_SCALE = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "Tbyte": 1e12,
               "nsecond": 1, "usecond": 1e3, "msecond": 1e6, "second": 1e9}
_IDENTITY_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
                     "Stream", "Block Size", "Grid Size", "Device", "CC", "Section Name")
_NUMBER = re.compile(r"^[+-]?(\d{1,3}(,\d{3})+|\d+)(\.\d+)?([eE][+-]?\d+)?$")


class MeasureError(TkirError):
    """`tkc report --measure` cannot measure: no ncu, no GPU, ncu failing; the message says what to do."""


@dataclass
class NcuLaunch:
    """One profiled kernel launch: its name, ncu's ID, and each metric's value in base units (None: n/a)."""

    kernel: str
    id: str
    metrics: dict[str, float | None] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)


@dataclass
class NcuRun:
    """What run_ncu got: the launches, the command that got them, the metrics dropped as unknown."""

    launches: list[NcuLaunch]
    command: list[str]
    unavailable: list[str] = field(default_factory=list)
    output: str = ""
    source: list[SourceRow] | None = None  # the source page's shared-memory instructions (source_dir runs)


def find_ncu() -> list[str]:
    """The ncu command: $TKIR_NCU (split like a shell line), else `ncu` on PATH, else the CUDA toolkit's."""
    named = os.environ.get(NCU_ENV, "").strip()
    if named:
        words = shlex.split(named)
        program = shutil.which(words[0]) if words else None
        if program is None:
            raise MeasureError(f"{NCU_ENV}={named}: no such program; name Nsight Compute's ncu, e.g. "
                               f"{NCU_ENV}={CUDA_BIN_NCU}")
        return [program, *words[1:]]
    on_path = shutil.which("ncu")
    if on_path:
        return [on_path]
    if CUDA_BIN_NCU.is_file() and os.access(CUDA_BIN_NCU, os.X_OK):
        return [str(CUDA_BIN_NCU)]
    raise MeasureError(f"--measure runs the kernel under Nsight Compute, and ncu is not on PATH (nor {CUDA_BIN_NCU}); "
                       f"name it with {NCU_ENV}=/path/to/ncu (it is in the CUDA toolkit's bin/)")


def ncu_command(ncu: list[str], kernel: str, metrics: tuple[str, ...] | list[str], program: list[str],
                report: Path | None = None) -> list[str]:
    """ncu profiling the first launch of `kernel` (the whole name) in `program`, `metrics` only; with `report`,
    the SourceCounters section too, written to that report file (read back with import_command)."""
    to_file = ["--section", SOURCE_SECTION, "-f", "-o", str(report)] if report is not None else []
    return [*ncu, *NCU_FLAGS, "--kernel-name", f"regex:^{re.escape(kernel)}$", "--metrics", ",".join(metrics),
            *to_file, *program]


def import_command(ncu: list[str], report: Path, page: str) -> list[str]:
    """ncu printing one page of a report file as CSV: "raw" (every metric) or "source" (per SASS instruction)."""
    extra = ["--print-source", "sass"] if page == "source" else []
    return [*ncu, "-i", str(report), "--csv", "--print-units", "base", "--page", page, *extra]


def run_ncu(ncu: list[str], kernel: str, program: list[str], metrics: tuple[str, ...] = METRIC_NAMES,
            env: dict[str, str] | None = None, source_dir: Path | None = None) -> NcuRun:
    """Run `program` under ncu and read its CSV. A metric that ncu's error names is dropped and the run
    repeated; any other failure is a MeasureError quoting the command and the end of ncu's output. With
    `source_dir`, the launch is written to a report file there and read back: its raw page for the metrics and
    its source page for NcuRun.source (None where this ncu cannot print it)."""
    wanted = list(metrics)
    dropped: list[str] = []
    report = source_dir / "report.ncu-rep" if source_dir is not None else None
    while True:
        cmd = ncu_command(ncu, kernel, wanted, program, report)
        try:
            with _one_profiler_at_a_time():
                proc = subprocess.run(cmd, capture_output=True, text=True, timeout=NCU_TIMEOUT_S, env=env)
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            raise MeasureError(_failure(cmd, f"did not finish in {NCU_TIMEOUT_S} s", out)) from None
        except OSError as e:
            raise MeasureError(f"cannot run {cmd[0]}: {e.strerror or e}") from None
        output = proc.stdout + ("\n" + proc.stderr if proc.stderr else "")
        unknown = unknown_metrics(output, wanted)
        if unknown and len(unknown) < len(wanted) and len(dropped) + len(unknown) <= MAX_DROPPED_METRICS:
            dropped += unknown
            wanted = [m for m in wanted if m not in unknown]
            continue
        source = None
        if report is not None and proc.returncode == 0 and report.is_file():
            raw = _run_import(ncu, report, "raw", env)
            output += "\n" + raw
            launches = parse_ncu_csv(raw)
            if not launches:  # this ncu would not print the report's raw page: profile again as without a report
                report = None
                continue
            source = parse_source_csv(_run_import(ncu, report, "source", env))
        else:  # no report file: ncu profiled nothing (its output says why)
            launches = parse_ncu_csv(proc.stdout)
        if proc.returncode != 0 or not launches:
            why = f"exited with status {proc.returncode}" if proc.returncode else (
                f"profiled no launch of '{kernel}' (the --kernel-name filter matched nothing, or the program "
                "stopped before launching it)")
            raise MeasureError(_failure(cmd, why, output))
        return NcuRun(launches, cmd, dropped, output, source)


def _run_import(ncu: list[str], report: Path, page: str, env: dict[str, str] | None) -> str:
    """The CSV of one page of `report` ('' where ncu fails: the caller then has no such page)."""
    try:
        proc = subprocess.run(import_command(ncu, report, page), capture_output=True, text=True,
                              timeout=NCU_TIMEOUT_S, env=env)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout if proc.returncode == 0 else ""


# One ncu at a time on a machine: the GPU's performance counters serve one profiling session, and the GPU
# suite runs under pytest-xdist (-n 16), whose workers would otherwise start several at once.
NCU_LOCK = Path(os.environ.get("TMPDIR", "/tmp")) / "tkir-ncu.lock"


@contextlib.contextmanager
def _one_profiler_at_a_time():
    """Hold an exclusive lock on NCU_LOCK (fcntl: released when the process ends, whatever happens)."""
    with open(NCU_LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def unknown_metrics(output: str, metrics: list[str]) -> list[str]:
    """The metrics of `metrics` an ==ERROR== line about a metric names (their base name, before the
    .sum/.avg suffix, counts too: ncu may quote either)."""
    errors = [ln for ln in output.splitlines() if "==ERROR==" in ln and "metric" in ln.lower()]
    out = []
    for m in metrics:
        base = m.split(".")[0]
        if any(m in ln or re.search(rf"\b{re.escape(base)}\b", ln) for ln in errors):
            out.append(m)
    return out


def parse_ncu_csv(text: str) -> list[NcuLaunch]:
    """Every launch in ncu's CSV output (details or raw page), metrics in base units, in ID order."""
    rows = _csv_rows(text)
    if not rows:
        return []
    header = rows[0]
    if "Metric Name" in header:
        return _details(header, rows[1:])
    return _raw(header, rows[1:])


@dataclass(frozen=True)
class SourceRow:
    """One SASS instruction of the source page that touches shared memory."""

    sass: str               # the instruction as ncu prints it ("STS [R6+UR6], R89")
    klass: str              # "ld" (LDS, LDSM), "st" (STS, STSM) or "ldgsts"
    executed: float         # warp-level instructions executed
    wavefronts: float       # L1 Wavefronts Shared
    ideal: float            # L1 Wavefronts Shared Ideal


LAUNCH_HEADER = '"ID","Process ID"'  # the details and raw pages' first columns
SOURCE_HEADER = '"Address","Source"'  # the source page's
SOURCE_COLUMNS = ("Source", "Instructions Executed", "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal")
# SASS opcodes -> instruction class (measure.SHARED_COUNTERS' classes); LDSM/STSM: ldmatrix/stmatrix
SOURCE_OPCODES = {"LDS": "ld", "LDSM": "ld", "STS": "st", "STSM": "st", "LDGSTS": "ldgsts"}


def parse_source_csv(text: str) -> list[SourceRow] | None:
    """The shared-memory instructions of ncu's source page (`--page source --print-source sass --csv`): rows
    whose opcode (predicate and modifiers stripped: "@!P0 LDSM.16.M88.4" -> LDSM) is in SOURCE_OPCODES; None
    when the text has no such page (or it lacks SOURCE_COLUMNS)."""
    rows = _csv_rows(text, SOURCE_HEADER)
    if not rows:
        return None
    col = {name: i for i, name in enumerate(rows[0])}
    if any(c not in col for c in SOURCE_COLUMNS):
        return None
    out = []
    for r in rows[1:]:
        if len(r) < len(rows[0]) or r[0] == "Address":
            continue
        words = r[col["Source"]].split()
        if words and words[0].startswith("@"):
            words = words[1:]
        klass = SOURCE_OPCODES.get(words[0].split(".")[0]) if words else None
        executed = metric_value(r[col["Instructions Executed"]])
        if klass is None or not executed:
            continue
        out.append(SourceRow(r[col["Source"]].strip(), klass, executed,
                             metric_value(r[col["L1 Wavefronts Shared"]]) or 0.0,
                             metric_value(r[col["L1 Wavefronts Shared Ideal"]]) or 0.0))
    return out


def source_shared(rows: list[SourceRow]) -> dict[str, dict[str, float]]:
    """Per instruction class: executed instructions, wavefronts and ideal wavefronts summed over its rows."""
    out: dict[str, dict[str, float]] = {}
    for r in rows:
        c = out.setdefault(r.klass, {"instructions": 0.0, "wavefronts": 0.0, "ideal": 0.0})
        c["instructions"] += r.executed
        c["wavefronts"] += r.wavefronts
        c["ideal"] += r.ideal
    return out


def metric_value(text: str, unit: str = "") -> float | None:
    """A metric's CSV value as a number in base units: '17,609' -> 17609.0, ('1.5', 'Kbyte') -> 1500.0,
    ('48', 'Kbyte/block') -> 48000.0; None for 'n/a', '' or anything not a number."""
    s = text.strip()
    if not _NUMBER.match(s):
        return None
    return float(s.replace(",", "")) * _UNIT_SCALE.get(unit.strip().split("/")[0], 1)


# --- helpers -------------------------------------------------------------------------------------


def _failure(cmd: list[str], why: str, output: str) -> str:
    tail = "\n".join(output.rstrip().splitlines()[-STDERR_TAIL_LINES:])
    msg = f"ncu {why}\n  command: {shlex.join(cmd)}\n  its output ends:\n" + "\n".join(
        "    " + ln for ln in tail.splitlines())
    if PERMISSION_ERROR in output:
        msg += f"\n  hint: {PERMISSION_HINT}"
    return msg


def _csv_rows(text: str, header: str = LAUNCH_HEADER) -> list[list[str]]:
    """The CSV rows from the header line (starting with `header`) on; ncu's and the program's other lines left out."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith(header)), None)
    if start is None:
        return []
    body = [ln for ln in lines[start:] if ln.startswith('"')]
    return [r for r in csv.reader(io.StringIO("\n".join(body))) if r]


def _details(header: list[str], rows: list[list[str]]) -> list[NcuLaunch]:
    col = {name: i for i, name in enumerate(header)}
    by_id: dict[str, NcuLaunch] = {}
    for r in rows:
        if len(r) < len(header):
            continue
        launch_id = r[col["ID"]]
        launch = by_id.setdefault(launch_id, NcuLaunch(r[col.get("Kernel Name", 0)], launch_id))
        name, unit = r[col["Metric Name"]], r[col["Metric Unit"]]
        launch.metrics[name] = metric_value(r[col["Metric Value"]], unit)
        launch.units[name] = _base_unit(unit)
    return sorted(by_id.values(), key=lambda la: _id_key(la.id))


def _raw(header: list[str], rows: list[list[str]]) -> list[NcuLaunch]:
    """The raw page: metric columns after the identity ones; the first row under the header holds units."""
    metric_cols = [(i, name) for i, name in enumerate(header) if name not in _IDENTITY_COLUMNS]
    col = {name: i for i, name in enumerate(header)}
    units: dict[str, str] = {}
    if rows and not rows[0][col["ID"]].strip().isdigit():
        units = {name: rows[0][i] for i, name in metric_cols if i < len(rows[0])}
        rows = rows[1:]
    out = []
    for r in rows:
        if len(r) < len(header):
            continue
        launch = NcuLaunch(r[col["Kernel Name"]] if "Kernel Name" in col else "", r[col["ID"]])
        for i, name in metric_cols:
            launch.metrics[name] = metric_value(r[i], units.get(name, ""))
            launch.units[name] = _base_unit(units.get(name, ""))
        out.append(launch)
    return sorted(out, key=lambda la: _id_key(la.id))


def _base_unit(unit: str) -> str:
    """'Kbyte/block' -> 'byte/block', 'usecond' -> 'nsecond': the unit metric_value's number is in."""
    head, sep, rest = unit.strip().partition("/")
    if head in _UNIT_SCALE:
        head = "byte" if head.endswith("byte") else "nsecond"
    return head + sep + rest


def _id_key(launch_id: str) -> tuple[int, str]:
    return (int(launch_id), "") if launch_id.strip().isdigit() else (1 << 62, launch_id)
