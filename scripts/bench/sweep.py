"""The benchmark sweep: every point tuned at its size, then benched against its peers in one run.

What it measures (on one H200; each point is `tkc tune` at that size, then `tkc bench` of the tuned
configuration, in the same process):

* GEMM, examples/gemm.tk, C = A @ B (A M x K, B K x N, bf16): M in 1, 16, 64, 256, 1024, 4096, 16384 x
  (N, K) in (4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096): 28 points. Peer: torch.matmul
  (cuBLAS). Bars: cuBLAS ms / tkir ms >= 0.95 where M >= 256, >= 0.85 at M = 16 and 64, >= 0.8 at M = 1.
* Row kernels, examples/{layernorm,rmsnorm,softmax}.tk, N rows in 1, 128, 4096, 65536 x D in 768, 4096,
  8192, 16384 (D is the kernels' const, pinned; the tune space picks the rest): 48 points. Peers: eager
  torch and torch.compile (the companions' PEER and EXTRA_PEERS), timed interleaved with tkir, plus the
  device-to-device copy bandwidth (tkir.tools.timing.copy_bandwidth) measured once per worker process in the
  same device call. Bars: tkir >= 85% of copy where X is >= 64 MiB (N * D * 2 bytes), and >= 1.0x
  eager and >= 1.0x torch.compile everywhere.

Each point: tkir.tools.tune.tune(path, sizes, fixed) (the space is whatever the kernel's @tune declares; the
result lands in the tune cache), then tkir.tools.bench.bench_one with the tuned consts (correctness on fresh
inputs first, then tkir and peers timed interleaved, L2 flushed, median of --reps). Everything a point
yields (sizes, tuned consts, the tune table with its survivors and Spearman rho, ms of tkir and of each
peer, ratios, TFLOP/s or GB/s, % of copy, rel_err, each bar, or the error as text) is one JSON line
appended to DIR/sweep.jsonl as soon as the point finishes.

Run (on the GPU machine; scripts/bench/sweep.sh wraps it for a device call):

    python3 scripts/bench/sweep.py --part gemm --out DIR --budget-s 480
    python3 scripts/bench/sweep.py --part rows --out DIR --budget-s 480      # resumes in the same DIR
    python3 scripts/bench/sweep.py --report-only DIR                         # the tables and plots again
    python3 scripts/bench/sweep.py --dry-run --m 1,256 --nk 4096x4096        # no GPU: tune --dry-run

Options: --part gemm|rows|all; filters --m, --nk NxK, --kernel, --rows, --d (comma lists); --defaults (no
tuning: each point at the kernel's defaults, `auto` consts chosen by the compiler per size bucket); --reps
(bench), --tune-reps, --jobs (parallel compiles); --budget-s: no point starts unless its estimated
time fits in what is left (later, cheaper points may still run), a point still running at the budget
plus --grace-s is stopped, and the points not run are listed in DIR/state.json, the table and
DIR/sweep.md, to be run by the next call with the same DIR. Resumable: points already in
DIR/sweep.jsonl are skipped (--redo-errors runs the failed ones again).

Robustness: the points run in a worker process that a supervisor (this script, which never imports
torch) watches. A worker that dies (a kernel's illegal address leaves the CUDA context unusable, so
the worker exits after recording the point) or a point that hangs past --point-timeout-s is recorded
as that point's error and a fresh worker carries on with the rest. A point interrupted twice (the
device call's own limit killed it) is recorded as an error instead of being tried a third time.

The tune cache: TKIR_CACHE=1 and TKIR_CACHE_DIR=--cache-dir (default DIR/cache; tkir/backend/cache.py
reads both); the tune results (a few KB each) are also packed into DIR/tune_cache.tgz after every
point and unpacked at start, so a later call given only DIR (the device returns at most 8 files from
$OUT) reads the tuned configurations instead of timing them again.

GPU memory: the largest GEMM point (M = 16384, N = 128256, K = 4096) moves 5.4 GB (C is 4.2 GB);
bench_one rotates max(2, ...) = 2 input sets (tune: 3), and the f32 reference is 8.4 GB. Its
correctness check (tkir.tools.timing.rel_err: .double() of output and reference plus their difference)
would add three 17 GB temporaries (about 77 GB at the peak), so the worker swaps in a version that
walks tensors of more than 2^26 elements in slices (same value up to rounding): the plan is 29 GB at
most (memory_plan; --dry-run prints each point's, and each record has torch's measured peak).
Tensors are freed and torch.cuda.empty_cache() runs between points; --mem-limit-gb (60) refuses a
point planned above it.

Row kernels' inputs: their companions have only numpy make_inputs / reference, which at N = 65536 x
D = 16384 cost minutes of host time per point (tune draws 3 sets, bench 2, each with a float64
reference). The sweep gives tune and bench (tkir.tools.tune.tune's `companion=` hook) a wrapper that draws
the same distributions on the GPU and computes the reference in f32 there (GpuRowInputs); timing is
unaffected. --host-inputs uses the companions' own path.

--consts-from SWEEP: each point an earlier sweep (its directory or sweep.jsonl[.gz]) recorded as ok is
benched with the consts its tuner chose there, without tuning (the record says `"tune": {"from": ...}`);
points it lacks are tuned. The tuning is most of a sweep's device time (891 of 1004 s in the
sweep of 2026-12-02), so all 76 points fit one device call this way, measured in one run with one copy
bandwidth. scripts/bench/sweep_consts.jsonl holds the consts of the last whole sweep (76 of 76 points passed); its
row records hold only D, since the row examples leave their schedule to the compiler (ROWS=auto).

--dry-run (no GPU, no torch): for each selected point, tkir.tools.tune.dry_run (the space through the
compiler, ptxas and the cost model), with the memory plan and time estimate; nothing is recorded.
Exit status: 0 when every point run so far in DIR passed its bars, 1 otherwise, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import signal
import subprocess
import sys
import tarfile
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"

GEMM_M = (1, 16, 64, 256, 1024, 4096, 16384)
GEMM_NK = ((4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096))
ROW_KERNELS = ("layernorm", "rmsnorm", "softmax")
ROW_N = (1, 128, 4096, 65536)
ROW_D = (768, 4096, 8192, 16384)

COPY_BAR = 0.85                  # fraction of copy bandwidth, where X >= COPY_BAR_BYTES
COPY_BAR_BYTES = 64 * 2**20      # N * D * 2 bytes (64 MiB; 64e6 selects the same points of this grid)
EAGER_BAR = COMPILED_BAR = 1.0
TUNE_SETS = 3                    # tkir.tools.tune.time_points rotates 3 input sets
REL_ERR_CHUNK = 2**26            # elements per slice of the chunked correctness check
MEM_LIMIT_GB = 60.0

JSONL, STATE, REPORT_MD = "sweep.jsonl", "state.json", "sweep.md"
PLOT_GEMM, PLOT_ROWS, TUNE_TGZ = "sweep_gemm.png", "sweep_rows.png", "tune_cache.tgz"
EXIT_CUDA_DEAD = 3               # a worker's exit status: the CUDA context is gone, start a fresh worker


def gemm_bar(m: int) -> float:
    """The sweep's bar for cuBLAS ms / tkir ms at this M."""
    return 0.95 if m >= 256 else 0.85 if m >= 16 else 0.8


# --- the points ------------------------------------------------------------------------------------


@dataclass
class Point:
    part: str                       # gemm | rows
    kernel: str                     # gemm | layernorm | rmsnorm | softmax
    sizes: dict[str, int]           # the problem sizes tune and bench see
    fixed: dict[str, int] = field(default_factory=dict)  # consts pinned (the rows' D)

    @property
    def id(self) -> str:
        return " ".join([self.kernel] + [f"{k}={v}" for k, v in {**self.sizes, **self.fixed}.items()])

    @property
    def path(self) -> Path:
        return EXAMPLES / f"{self.kernel}.tk"

    @property
    def dims(self) -> dict[str, int]:
        return {**self.sizes, **self.fixed}


def all_points() -> list[Point]:
    """The 28 GEMM points (M-major) and the 48 row points (kernel, then N, then D)."""
    pts = [Point("gemm", "gemm", {"M": m, "N": n, "K": k}) for m in GEMM_M for n, k in GEMM_NK]
    pts += [Point("rows", kern, {"N": n}, {"D": d}) for kern in ROW_KERNELS for n in ROW_N for d in ROW_D]
    return pts


def _ints(text: str | None) -> set[int] | None:
    return None if text is None else {int(x) for x in text.split(",") if x.strip()}


def select(points: Iterable[Point], part: str = "all", m: str | None = None, nk: str | None = None,
           kernel: str | None = None, rows: str | None = None, d: str | None = None) -> list[Point]:
    """The points of `part` that pass the filters (comma lists; --nk as NxK pairs)."""
    ms, ns, ds = _ints(m), _ints(rows), _ints(d)
    nks = None if nk is None else {tuple(int(v) for v in x.lower().split("x")) for x in nk.split(",") if x.strip()}
    kerns = None if kernel is None else {x.strip() for x in kernel.split(",") if x.strip()}
    out = []
    for p in points:
        if part != "all" and p.part != part:
            continue
        if p.part == "gemm":
            nk_of = (p.sizes["N"], p.sizes["K"])
            if (ms is not None and p.sizes["M"] not in ms) or (nks is not None and nk_of not in nks):
                continue
        else:
            if (kerns is not None and p.kernel not in kerns) or (ns is not None and p.sizes["N"] not in ns) \
                    or (ds is not None and p.fixed["D"] not in ds):
                continue
        out.append(p)
    return out


# --- estimates: time and memory --------------------------------------------------------------------


def prior_seconds(p: Point, host_inputs: bool = False) -> float:
    """A rough prior for one point's wall time (tune: compiles and timing of ~20 points; bench).

    GEMM: compiles plus ~600 runs of the kernel's own time at ~650 TFLOP/s. Rows: compiles and
    torch.compile per shape, plus 10 ns per element (inputs drawn on the GPU); with --host-inputs the
    companions' numpy inputs and float64 references cost ~200 ns per element on this repo's CPU machine.
    Scaled by what finished points took (Budget.calibrate)."""
    if p.part == "gemm":
        m, n, k = p.sizes["M"], p.sizes["N"], p.sizes["K"]
        return 8.0 + 600 * (2 * m * n * k / 650e12)
    return 10.0 + p.sizes["N"] * p.fixed["D"] * (1.5e-7 if host_inputs else 1e-8)


def _rotate_sets(nbytes: int) -> int:
    """tkir.tools.bench.bench_one's number of rotated input sets for a point moving `nbytes`."""
    from tkir.tools import timing as b  # no torch at import

    return max(2, min(b.MAX_ROTATE_SETS, math.ceil(b.ROTATE_FACTOR * b.L2_BYTES / max(nbytes, 1)),
                      max(1, b.ROTATE_BUDGET // max(nbytes, 1))))


def memory_plan(p: Point) -> dict[str, Any]:
    """GPU bytes a point allocates at its peak (tune and bench are sequential: the larger counts)."""
    flush = 256 * 2**20
    chunk_tmp = 4 * 8 * REL_ERR_CHUNK  # float64 slices of output, reference, difference, squares
    if p.part == "gemm":
        m, n, k = p.sizes["M"], p.sizes["N"], p.sizes["K"]
        nbytes = 2 * (m * k + k * n + m * n)
        ref = 4 * m * n + 4 * (m * k + k * n)   # f32 reference and the f32 copies of A and B
        sets = _rotate_sets(nbytes)
        tune_b = TUNE_SETS * nbytes + ref + chunk_tmp + flush
        bench_b = sets * nbytes + ref + 2 * m * n + chunk_tmp + flush   # + cuBLAS's own output
    else:
        n, d = p.sizes["N"], p.fixed["D"]
        nbytes = 4 * n * d + 4 * d
        sets = _rotate_sets(nbytes)
        f32 = 4 * n * d                             # the f32 reference on the GPU, and its temporaries
        tune_b = TUNE_SETS * nbytes + 3 * f32 + flush
        bench_b = sets * nbytes + 3 * f32 + 2 * (2 * n * d) + flush  # + the eager and compiled outputs
    return {"bytes": nbytes, "bench_sets": sets, "tune_sets": TUNE_SETS,
            "peak_gb": round(max(tune_b, bench_b) / 1e9, 2)}


class Budget:
    """Wall-clock budget: does a point's estimated time fit before the deadline?"""

    def __init__(self, deadline: float | None, clock: Callable[[], float] = time.time, host_inputs: bool = False):
        self.deadline, self.clock, self.host_inputs = deadline, clock, host_inputs
        self.factor = 1.0

    def prior(self, p: Point) -> float:
        return prior_seconds(p, self.host_inputs)

    def calibrate(self, records: Iterable[dict]) -> None:
        """Scale the priors by what finished points took (same part, this DIR), clamped to 0.5-4x."""
        pairs = [(r["seconds"], r["prior_s"]) for r in records if r.get("seconds") and r.get("prior_s")]
        if pairs:
            self.factor = min(4.0, max(0.5, sum(a for a, _ in pairs) / sum(b for _, b in pairs)))

    def estimate(self, p: Point) -> float:
        return self.prior(p) * self.factor

    def fits(self, p: Point) -> bool:
        return self.deadline is None or self.clock() + self.estimate(p) <= self.deadline

    def left(self) -> float:
        return math.inf if self.deadline is None else self.deadline - self.clock()


# --- the sweep directory: records and state --------------------------------------------------------


class SweepDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)

    def records(self) -> dict[str, dict]:
        """The last record of each point id (a truncated last line, from a killed writer, is skipped)."""
        out: dict[str, dict] = {}
        f = self.path / JSONL
        if f.is_file():
            for line in f.read_text().splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(r, dict) and "id" in r:
                    out[r["id"]] = r
        return out

    def append(self, rec: dict) -> None:
        f_path = self.path / JSONL
        torn = f_path.is_file() and f_path.stat().st_size > 0 and not f_path.read_bytes().endswith(b"\n")
        with open(f_path, "a") as f:  # after a killed writer's half line, start a new line
            f.write(("\n" if torn else "") + json.dumps(rec, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def state(self) -> dict:
        try:
            return json.loads((self.path / STATE).read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    def save_state(self, st: dict) -> None:
        tmp = self.path / (STATE + ".tmp")
        tmp.write_text(json.dumps(st, indent=1, default=str) + "\n")
        os.replace(tmp, self.path / STATE)

    def update_state(self, **kw: Any) -> dict:
        st = self.state()
        st.update(kw)
        self.save_state(st)
        return st


def is_done(rec: dict | None, redo_errors: bool = False, since: float = 0.0) -> bool:
    """A recorded point is done; with --redo-errors an error recorded before this call (`since`) is not."""
    if rec is None:
        return False
    return not redo_errors or rec.get("status") == "ok" or float(rec.get("finished_at", 0)) >= since


def say(msg: str) -> None:
    print(msg, flush=True)


def error_record(p: Point, stage: str, message: str, **extra: Any) -> dict:
    return {"id": p.id, "part": p.part, "kernel": p.kernel, "sizes": p.sizes, "fixed": p.fixed, "status": "error",
            "stage": stage, "error": message[-3000:], "bars": {}, "pass": False, "finished_at": time.time(), **extra}


# --- the worker loop (pure: `measure` does the GPU work) -------------------------------------------


Measure = Callable[[Point, "Context"], dict]


def run_points(points: list[Point], sd: SweepDir, ctx: Context, measure: Measure, budget: Budget,
               *, redo_errors: bool = False, since: float = 0.0, log: Callable[[str], None] | None = None) -> int:
    """Run each point not yet in sd's records that fits the budget; append its record. Returns 0, or
    EXIT_CUDA_DEAD when a point left the CUDA context unusable (the supervisor starts a new worker)."""
    log = log or say
    done = sd.records()
    for p in points:
        if is_done(done.get(p.id), redo_errors, since):
            continue
        budget.calibrate(r for r in sd.records().values() if r.get("part") == p.part and r.get("status") == "ok")
        if not budget.fits(p):
            log(f"sweep: {p.id}: not started, estimated {budget.estimate(p):.0f} s > {budget.left():.0f} s left")
            continue
        st = sd.state()
        attempts = dict(st.get("attempts", {}))
        if attempts.get(p.id, 0) >= 2:
            rec = error_record(p, "interrupted", f"started {attempts[p.id]} times and never finished (killed by "
                                                 "the device call's time limit, or a hang the supervisor did not see)")
            sd.append(rec)
            attempts.pop(p.id)
            sd.update_state(attempts=attempts)
            log(f"sweep: {p.id}: ERROR {rec['error']}")
            continue
        attempts[p.id] = attempts.get(p.id, 0) + 1
        est = budget.estimate(p)
        sd.update_state(attempts=attempts, inflight={"id": p.id, "started": time.time(), "pid": os.getpid(),
                                                      "estimate_s": round(est, 1)})
        log(f"sweep: {p.id}: start (estimated {est:.0f} s)")
        t0 = time.time()
        try:
            rec = measure(p, ctx)
        except Exception as e:  # noqa: BLE001 - every failure is a record, never a crashed sweep
            rec = error_record(p, getattr(e, "stage", "run"), f"{type(e).__name__}: {e}\n{traceback.format_exc()}",
                               fatal=not ctx.cuda_alive())
        rec.setdefault("id", p.id)
        rec["seconds"] = round(time.time() - t0, 2)
        rec["prior_s"] = round(budget.prior(p), 2)
        rec.setdefault("finished_at", time.time())
        fatal = bool(rec.pop("fatal", False))
        sd.append(rec)
        attempts.pop(p.id, None)  # attempts count starts that never finished
        sd.update_state(inflight=None, attempts=attempts)
        log(format_line(p, rec))
        ctx.after_point(rec)
        if fatal:
            log("sweep: the CUDA context is unusable after this point; a new worker goes on")
            return EXIT_CUDA_DEAD
    return 0


# --- the GPU side ----------------------------------------------------------------------------------


class PointError(Exception):
    def __init__(self, stage: str, message: str):
        super().__init__(message)
        self.stage = stage


def chunked_rel_err(torch: Any, out: Any, ref: Any, chunk: int = REL_ERR_CHUNK) -> float:
    """||out - ref|| / ||ref|| in float64 over slices of `chunk` elements; inf when out holds a NaN
    (tkir.tools.timing.rel_err's value, without float64 copies of whole tensors)."""
    o_all, r_all = out.reshape(-1), ref.reshape(-1)
    num = den = 0.0
    for s in range(0, int(o_all.numel()), chunk):
        o, r = o_all[s:s + chunk].double(), r_all[s:s + chunk].double()
        if bool(torch.isnan(o).any()):
            return math.inf
        diff = o - r
        num += float((diff * diff).sum())
        den += float((r * r).sum())
    if den == 0.0:
        return math.inf if num > 0 else math.nan
    return math.sqrt(num) / math.sqrt(den)


def patch_rel_err(timing_module: Any, chunk: int = REL_ERR_CHUNK) -> None:
    """Make tkir.tools.timing.rel_err (bench_one and tune's checks read it at call time) walk large tensors
    in slices; small ones keep the original."""
    orig = timing_module.rel_err
    if getattr(orig, "sweep_chunked", False):
        return

    def rel_err(torch: Any, out: Any, ref: Any) -> float:
        if int(out.numel()) <= chunk:
            return orig(torch, out, ref)
        return chunked_rel_err(torch, out, ref, chunk)

    rel_err.sweep_chunked = True  # type: ignore[attr-defined]
    timing_module.rel_err = rel_err


ROW_PARAMS = {"layernorm": ["X", "W", "Bias", "Y"], "rmsnorm": ["X", "W", "Y"], "softmax": ["X", "Y"]}


class GpuRowInputs:
    """A row kernel's companion with torch_inputs / torch_reference added: the inputs drawn on the GPU
    as the companion's numpy make_inputs draws them (same distributions), the reference in f32 on the
    GPU. The companions have only the numpy path, which at N = 65536, D = 16384 spends minutes of host
    time per point (5 input sets and two float64 references); timing is the same either way (same
    shapes, same tensors on the GPU). Everything else is the companion's (peers, PARAMS, TOLERANCE)."""

    def __init__(self, companion: Any, kernel: str):
        self._c, self._k = companion, kernel

    def __getattr__(self, name: str) -> Any:
        return getattr(self._c, name)

    def _d(self, consts: dict) -> int:
        return int({**getattr(self._c, "DEFAULT_CONSTS", {}), **consts}["D"])

    def torch_inputs(self, sizes: dict, consts: dict) -> list:
        import torch

        n, d, bf = sizes["N"], self._d(consts), torch.bfloat16

        def randn(*shape: int) -> Any:
            return torch.randn(*shape, device="cuda", dtype=torch.float32)

        y = torch.full((n, d), float("nan"), device="cuda", dtype=bf)
        if self._k == "layernorm":   # an offset mean per row
            return [(randn(n, d) + randn(n, 1)).to(bf), randn(d).to(bf), randn(d).to(bf), y]
        if self._k == "rmsnorm":     # a different scale per row
            return [(randn(n, d) * torch.exp(randn(n, 1))).to(bf), randn(d).to(bf), y]
        return [randn(n, d).to(bf), y]

    def torch_reference(self, inputs: list, sizes: dict, consts: dict) -> dict:
        import torch

        x = inputs[0].float()
        if self._k == "layernorm":
            w, b = inputs[1].float(), inputs[2].float()
            return {"Y": torch.nn.functional.layer_norm(x, (x.shape[1],), w, b, eps=self._c.EPS)}
        if self._k == "rmsnorm":
            return {"Y": x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self._c.EPS) * inputs[1].float()}
        return {"Y": torch.softmax(x, dim=1)}


def row_companion(companion: Any, kernel: str, host_inputs: bool) -> tuple[Any, str]:
    """The companion the sweep times a row kernel with, and a word for the record."""
    if host_inputs or list(companion.PARAMS) != ROW_PARAMS.get(kernel) or hasattr(companion, "torch_inputs"):
        return companion, "companion"  # its own path (numpy, or its own torch hooks)
    return GpuRowInputs(companion, kernel), "gpu-mirror"


class Context:
    """What the points of one worker share: flags, the sweep dir, torch (imported on first use), the
    copy bandwidth (measured once, at the first row point)."""

    def __init__(self, args: argparse.Namespace, sd: SweepDir):
        self.args, self.sd = args, sd
        self._torch: Any = None
        self.copy_gbps: float | None = None
        self._given: dict[str, dict] | None = None

    def given_consts(self) -> dict[str, dict]:
        """--consts-from's table (empty without it), read once."""
        if self._given is None:
            self._given = load_given_consts(self.args.consts_from) if self.args.consts_from else {}
        return self._given

    def torch(self) -> Any:
        if self._torch is None:
            import torch

            import tkir.tools.timing

            patch_rel_err(tkir.tools.timing)
            try:  # one compiled function sees 16 shapes per row kernel: past dynamo's default limit
                import torch._dynamo  # (8) it would silently run eagerly

                for name in ("recompile_limit", "cache_size_limit"):
                    if hasattr(torch._dynamo.config, name):
                        setattr(torch._dynamo.config, name, max(64, getattr(torch._dynamo.config, name)))
            except Exception:  # noqa: BLE001
                pass
            self._torch = torch
            env = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "pid": os.getpid()}
            self.sd.update_state(env=env)
        return self._torch

    def copy(self) -> float:
        if self.copy_gbps is None:
            from tkir.tools.timing import copy_bandwidth

            self.copy_gbps = copy_bandwidth(self.torch())
            st = self.sd.state()
            self.sd.update_state(copy=list(st.get("copy", [])) + [{"gbps": self.copy_gbps, "at": time.time()}])
        return self.copy_gbps

    def after_point(self, rec: dict) -> None:
        if self._torch is not None:
            import gc

            gc.collect()
            try:
                self._torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001
                pass
        pack_tune_cache(self.sd, self.args.cache_dir)

    def cuda_alive(self) -> bool:
        if self._torch is None:
            return True
        try:
            self._torch.cuda.synchronize()
            return float(self._torch.ones(1, device="cuda").add_(1).item()) == 2.0
        except Exception:  # noqa: BLE001
            return False


def load_given_consts(path: str | Path) -> dict[str, dict]:
    """--consts-from: point id -> the consts of each ok record of an earlier sweep (its directory or its
    sweep.jsonl[.gz]); those points are benched with them instead of tuned (the tuning that chose them is in
    that sweep's records)."""
    f = Path(path)
    if f.is_dir():
        f = next((f / n for n in (JSONL, JSONL + ".gz") if (f / n).exists()), f / JSONL)
    opener = gzip.open if f.suffix == ".gz" else open
    out: dict[str, dict] = {}
    with opener(f, "rt") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if rec.get("status") == "ok" and isinstance(rec.get("consts"), dict):
                out[rec["id"]] = rec["consts"]
    return out


def tune_summary(res: Any) -> dict:
    from tkir.tools.tune import format_result

    dropped: dict[str, int] = {}
    for c in res.candidates:
        if c.status == "dropped":
            dropped[c.stage] = dropped.get(c.stage, 0) + 1
    return {"points": len(res.candidates), "survivors": len(res.timed()), "dropped": dropped, "rho": res.rho(),
            "cached": bool(res.cached), "key": res.key, "best": res.best, "table": format_result(res)}


def measure(p: Point, ctx: Context) -> dict:
    """Tune at this size, then bench the tuned consts against the peers (one point, one record)."""
    torch = ctx.torch()
    from tkir.tools.bench import bench_one
    from tkir.tools.examples import load_companion
    from tkir.tools.tune import tune

    a = ctx.args
    rec: dict[str, Any] = {"id": p.id, "part": p.part, "kernel": p.kernel, "sizes": p.sizes, "fixed": p.fixed,
                           "memory_plan": memory_plan(p)}
    plan = rec["memory_plan"]
    if plan["peak_gb"] > a.mem_limit_gb:
        raise PointError("plan", f"memory plan {plan['peak_gb']} GB > --mem-limit-gb {a.mem_limit_gb}")
    torch.cuda.reset_peak_memory_stats()
    copy = None
    if p.part == "rows":
        copy = ctx.copy()
        import tkir.tools.bench

        torch._dynamo.reset()          # each point's torch.compile is compiled for its shape alone
        tkir.tools.bench._INDUCTOR.clear()
    comp = load_companion(str(p.path))
    if p.part == "rows":
        comp, rec["inputs"] = row_companion(comp, p.kernel, a.host_inputs)
    t0 = time.time()
    given = ctx.given_consts().get(p.id)
    if a.defaults:  # the kernel as a user calls it: its header's consts, `auto` ones chosen by the compiler
        rec["tune"] = {"from": "defaults", "best": None, "cached": False}
        rec["tune_s"] = 0.0
        consts = dict(p.fixed)
    elif given is not None:  # --consts-from: the consts an earlier sweep's tuner chose here, benched again
        rec["tune"] = {"from": a.consts_from, "best": given, "cached": True}
        rec["tune_s"] = 0.0
        consts = dict(given)
    else:
        try:
            res = tune(str(p.path), dict(p.sizes), fixed=dict(p.fixed) or None, reps=a.tune_reps, jobs=a.jobs,
                       force=a.force_tune, companion=comp)
        except Exception as e:  # noqa: BLE001
            raise PointError("tune", f"{type(e).__name__}: {e}\n{traceback.format_exc()}") from e
        rec["tune"] = tune_summary(res)
        rec["tune_s"] = round(time.time() - t0, 2)
        if res.best is None:
            why = "; ".join(f"{n} by {s}" for s, n in rec["tune"]["dropped"].items())
            raise PointError("tune", f"no point of the space survived ({why})")
        consts = dict(res.best)
    rec["consts"] = consts
    import gc

    gc.collect()
    torch.cuda.empty_cache()
    t0 = time.time()
    try:
        row = bench_one(str(p.path), comp, dict(p.sizes), consts, reps=a.reps)
    except Exception as e:  # noqa: BLE001
        rec.update(status="error", stage="bench", error=f"{type(e).__name__}: {e}\n{traceback.format_exc()}"[-3000:],
                   bars={}, fatal=not ctx.cuda_alive())
        rec["pass"] = False
        return rec
    rec["bench_s"] = round(time.time() - t0, 2)
    rec["peak_gpu_gb"] = round(torch.cuda.max_memory_allocated() / 1e9, 2)
    rec.update(status="ok", consts=row.consts, ms=row.ms, peer=row.peer, peer_ms=row.peer_ms, rel_err=row.rel_err,
               tolerance=row.bound, correct=bool(row.ok), flops=row.flops, bytes=row.bytes,
               host_us=row.host_us, timing="flush + host lead (tkir.tools.timing.HOST_LEAD_CYCLES)")
    if p.part == "gemm":
        rec.update(ratio=row.ratio, tflops=row.tflops, peer_tflops=row.peer_tflops)
    else:
        compiled = (row.extra_ms or {}).get("compiled")
        rec.update(eager_ms=row.peer_ms, compiled_ms=compiled, ratio_eager=row.ratio,
                   ratio_compiled=row.extra_ratio("compiled") if compiled else None, gbps=row.gbps,
                   eager_gbps=row.bytes / row.peer_ms / 1e6 if row.peer_ms else None,
                   compiled_gbps=row.bytes / compiled / 1e6 if compiled else None,
                   copy_gbps=copy, pct_copy=100 * row.gbps / copy if copy else None,
                   x_bytes=2 * p.sizes["N"] * p.fixed["D"])
    rec["bars"] = bars(p, rec)
    rec["pass"] = all(rec["bars"].values())
    return rec


def bars(p: Point, rec: dict) -> dict[str, bool]:
    """Each bar of the sweep that applies to this point, and whether the record meets it."""
    out = {"correct": bool(rec.get("correct"))}
    if p.part == "gemm":
        b = gemm_bar(p.sizes["M"])
        out[f"x cuBLAS >= {b}"] = (rec.get("ratio") or 0.0) >= b
    else:
        if 2 * p.sizes["N"] * p.fixed["D"] >= COPY_BAR_BYTES:
            out[f"copy >= {100 * COPY_BAR:.0f}%"] = (rec.get("pct_copy") or 0.0) >= 100 * COPY_BAR
        out[f"x eager >= {EAGER_BAR}"] = (rec.get("ratio_eager") or 0.0) >= EAGER_BAR
        out[f"x compiled >= {COMPILED_BAR}"] = (rec.get("ratio_compiled") or 0.0) >= COMPILED_BAR
    return out


# --- the tune cache across device calls ------------------------------------------------------------


def setup_cache_env(cache_dir: str) -> None:
    """tkir/backend/cache.py reads TKIR_CACHE and TKIR_CACHE_DIR at every call; the compile workers of
    tune inherit them."""
    os.environ["TKIR_CACHE"] = "1"
    os.environ["TKIR_CACHE_DIR"] = str(cache_dir)
    Path(cache_dir).mkdir(parents=True, exist_ok=True)


def pack_tune_cache(sd: SweepDir, cache_dir: str) -> None:
    """DIR/tune_cache.tgz: the cache entries of every recorded tune result (their keys are in the
    records), so a later call given DIR alone reads the tuned configurations."""
    keys = sorted({r["tune"]["key"] for r in sd.records().values() if (r.get("tune") or {}).get("key")})
    files = [Path(cache_dir) / f"{k}.json" for k in keys]
    files = [f for f in files if f.is_file()]
    if not files:
        return
    tmp = sd.path / (TUNE_TGZ + ".tmp")
    with tarfile.open(tmp, "w:gz") as tar:
        for f in files:
            tar.add(f, arcname=f.name)
    os.replace(tmp, sd.path / TUNE_TGZ)


def unpack_tune_cache(sd: SweepDir, cache_dir: str) -> int:
    src = sd.path / TUNE_TGZ
    if not src.is_file():
        return 0
    n = 0
    with tarfile.open(src, "r:gz") as tar:
        for m in tar.getmembers():
            name = Path(m.name).name
            if not (m.isfile() and name.endswith(".json") and name == m.name) or (Path(cache_dir) / name).exists():
                continue
            data = tar.extractfile(m)
            if data is not None:
                (Path(cache_dir) / name).write_bytes(data.read())
                n += 1
    return n


# --- the supervisor --------------------------------------------------------------------------------


def supervise(args: argparse.Namespace, points: list[Point], sd: SweepDir, start: float,
              log: Callable[[str], None] | None = None) -> None:
    """Run the points in worker processes; record a dead worker's or a hung point's error, start a
    fresh worker for the rest; stop a point still running at the budget plus --grace-s."""
    log = log or say
    deadline = None if args.budget_s is None else start + args.budget_s
    no_progress = 0
    while True:
        done = sd.records()
        pending = [p for p in points if not is_done(done.get(p.id), args.redo_errors, start)]
        if not pending or (deadline is not None and time.time() >= deadline):
            return
        cmd = [sys.executable, str(Path(__file__).resolve()), *args.argv, "--worker", "--since", f"{start:.3f}"]
        if deadline is not None:
            cmd += ["--deadline", f"{deadline:.3f}"]
        before = sum(float(r.get("finished_at", 0)) >= start for r in done.values())
        spawned = time.time()
        proc = subprocess.Popen(cmd, start_new_session=True)
        stopped = ""
        while True:
            try:
                rc = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                pass
            now = time.time()
            try:  # the worker rewrites state.json when a point starts or ends: silence this long is a hang
                quiet = now - max(spawned, (sd.path / STATE).stat().st_mtime)
            except OSError:
                quiet = now - spawned
            if quiet > args.point_timeout_s:
                stopped = "timeout"
            elif deadline is not None and now > deadline + args.grace_s:
                stopped = "budget"
            if stopped:
                _kill(proc)
                rc = proc.wait()
                break
        st = sd.state()
        inflight = st.get("inflight") or {}
        pt = next((p for p in points if p.id == inflight.get("id")), None) if inflight.get("pid") == proc.pid else None
        attempts = dict(st.get("attempts", {}))
        if pt is not None and not is_done(sd.records().get(pt.id), args.redo_errors, start):
            if stopped == "timeout":
                sd.append(error_record(pt, "timeout", f"still running after {args.point_timeout_s:.0f} s "
                                                      "(--point-timeout-s): stopped, a fresh worker goes on"))
                log(f"sweep: {pt.id}: ERROR timed out after {args.point_timeout_s:.0f} s")
            elif stopped == "budget":
                log(f"sweep: {pt.id}: stopped at the budget (+{args.grace_s:.0f} s grace); it runs again next call")
            else:
                why = f"exit status {rc}" + (f", {signal.Signals(-rc).name}" if rc < 0 else "")
                sd.append(error_record(pt, "crash", f"the worker died ({why}) during this point; the log has "
                                                    "its output"))
                log(f"sweep: {pt.id}: ERROR the worker died ({why})")
            attempts.pop(pt.id, None)  # recorded, or stopped by the budget: not an unexplained interruption
        sd.update_state(inflight=None, attempts=attempts)
        if stopped == "budget" or rc == 0:
            return
        after = sum(float(r.get("finished_at", 0)) >= start for r in sd.records().values())
        no_progress = 0 if after > before else no_progress + 1
        if no_progress >= 2:
            log(f"sweep: the worker failed twice without finishing a point (status {rc}); giving up")
            return


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own session: the worker and its compile processes
    except (ProcessLookupError, PermissionError):
        proc.kill()


# --- the report ------------------------------------------------------------------------------------


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def format_line(p: Point, rec: dict | None) -> str:
    """One line of the terminal table: the point, its numbers, each bar ok or FAIL."""
    head = f"{p.id:<32}"
    if rec is None:
        return head + " not run"
    if rec.get("status") != "ok":
        err = (rec.get("error") or "").strip().splitlines()
        return head + f" ERROR [{rec.get('stage', '?')}] {err[0][:150] if err else ''}"
    consts = " ".join(f"{k}={v}" for k, v in ((rec.get("tune") or {}).get("best") or rec.get("consts", {})).items()
                      if k not in p.fixed)
    if p.part == "gemm":
        nums = (f" x{_fmt(rec.get('ratio'), '.3f')} cuBLAS  {_fmt(rec.get('tflops'), '.1f')} vs "
                f"{_fmt(rec.get('peer_tflops'), '.1f')} TFLOP/s")
    else:
        nums = (f" {_fmt(rec.get('pct_copy'), '.1f')}% copy  x{_fmt(rec.get('ratio_eager'), '.2f')} eager  "
                f"x{_fmt(rec.get('ratio_compiled'), '.2f')} compiled  {_fmt(rec.get('gbps'), '.0f')} GB/s")
    marks = " ".join(f"[{k}: {'ok' if v else 'FAIL'}]" for k, v in rec.get("bars", {}).items())
    rho = (rec.get("tune") or {}).get("rho")
    return head + nums + f"  rel {_fmt(rec.get('rel_err'), '.1e')}  {marks}  ({consts}; rho {_fmt(rho, '.2f')})"


def _cell_gemm(rec: dict | None) -> str:
    if rec is None:
        return "not run"
    if rec.get("status") != "ok":
        return "ERROR"
    mark = "" if rec.get("pass") else " ✗"
    return f"{_fmt(rec.get('ratio'), '.3f')}{mark}"


def _cell_rows(p: Point, rec: dict | None) -> str:
    if rec is None:
        return "not run"
    if rec.get("status") != "ok":
        return "ERROR"
    b = rec.get("bars", {})

    def mark(prefix: str) -> str:
        k = next((k for k in b if k.startswith(prefix)), None)
        return "" if k is None or b[k] else "✗"

    wrong = "" if rec.get("correct") else " (wrong)"
    return (f"{_fmt(rec.get('pct_copy'), '.0f')}%{mark('copy')} · {_fmt(rec.get('ratio_eager'), '.2f')}×"
            f"{mark('x eager')} · {_fmt(rec.get('ratio_compiled'), '.2f')}×{mark('x compiled')}{wrong}")


def write_markdown(sd: SweepDir, records: dict[str, dict], state: dict) -> str:
    pts = all_points()
    by_id = {p.id: p for p in pts}
    lines = ["# Benchmark sweep", ""]
    env = state.get("env") or {}
    if env:
        lines += [f"GPU: {env.get('gpu', '?')}, torch {env.get('torch', '?')}.", ""]
    done = [r for r in records.values() if r["id"] in by_id]
    ok = [r for r in done if r.get("status") == "ok"]
    lines += [f"{len(done)} of {len(pts)} points recorded: {sum(bool(r.get('pass')) for r in done)} pass every bar, "
              f"{len(ok) - sum(bool(r.get('pass')) for r in ok)} miss one, {len(done) - len(ok)} errors.", ""]
    lines += ["## GEMM: cuBLAS ms / tkir ms (C = A @ B; ✗ misses its bar: 0.95 at M >= 256, 0.85 at M = 16, 64, "
              "0.8 at M = 1)", ""]
    lines.append("| M | " + " | ".join(f"N={n} K={k}" for n, k in GEMM_NK) + " | bar |")
    lines.append("|---" * (len(GEMM_NK) + 2) + "|")
    for m in GEMM_M:
        cells = [_cell_gemm(records.get(Point("gemm", "gemm", {"M": m, "N": n, "K": k}).id)) for n, k in GEMM_NK]
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {gemm_bar(m)} |")
    copies = [c["gbps"] for c in state.get("copy", [])]
    lines += ["", "## Row kernels: % of copy bandwidth · × eager · × torch.compile", "",
              "✗ misses its bar (copy >= 85% where X >= 64 MiB; >= 1.0× eager and torch.compile everywhere). "
              "Copy bandwidth measured in the same call: "
              + (", ".join(f"{c:.0f}" for c in copies) + " GB/s" if copies else "not measured yet") + ".", ""]
    for kern in ROW_KERNELS:
        lines += [f"### {kern}", "", "| N | " + " | ".join(f"D={d}" for d in ROW_D) + " |",
                  "|---" * (len(ROW_D) + 1) + "|"]
        for n in ROW_N:
            cells = [_cell_rows(p, records.get(p.id)) for p in (Point("rows", kern, {"N": n}, {"D": d}) for d in ROW_D)]
            lines.append(f"| {n} | " + " | ".join(cells) + " |")
        lines.append("")
    errs = [r for r in done if r.get("status") != "ok"]
    if errs:
        lines += ["## Errors", ""]
        for r in errs:
            msg = (r.get("error") or "").strip().splitlines()
            lines.append(f"- `{r['id']}` [{r.get('stage', '?')}]: {msg[0][:300] if msg else ''}")
        lines.append("")
    missing = [p.id for p in pts if p.id not in records]
    if missing:
        lines += ["## Not run yet", "", ", ".join(f"`{i}`" for i in missing), ""]
    lines += ["## Tuned configurations", "",
              "Host us per call: enqueue time of one launch (tkir / peer / torch.compile), measured apart from the "
              "GPU timings, which leave it out for every side (tkir.tools.timing.host_us_per_call).", "",
              "| point | consts | survivors / points | rho | tkir ms | peer ms | host us per call |",
              "|---|---|---|---|---|---|---|"]
    for p in pts:
        r = records.get(p.id)
        if r is None or r.get("status") != "ok":
            continue
        t = r.get("tune") or {}
        consts = " ".join(f"{k}={v}" for k, v in (r.get("consts") or {}).items() if k not in p.fixed)
        lines.append(f"| {p.id} | {consts} | {t.get('survivors', '-')} / {t.get('points', '-')} | "
                     f"{_fmt(t.get('rho'), '.2f')} | {_fmt(r.get('ms'), '.4f')} | {_fmt(r.get('peer_ms'), '.4f')} | "
                     f"{' / '.join(f'{v:.0f}' for v in (r.get('host_us') or {}).values()) or '-'} |")
    text = "\n".join(lines) + "\n"
    (sd.path / REPORT_MD).write_text(text)
    return text


def write_plots(sd: SweepDir, records: dict[str, dict]) -> list[str]:
    """sweep_gemm.png (ratio vs M per (N, K), log x) and sweep_rows.png (% of copy vs bytes of X)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    ok = {i: r for i, r in records.items() if r.get("status") == "ok"}
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for n, k in GEMM_NK:
        xs = [(m, ok[i]["ratio"]) for m in GEMM_M if (i := Point("gemm", "gemm", {"M": m, "N": n, "K": k}).id) in ok
              and ok[i].get("ratio")]
        if xs:
            ax.plot([x for x, _ in xs], [y for _, y in xs], "o-", label=f"N={n} K={k}")
    ax.step(GEMM_M, [gemm_bar(m) for m in GEMM_M], where="post", color="k", ls="--", lw=1, label="bar")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("M")
    ax.set_ylabel("cuBLAS ms / tkir ms")
    ax.set_title("gemm (tuned per point) vs torch.matmul")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(sd.path / PLOT_GEMM, dpi=110)
    plt.close(fig)
    written.append(PLOT_GEMM)
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for kern, color in zip(ROW_KERNELS, ("C0", "C1", "C2"), strict=True):
        rs = sorted((r for r in ok.values() if r.get("kernel") == kern and r.get("pct_copy")),
                    key=lambda r: r["x_bytes"])
        if not rs:
            continue
        a1.plot([r["x_bytes"] for r in rs], [r["pct_copy"] for r in rs], "o", color=color, label=kern)
        a2.plot([r["x_bytes"] for r in rs], [r.get("ratio_eager") or math.nan for r in rs], "o", color=color,
                label=f"{kern} / eager")
        a2.plot([r["x_bytes"] for r in rs], [r.get("ratio_compiled") or math.nan for r in rs], "x", color=color,
                label=f"{kern} / compiled")
    a1.axhline(100 * COPY_BAR, color="k", ls="--", lw=1)
    a1.axvline(COPY_BAR_BYTES, color="grey", ls=":", lw=1)
    a1.set(xscale="log", xlabel="bytes of X (N x D x 2)", ylabel="% of copy bandwidth", title="row kernels")
    a2.axhline(1.0, color="k", ls="--", lw=1)
    a2.set(xscale="log", xlabel="bytes of X (N x D x 2)", ylabel="peer ms / tkir ms",
           title="vs eager (o), torch.compile (x)")
    for a in (a1, a2):
        if a.get_legend_handles_labels()[0]:
            a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(sd.path / PLOT_ROWS, dpi=110)
    plt.close(fig)
    written.append(PLOT_ROWS)
    return written


def report(sd: SweepDir, points: list[Point], log: Callable[[str], None] | None = None) -> int:
    """Print one line per selected point, write sweep.md and the plots; 0 when every recorded point passes."""
    log = log or say
    records, state = sd.records(), sd.state()
    log("")
    for p in points:
        log(format_line(p, records.get(p.id)))
    not_run = [p.id for p in points if p.id not in records]
    sel = [records[p.id] for p in points if p.id in records]
    log(f"sweep: {len(sel)} of {len(points)} selected points recorded ({len(records)} in {sd.path / JSONL}); "
        f"{sum(bool(r.get('pass')) for r in sel)} pass every bar; {len(not_run)} not run")
    write_markdown(sd, records, state)
    pngs = write_plots(sd, records)
    log(f"sweep: wrote {sd.path / REPORT_MD}" + "".join(f", {sd.path / f}" for f in pngs)
        + ("" if pngs else " (no matplotlib: no plots)"))
    return 0 if all(r.get("pass") for r in records.values()) else 1


# --- --dry-run -------------------------------------------------------------------------------------


def dry_run(points: list[Point], jobs: int | None, log: Callable[[str], None] | None = None) -> int:
    """tkir.tools.tune.dry_run for each point (the compiler, ptxas and the model; no GPU), with its memory
    plan and time estimate."""
    from tkir.tools.tune import dry_run as tune_dry_run

    log = log or say
    for p in points:
        t0 = time.time()
        plan = memory_plan(p)
        try:
            res = tune_dry_run(str(p.path), dict(p.sizes), fixed=dict(p.fixed) or None, jobs=jobs)
        except Exception as e:  # noqa: BLE001
            log(f"{p.id}: ERROR {type(e).__name__}: {e}")
            continue
        kept = [c for c in res.candidates if c.status == "kept"]
        dropped: dict[str, int] = {}
        for c in res.candidates:
            if c.status == "dropped":
                dropped[c.stage] = dropped.get(c.stage, 0) + 1
        first = min(kept, key=lambda c: c.predicted_ms) if kept else None
        log(f"{p.id}: {len(res.candidates)} points, {len(kept)} kept, dropped "
            + (", ".join(f"{n} by {s}" for s, n in dropped.items()) or "none")
            + (f"; model's first: {first.label()} ({first.predicted_ms:.4f} ms)" if first else "; nothing to time")
            + f"; GPU plan {plan['peak_gb']} GB (bench sets {plan['bench_sets']}, tune {plan['tune_sets']}); "
            f"estimate {prior_seconds(p):.0f} s on the H200; dry run {time.time() - t0:.1f} s here")
    return 0


# --- main ------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="The benchmark sweep: tune each point, bench it against its peers "
                                             "(see the module docstring).")
    ap.add_argument("--part", choices=("gemm", "rows", "all"), default="all")
    ap.add_argument("--m", help="GEMM M values, comma list (1,16,...)")
    ap.add_argument("--nk", help="GEMM (N, K) pairs as NxK, comma list (4096x4096,128256x4096)")
    ap.add_argument("--kernel", help="row kernels, comma list (layernorm,rmsnorm,softmax)")
    ap.add_argument("--rows", help="row counts N, comma list")
    ap.add_argument("--d", help="row widths D, comma list")
    ap.add_argument("--reps", type=int, default=30, help="timed runs per kernel in the bench (median)")
    ap.add_argument("--tune-reps", type=int, default=20, help="timed runs per point of the tune space")
    ap.add_argument("--jobs", type=int, default=None, help="parallel compiles of tune (default: CPU count)")
    ap.add_argument("--out", default="sweep-out", help="the sweep directory (records, state, report)")
    ap.add_argument("--cache-dir", default=None, help="TKIR_CACHE_DIR (default OUT/cache)")
    ap.add_argument("--budget-s", type=float, default=None, help="wall-clock budget of this call in seconds")
    ap.add_argument("--grace-s", type=float, default=40.0, help="stop a point still running this long past the budget")
    ap.add_argument("--point-timeout-s", type=float, default=300.0, help="a point running longer is a hang: stopped")
    ap.add_argument("--mem-limit-gb", type=float, default=MEM_LIMIT_GB, help="refuse points planned above this")
    ap.add_argument("--host-inputs", action="store_true",
                    help="row kernels: the companions' numpy inputs and float64 reference (slow at large N x D)")
    ap.add_argument("--redo-errors", action="store_true", help="run again the points recorded with an error")
    ap.add_argument("--force-tune", action="store_true", help="time the tune space again (ignore the tune cache)")
    ap.add_argument("--consts-from", metavar="SWEEP", default=None,
                    help="bench each point with the consts an earlier sweep recorded for it (its directory or "
                         "sweep.jsonl[.gz]) instead of tuning it; points it lacks are tuned")
    ap.add_argument("--defaults", action="store_true",
                    help="bench each point at the kernel's defaults (its `auto` consts chosen by the compiler for "
                         "the point's sizes) instead of tuning it")
    ap.add_argument("--dry-run", action="store_true", help="no GPU: tune --dry-run of each selected point")
    ap.add_argument("--report-only", metavar="DIR", help="print the table and write sweep.md and the plots of DIR")
    ap.add_argument("--in-process", action="store_true", help="run the points in this process (no supervisor)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--deadline", type=float, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--since", type=float, default=0.0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    a.argv = list(sys.argv[1:] if argv is None else argv)  # what a worker process is started with
    if a.reps < 1 or a.tune_reps < 1 or (a.jobs is not None and a.jobs < 1):
        ap.error("--reps, --tune-reps and --jobs are at least 1")
    return a


def _fake_measure() -> Measure | None:
    """SWEEP_FAKE_MEASURE=FILE.py: a test's `measure(point, ctx)` in place of the GPU one."""
    f = os.environ.get("SWEEP_FAKE_MEASURE")
    if not f:
        return None
    import importlib.util

    spec = importlib.util.spec_from_file_location("sweep_fake", f)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.measure


def main(argv: list[str] | None = None) -> int:
    start = time.time()
    a = parse_args(argv)
    if a.report_only:
        sd = SweepDir(a.report_only)
        return report(sd, select(all_points(), a.part, a.m, a.nk, a.kernel, a.rows, a.d))
    points = select(all_points(), a.part, a.m, a.nk, a.kernel, a.rows, a.d)
    if not points:
        print("sweep: error: no point matches --part and the filters", file=sys.stderr)
        return 2
    if a.dry_run:
        return dry_run(points, a.jobs)
    sd = SweepDir(a.out)
    a.cache_dir = a.cache_dir or str(sd.path / "cache")
    setup_cache_env(a.cache_dir)
    if a.worker or a.in_process:
        if not a.worker:
            unpack_tune_cache(sd, a.cache_dir)
        deadline = a.deadline if a.worker else (None if a.budget_s is None else start + a.budget_s)
        ctx = Context(a, sd)
        budget = Budget(deadline, host_inputs=a.host_inputs)
        rc = run_points(points, sd, ctx, _fake_measure() or measure, budget, redo_errors=a.redo_errors,
                        since=a.since if a.worker else start)
        if a.worker:
            return rc
    else:
        n = unpack_tune_cache(sd, a.cache_dir)
        calls = sd.state().get("calls", [])
        sd.update_state(calls=calls + [{"started": start, "argv": a.argv, "points": len(points)}],
                        inflight=None)
        print(f"sweep: {len(points)} points selected, {sum(p.id in sd.records() for p in points)} already in "
              f"{sd.path / JSONL}; tune cache {a.cache_dir} ({n} tune results unpacked)"
              + (f"; budget {a.budget_s:.0f} s" if a.budget_s else ""), flush=True)
        supervise(a, points, sd, start)
    records = sd.records()
    not_run = [p.id for p in points if not is_done(records.get(p.id), False)]
    st = sd.state()
    calls = st.get("calls", [])
    if calls:
        calls[-1].update(finished=time.time(), seconds=round(time.time() - start, 1), not_run=len(not_run))
    sd.update_state(calls=calls, not_run={"ids": not_run, "at": time.time(),
                                          "why": "budget" if a.budget_s else "not reached"})
    if not_run:
        print(f"sweep: {len(not_run)} points not run in this call (the budget): " + "; ".join(not_run), flush=True)
    pack_tune_cache(sd, a.cache_dir)
    return report(sd, points)


if __name__ == "__main__":
    sys.exit(main())
