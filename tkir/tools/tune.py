"""Autotuning: `tkc tune FILE --size ...` and `tkir.autotune(path)`.

    result = tune("examples/gemm.tk", {"M": 4096, "N": 4096, "K": 4096})
    k = tkir.autotune("examples/gemm.tk");  k(A, B, C)   # the tuned configuration for A's shapes

1. The space: the kernel's `@tune(...)` (frontend/tune.py), `-D` pins consts. Points failing a
   `where=` are dropped, with that condition as the reason.
2. The compiler's own checks, one process per point (`jobs` in parallel): the front end, the passes
   (plan-occupancy refuses what does not fit in shared memory or registers), the launch's run-time
   requirements at these sizes (tile divisibility: tkir.requires), the backend and ptxas (a point that
   spills more than SPILL_LIMIT_BYTES is dropped: that much local memory means a mis-planned point).
   Each dropped point keeps the first line of its error as the reason.
3. The model (tkir.tools.tune_model): a predicted time per surviving point; a point predicted slower than
   MODEL_PRUNE_FACTOR x the best prediction is dropped (the reason names its blocks and waves). Points
   whose PTX and launch description are identical to an earlier point's (a const the kernel does not
   read at these values, e.g. a row kernel's chunk width DC once DC >= D) are dropped as "same", naming
   that point: one kernel is timed once.
4. Timing, on the GPU: fresh inputs from the kernel's companion, every point checked against the
   reference first (a wrong point is dropped), then all timed interleaved (tkir.tools.timing.time_pair_ms:
   L2 flushed, medians). Then the points within REFINE_WITHIN of the best median (at most REFINE_TOP)
   are timed again, together, with REFINE_REPS_FACTOR x the reps, and the best is chosen among them by
   that second run: at a few microseconds one round's medians tie or differ by less than their noise
   (11 of layernorm's N = 1, D = 768 points at the same 3.6 us, the first of them taken).
   The table ranks by the first round (every point timed together) and shows the second beside it;
   the two rounds are not compared with each other (clocks drift between them).
   With several GPUs, the points are split over them, one process each, for the first round; the
   second round (the points near the best of all of them) runs on GPU 0, one more process.
5. The best point is kept in the disk cache (tkir.backend.cache) under a key of the kernel source,
   the pinned consts, target and pipeline, the size bucket (each size rounded up to a power of two),
   the GPU's name and the tool versions; a second `tune` for the same key reads it and times nothing.

`TunedKernel.__call__` infers the sizes from its arguments, looks the bucket up in the cache (no
timing on the hot path) and launches that configuration; on a miss it launches the kernel's default
consts (`auto` ones chosen by the compiler for the call's size bucket: tkir/tools/auto_consts.py), or tunes
first when built with `tune_on_miss=True`. The configuration is kept per argument shapes,
so a call with shapes seen before reads them and launches (tkir.backend.runtime checks the rest).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from tkir.diagnostics import CompileError, TkirError
from tkir.tools import timing
from tkir.tools.auto_consts import SPILL_LIMIT_BYTES, size_bucket  # noqa: F401 (tune's names too)
from tkir.tools.tune_model import ranks, spearman

MODEL_PRUNE_FACTOR = 3.0   # drop a point the model predicts at more than 3x the best prediction
DEFAULT_REPS = 20
REFINE_WITHIN = 1.06       # points within 6% of the best median of the first round are timed again...
#                            (3% before: a first round of 42 GEMMs at 4096 x 128256 x 4096 put BN = 256
#                            4.4% behind BN = 128 in one sweep and 0.1% ahead in the next; timed
#                            again in a group of 6 it was 6-7% faster, as the sweep's bench harness measures)
REFINE_TOP = 8             # ...at most 8 (tkir.tools.timing.ROTATE_FULL_MAX: each then runs first equally often)...
REFINE_REPS_FACTOR = 3     # ...with 3x the reps, in one group of their own
TUNE_SETS = 3              # input sets the tuner's timings rotate through
CACHE_ARTIFACT = "tune"


@dataclass
class Candidate:
    consts: dict[str, int | float]
    tuned: dict[str, int | float]          # the consts the space varies (for the table)
    status: str = "kept"                   # kept | dropped | timed
    stage: str = ""                        # what dropped it: where | compile | requires | ptxas | model | check
    reason: str | None = None
    predicted_ms: float | None = None
    prediction: dict | None = None
    ms: float | None = None
    rel_err: float | None = None
    device: int | None = None
    code: str | None = None                # digest of the point's PTX and launch description
    again_ms: float | None = None          # the second round's median, where the point was timed again (`ms`
                                           # stays the first round's: every point of the table timed together)

    def label(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.tuned.items())


@dataclass
class TuneResult:
    path: str
    sizes: dict[str, int]
    bucket: dict[str, int]
    best: dict[str, int | float] | None
    candidates: list[Candidate]
    key: str | None
    cached: bool = False
    device: str = ""
    flops: int | None = None
    notes: list[str] = field(default_factory=list)

    def timed(self) -> list[Candidate]:
        return [c for c in self.candidates if c.status == "timed"]

    def rho(self) -> float | None:
        t = self.timed()
        return spearman([c.predicted_ms for c in t], [c.ms for c in t])

    def as_dict(self) -> dict:
        d = asdict(self)
        d["rho"] = self.rho()
        return d

    @classmethod
    def from_dict(cls, d: dict) -> TuneResult:
        d = dict(d)
        d.pop("rho", None)
        names = {f.name for f in fields(Candidate)}   # a result cached by an older tkir may carry other fields
        d["candidates"] = [Candidate(**{k: v for k, v in c.items() if k in names}) for c in d["candidates"]]
        return cls(**d)




# --- 1-3: the space, the compiler's checks, the model --------------------------------------------


def read_space(path: str):
    from tkir.frontend.tune import read_space as read
    from tkir.source_text import read_source

    space = read(read_source(path), str(path))
    if space is None:
        raise CompileError(None, f"{path}: the kernel has no @tune(...) search space",
                           hint="declare one before `kernel`, e.g. @tune(BM=[64, 128], STAGES=[3, 4])")
    return space


def plan(path: str, sizes: dict[str, int], *, fixed: dict | None = None, target: str = "sm_90a",
         passes: str | None = None, jobs: int | None = None, progress=None) -> list[Candidate]:
    """Steps 1-3: every point of the space, dropped (with its reason) or kept with a prediction."""
    space = read_space(path)
    cands = []
    for p in space.points(fixed):
        tuned = {k: p.consts[k] for k in space.values}
        c = Candidate(p.consts, tuned)
        if p.dropped:
            c.status, c.stage, c.reason = "dropped", "where", p.dropped
        cands.append(c)
    todo = [c for c in cands if c.status == "kept"]
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(todo) or 1))
    args = [(str(path), c.consts, dict(sizes), target, passes) for c in todo]
    if jobs == 1:
        results = map(_check_point_star, args)
    else:
        pool = concurrent.futures.ProcessPoolExecutor(jobs)
        results = pool.map(_check_point_star, args)
    for c, r in zip(todo, (progress or (lambda it, _n: it))(results, len(todo)), strict=True):
        if r["reason"]:
            c.status, c.stage, c.reason = "dropped", r["stage"], r["reason"]
        else:
            c.prediction = r["prediction"]
            c.predicted_ms = r["prediction"]["ms"]
            c.code = r.get("code")
    if jobs > 1:
        pool.shutdown()
    kept = [c for c in cands if c.status == "kept"]
    if kept:
        best = min(c.predicted_ms for c in kept)
        for c in kept:
            if c.predicted_ms > MODEL_PRUNE_FACTOR * best:
                p = c.prediction
                c.status, c.stage = "dropped", "model"
                c.reason = (f"model: {c.predicted_ms:.4f} ms predicted, {c.predicted_ms / best:.1f}x the best "
                            f"({p['blocks']} blocks, {p['waves']} wave(s) at {p['blocks_per_sm']}/SM, "
                            f"{100 * p['wave_efficiency']:.0f}% of the last wave busy, {p['bound']}-bound"
                            + (f", {p['split_tiles']} tile(s) split over {p['split_blocks']} blocks"
                               if p.get("split_blocks") else "") + ")")
    # after the model (whose prediction can differ for the same code: it reads the consts), so that a
    # group of identical kernels keeps its first survivor
    first: dict[str, Candidate] = {}
    for c in cands:
        if c.status == "kept" and c.code is not None:
            if c.code in first:
                c.status, c.stage = "dropped", "same"
                c.reason = f"same PTX and launch as {first[c.code].label()} (timed once)"
            else:
                first[c.code] = c
    return cands


def _check_point_star(a: tuple) -> dict:
    return check_point(*a)


def check_point(path: str, consts: dict, sizes: dict, target: str, passes: str | None) -> dict:
    """Compile one point through the passes, the backend and ptxas; its model prediction, or why not."""
    from tkir import api
    from tkir.requires import module_requires, requirement_failure
    from tkir.tools.tune_model import predict

    def dropped(stage: str, why: str) -> dict:
        return {"stage": stage, "reason": why.strip().splitlines()[0] if why.strip() else stage, "prediction": None}

    try:
        k = api.compile(path, target=target, passes=passes, **consts)
    except CompileError as e:
        return dropped("compile", _message(e))
    kernel = next(iter(k.module.kernels()))
    for req in module_requires(k.module):
        why = requirement_failure(kernel.symbol, req, sizes)
        if why:
            return dropped("requires", why)
    try:
        stats = k.asm["ptxas"]  # tkir.backend.toolchain.Assembled
    except (TkirError, NotImplementedError, KeyError) as e:
        return dropped("compile", f"backend: {e}")
    if max(stats.spill_stores, stats.spill_loads) > SPILL_LIMIT_BYTES:
        return dropped("ptxas", f"ptxas: {stats.registers} registers, {stats.spill_stores} bytes spilled to "
                                f"local memory")
    occ = kernel.attrs.get("occupancy") or {}
    pred = predict(api.build_module(path, consts), sizes, int(occ.get("blocks_per_sm", 1)), int(occ.get("stages", 1)),
                   stream_k=kernel.attrs.get("stream_k"), cluster=int(kernel.attrs.get("cluster") or 1))
    launch = json.dumps(k.launch.to_json(), sort_keys=True)
    code = hashlib.sha256((k.asm["ptx"] + "\0" + launch).encode()).hexdigest()
    return {"stage": "", "reason": None, "prediction": pred.as_dict(), "code": code}


def _message(e: CompileError) -> str:
    text = e.format() if hasattr(e, "format") else str(e)
    first = text.splitlines()[0] if text else str(e)
    return first.split("error: ", 1)[-1]


# --- 4: timing -----------------------------------------------------------------------------------


def tune_sets(comp, sizes: dict[str, int], consts: dict) -> int:
    """Input sets the tuner rotates through: TUNE_SETS."""
    return TUNE_SETS


def time_points(path: str, sizes: dict[str, int], cands: list[Candidate], *, target: str, passes: str | None,
                reps: int, device_index: int | None = None, companion=None, refine: bool = True,
                first_round: bool = True) -> None:
    """Check every kept point against the companion's reference, then time them interleaved (torch),
    and time the nearest to the best again (`refine`; the multi-GPU workers do not: each sees only its
    share of the points). `companion`: one to use instead of the kernel's own (e.g. with torch_inputs).
    `first_round=False`: the points given are already timed (status "timed", by the multi-GPU workers) and
    are all timed again, as one group on this GPU (_time_on_gpus' second round)."""
    import torch

    from tkir import api
    from tkir.tools.examples import load_companion

    comp = companion if companion is not None else load_companion(path)
    kept = [c for c in cands if c.status == ("kept" if first_round else "timed")]
    if not kept:
        return
    consts0 = kept[0].consts
    nsets = tune_sets(comp, sizes, consts0)
    if hasattr(comp, "torch_inputs"):
        sets = [comp.torch_inputs(sizes, consts0) for _ in range(nsets)]
        ref = comp.torch_reference(sets[0], sizes, consts0)
    else:
        import numpy as np

        rng = np.random.default_rng()
        host = [comp.make_inputs(rng, sizes, consts0) for _ in range(nsets)]
        sets = [[timing.to_torch(torch, a) for a in h] for h in host]
        ref = {n: torch.from_numpy(r) for n, r in comp.reference(host[0], sizes, consts0).items()}
    outs = [comp.PARAMS.index(n) for n in ref]
    kernels = {}
    for c in kept:
        k = api.compile(path, target=target, passes=passes, **c.consts)
        for i in outs:
            sets[0][i].fill_(float("nan"))
        k(*sets[0])
        torch.cuda.synchronize()
        errs = {}
        for name, r in ref.items():
            out = sets[0][comp.PARAMS.index(name)]
            errs[name] = timing.rel_err(torch, out.cpu() if r.device.type == "cpu" else out, r)
        from tkir.tools.examples import worst

        c.rel_err, bound, ok = worst(comp, errs)  # each output at its own bound
        if not ok:
            c.status, c.stage = "dropped", "check"
            c.reason = f"wrong result: rel err {c.rel_err:.2e} > {bound}"
            continue
        kernels[id(c)] = k
    good = [c for c in kept if id(c) in kernels]
    def launcher(k):
        return lambda i: (lambda: k(*sets[i]))

    if first_round:
        fns = [launcher(kernels[id(c)]) for c in good]
        for c, ms in zip(good, timing.time_pair_ms(torch, fns, nsets, reps, 3) if fns else [], strict=True):
            c.ms, c.status, c.device = ms, "timed", device_index
        near = refine_candidates(good) if refine else []
    else:
        near = good if len(good) > 1 else []
    if near:
        again = timing.time_pair_ms(torch, [launcher(kernels[id(c)]) for c in near], nsets,
                                    REFINE_REPS_FACTOR * reps, 3)
        for c, ms in zip(near, again, strict=True):
            c.again_ms = ms


def refine_candidates(timed: list[Candidate]) -> list[Candidate]:
    """The points of a first round to time again: those within REFINE_WITHIN of the best median, the
    fastest REFINE_TOP of them; none where fewer than two qualify."""
    if not timed:
        return []
    best = min(c.ms for c in timed)
    near = sorted((c for c in timed if c.ms <= REFINE_WITHIN * best), key=lambda c: c.ms)[:REFINE_TOP]
    return near if len(near) > 1 else []


def best_candidate(timed: list[Candidate]) -> Candidate | None:
    """The fastest point: among those timed again (again_ms set), by the second round; else by the first.
    The rounds are not compared with each other: the clocks drift between them (measured: a 4096^3 GEMM's
    re-timed points ran about 11% slower in the second round than in the first)."""
    if not timed:
        return None
    again = [c for c in timed if c.again_ms is not None]
    if again:
        return min(again, key=lambda c: c.again_ms)
    return min(timed, key=lambda c: c.ms)


def _time_on_gpus(path: str, sizes: dict, cands: list[Candidate], *, target: str, passes: str | None,
                  reps: int, ngpus: int) -> None:
    """Split the kept points over `ngpus` GPUs, one worker process each (CUDA_VISIBLE_DEVICES)."""
    kept = [c for c in cands if c.status == "kept"]
    groups = [kept[g::ngpus] for g in range(ngpus)]
    procs = []
    with tempfile.TemporaryDirectory(prefix="tkir-tune-") as tmp:
        for g, group in enumerate(groups):
            if not group:
                continue
            # the spec goes in a file, not a pipe: every worker must start before any is waited for
            # (writing stdin, closing it, then communicate() raised "I/O operation on
            # closed file" on the first two-GPU machine tkir ran on)
            spec = _write_spec(Path(tmp) / f"gpu{g}.json", path, sizes, target, passes, reps, g, group)
            env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(g))
            p = subprocess.Popen([*WORKER_CMD, str(spec)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=env)
            procs.append((g, p, group))
        for g, p, group in procs:
            out, err = p.communicate()
            if p.returncode != 0:
                raise TkirError(f"tune worker on GPU {g} failed: {err.strip()[-2000:]}")
            for c, d in zip(group, json.loads(out), strict=True):
                c.__dict__.update(d)
        # the second round, as on one GPU: the points near the best of all the workers' first rounds, timed
        # again together on GPU 0 (each worker saw only its share, and a first round is a screen: docs/bench/README.md)
        near = refine_candidates([c for c in kept if c.status == "timed"])
        if near:
            spec = _write_spec(Path(tmp) / "refine.json", path, sizes, target, passes, reps, 0, near,
                               refine_only=True)
            p = subprocess.run([*WORKER_CMD, str(spec)], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                               env=dict(os.environ, CUDA_VISIBLE_DEVICES="0"))
            if p.returncode != 0:
                raise TkirError(f"tune worker (second round, GPU 0) failed: {p.stderr.strip()[-2000:]}")
            for c, d in zip(near, json.loads(p.stdout), strict=True):
                c.again_ms = d.get("again_ms")
                if d.get("status") == "dropped":
                    c.status, c.stage, c.reason = "dropped", d.get("stage"), d.get("reason")


def _write_spec(spec: Path, path: str, sizes: dict, target: str, passes: str | None, reps: int, device: int,
                cands: list[Candidate], refine_only: bool = False) -> Path:
    """A timing worker's spec file (its points and how to time them), for `WORKER_CMD spec`."""
    spec.write_text(json.dumps({"path": path, "sizes": sizes, "target": target, "passes": passes, "reps": reps,
                                "device": device, "refine_only": refine_only,
                                "candidates": [asdict(c) for c in cands]}))
    return spec


# The command of a timing worker (one per GPU); the spec file's path is appended.
WORKER_CMD = [sys.executable, "-m", "tkir.tools.tune", "--worker"]


def _worker() -> int:
    spec = json.loads(Path(sys.argv[sys.argv.index("--worker") + 1]).read_text())
    cands = [Candidate(**c) for c in spec["candidates"]]
    second = bool(spec.get("refine_only"))
    time_points(spec["path"], spec["sizes"], cands, target=spec["target"], passes=spec["passes"],
                reps=spec["reps"], device_index=spec["device"], refine=second, first_round=not second)
    print(json.dumps([asdict(c) for c in cands]))
    return 0


# --- 5: the cache, and the whole run -------------------------------------------------------------


def cache_key(path: str, sizes: dict, *, fixed: dict | None, target: str, passes: str | None, device: str) -> str:
    from tkir.api import compiler_digest
    from tkir.backend import cache
    from tkir.source_text import read_source

    source = hashlib.sha256(read_source(path).encode()).hexdigest()
    versions = dict(cache.tool_versions(), compiler=compiler_digest())
    what = json.dumps({"tune": source, "bucket": size_bucket(sizes), "device": device, "passes": passes},
                      sort_keys=True)
    return cache.make_key(what, dict(fixed or {}), {"passes": passes}, target, versions)


def gpu_name() -> str:
    from cuda.bindings import driver as cu

    from tkir.backend import cuda

    cuda.context()
    dev = cuda.check(cu.cuDeviceGet(cuda.DEVICE), "cuDeviceGet")
    name = cuda.check(cu.cuDeviceGetName(256, dev), "cuDeviceGetName")
    return name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)


def gpu_count() -> int:
    from cuda.bindings import driver as cu

    from tkir.backend import cuda

    cuda.context()
    return int(cuda.check(cu.cuDeviceGetCount(), "cuDeviceGetCount"))


def tune(path: str, sizes: dict[str, int], *, fixed: dict | None = None, target: str = "sm_90a",
         passes: str | None = None, reps: int = DEFAULT_REPS, jobs: int | None = None, force: bool = False,
         progress=None, companion=None) -> TuneResult:
    """Steps 1-5 (see the module docstring); reads the cache first unless `force`. `companion`: time with
    this companion instead of the kernel's own (one GPU; the multi-GPU workers load the kernel's own)."""
    from tkir.backend import cache

    device = gpu_name()
    key = cache_key(path, sizes, fixed=fixed, target=target, passes=passes, device=device)
    if not force:
        hit = cache.get(key, required=(CACHE_ARTIFACT,))
        if hit is not None:
            result = TuneResult.from_dict(hit[CACHE_ARTIFACT])
            result.cached = True
            return result
    cands = plan(path, sizes, fixed=fixed, target=target, passes=passes, jobs=jobs, progress=progress)
    ngpus = gpu_count()
    if ngpus > 1:
        _time_on_gpus(path, sizes, cands, target=target, passes=passes, reps=reps, ngpus=ngpus)
    else:
        extra = {} if companion is None else {"companion": companion}
        time_points(path, sizes, cands, target=target, passes=passes, reps=reps, device_index=0, **extra)
    timed = [c for c in cands if c.status == "timed"]
    chosen = best_candidate(timed)
    best = chosen.consts if chosen else None
    from tkir.tools.examples import load_companion

    flops = load_companion(path).flops(sizes, best or cands[0].consts)
    notes = [f"timed on {ngpus} GPUs (points split over them)"] if ngpus > 1 else []
    result = TuneResult(str(path), dict(sizes), size_bucket(sizes), best, cands, key, False, device, flops, notes)
    if best is not None:
        cache.put(key, {CACHE_ARTIFACT: result.as_dict()})
    return result


def lookup(path: str, sizes: dict[str, int], *, fixed: dict | None = None, target: str = "sm_90a",
           passes: str | None = None) -> dict | None:
    """The cached best consts for these sizes' bucket on this GPU, or None (never times anything)."""
    from tkir.backend import cache

    key = cache_key(path, sizes, fixed=fixed, target=target, passes=passes, device=gpu_name())
    hit = cache.get(key, required=(CACHE_ARTIFACT,))
    return None if hit is None else hit[CACHE_ARTIFACT].get("best")


# --- the table -----------------------------------------------------------------------------------


def format_result(r: TuneResult, *, dry_run: bool = False) -> str:
    cands = r.candidates
    timed = r.timed()
    kept = [c for c in cands if c.status in ("kept", "timed")]
    pred_rank = dict(zip(map(id, kept), ranks([c.predicted_ms for c in kept]), strict=True)) if kept else {}
    meas_rank = dict(zip(map(id, timed), ranks([c.ms for c in timed]), strict=True)) if timed else {}
    size = " ".join(f"{k}={v}" for k, v in r.sizes.items())
    by_stage: dict[str, int] = {}
    for c in cands:
        if c.status == "dropped":
            by_stage[c.stage] = by_stage.get(c.stage, 0) + 1
    head = (f"tune {Path(r.path).name} at {size} (bucket "
            + " ".join(f"{k}={v}" for k, v in r.bucket.items()) + ")" + (f" on {r.device}" if r.device else ""))
    lines = [head, f"{len(cands)} points: " + ", ".join(f"{n} dropped by {s}" for s, n in by_stage.items())
             + (", " if by_stage else "") + (f"{len(kept)} kept (not timed: --dry-run)" if dry_run
                                              else f"{len(timed)} timed")]
    if r.cached:
        lines.append("from the cache: nothing was timed (tkc tune --force times again)")
    cols = ["point", "predicted ms", "pred rank"] + ([] if dry_run else ["measured ms", "rank", "TFLOP/s", "rel_err"])
    rows = []
    for c in sorted(kept, key=lambda c: (c.ms is None, c.ms or 0, c.predicted_ms)):
        row = [c.label(), f"{c.predicted_ms:.4f}", f"{pred_rank[id(c)]:g}"]
        if not dry_run:
            tf = f"{r.flops / c.ms / 1e9:.1f}" if c.ms and r.flops else "-"
            row += [f"{c.ms:.4f}" if c.ms else "-", f"{meas_rank[id(c)]:g}" if id(c) in meas_rank else "-", tf,
                    f"{c.rel_err:.1e}" if c.rel_err is not None else "-"]
        rows.append(row)
    widths = [max(len(x) for x in col) for col in zip(cols, *rows, strict=True)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(cols, widths, strict=True)).rstrip())
    lines += ["  ".join(x.ljust(w) for x, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    dropped = [c for c in cands if c.status == "dropped"]
    if dropped:
        lines.append("dropped:")
        lines += [f"  {c.label()}: [{c.stage}] {c.reason}" for c in dropped]
    if not dry_run:
        rho = r.rho()
        lines.append("model vs measurement: Spearman rho " + (f"{rho:.2f}" if rho is not None else "n/a")
                     + f" over {len(timed)} timed points")
        again = [c for c in timed if c.again_ms is not None]
        if again:
            lines.append(f"timed again (within {100 * (REFINE_WITHIN - 1):.0f}% of the best, {REFINE_REPS_FACTOR}x the "
                         "runs, in a group of their own; the best is chosen by this run): "
                         + ", ".join(f"{c.label()} {c.ms:.4f} -> {c.again_ms:.4f}" for c in again))
        if r.best:
            best = next(c for c in timed if c.consts == r.best)
            where = f", cached under {r.key[:16]}..." if r.key else ""
            second = f"; {best.again_ms:.4f} ms when timed again" if best.again_ms is not None else ""
            lines.append(f"best: {best.label()} ({best.ms:.4f} ms{second}){where}")
    lines += r.notes
    return "\n".join(lines)


def dry_run(path: str, sizes: dict[str, int], *, fixed: dict | None = None, target: str = "sm_90a",
            passes: str | None = None, jobs: int | None = None, progress=None) -> TuneResult:
    """Steps 1-3 only (no GPU): what would be timed, and what the model predicts."""
    cands = plan(path, sizes, fixed=fixed, target=target, passes=passes, jobs=jobs, progress=progress)
    return TuneResult(str(path), dict(sizes), size_bucket(sizes), None, cands, None)


# --- the Python API ------------------------------------------------------------------------------


# Argument shapes a TunedKernel remembers the chosen kernel for (the shapes seen recently).
SHAPES_CACHE = 256


class TunedKernel:
    """A kernel whose consts are chosen per call from the tuning cache (see the module docstring)."""

    def __init__(self, path: str, *, target: str = "sm_90a", passes: str | None = None,
                 tune_on_miss: bool = False, reps: int = DEFAULT_REPS, **fixed: int | float):
        self.path, self.target, self.passes = str(path), target, passes
        self.fixed, self.tune_on_miss, self.reps = dict(fixed), tune_on_miss, reps
        read_space(self.path)  # a kernel without @tune is an error now, not at the first call
        self._kernels: dict[tuple, object] = {}
        self._choice: dict[tuple, dict] = {}
        # the tensor arguments' shapes -> (consts, kernel): the sizes, their bucket and the choice depend on
        # the shapes alone, so a call with shapes seen before skips all three
        self._by_shapes: dict[tuple, tuple[dict, object]] = {}
        self._shape_reader: _ShapeReader | None = None
        self.last_consts: dict | None = None

    def compiled(self, consts: dict):
        from tkir import api

        key = tuple(sorted(consts.items()))
        if key not in self._kernels:
            self._kernels[key] = api.compile(self.path, target=self.target, passes=self.passes, **consts)
        return self._kernels[key]

    def sizes_of(self, args: tuple) -> dict[str, int]:
        """The problem sizes these arguments give (checked as a launch would check them)."""
        from tkir.backend.runtime import _bind_sizes, _check_later_dims, describe_array

        launch = self.compiled(self.fixed).launch
        tensors = launch.tensors
        if len(args) != len(tensors) + len(launch.scalars):
            from tkir.backend.runtime import LaunchError

            names = [t.name for t in tensors] + [s.name for s in launch.scalars]
            raise LaunchError(f"{launch.kernel} takes {len(names)} arguments ({', '.join(names)}), got {len(args)}")
        arrays = {t.name: describe_array(a, f"{launch.kernel}: argument '{t.name}'")
                  for t, a in zip(tensors, args, strict=False)}
        sizes, later = _bind_sizes(launch.kernel, tensors, arrays)
        _check_later_dims(launch.kernel, later, sizes)
        return sizes

    def config_for(self, sizes: dict[str, int]) -> dict:
        """The consts a call at these sizes launches: tuned (cache), tuned now, or the defaults."""
        bucket = tuple(sorted(size_bucket(sizes).items()))
        if bucket not in self._choice:
            best = lookup(self.path, sizes, fixed=self.fixed, target=self.target, passes=self.passes)
            if best is None and self.tune_on_miss:
                best = tune(self.path, sizes, fixed=self.fixed, target=self.target, passes=self.passes,
                            reps=self.reps).best
            self._choice[bucket] = best if best is not None else dict(self.fixed)
        return self._choice[bucket]

    def __call__(self, *args: object, stream: int | None = None) -> None:
        reader = self._shape_reader
        key = reader(args) if reader is not None else self._shapes(args)
        hit = self._by_shapes.get(key) if key is not None else None
        if hit is None:
            sizes = self.sizes_of(args)
            consts = self.config_for(sizes)
            # consts still `auto` (a cache miss on a kernel that declares them): the compiler's choice for the sizes
            hit = (consts, self.compiled(consts).for_sizes(sizes).launcher())
            if key is not None:
                if len(self._by_shapes) >= SHAPES_CACHE:
                    self._by_shapes.pop(next(iter(self._by_shapes)))
                self._by_shapes[key] = hit
        self.last_consts = hit[0]
        hit[1](*args, stream=stream)

    def _shapes(self, args: tuple) -> tuple | None:
        """The tensor arguments' shapes, or None where the call does not fit the kernel (`sizes_of` then
        says why)."""
        if self._shape_reader is None:
            self._shape_reader = _ShapeReader(self.compiled(self.fixed).launch)
        return self._shape_reader(args)


class _ShapeReader:
    """The shapes a call's sizes come from, as the launch reads them: torch tensors through `.shape`, other
    objects through tkir.backend.runtime.describe_array; None for a call with the wrong number of
    arguments or an argument that is no tensor.

    Only the tensors that first bind each size name are read (layernorm's X gives N and D; W, B and Y add
    nothing): the choice depends on the sizes alone, and the launch checks every argument's shape against
    them anyway. Where a size name appears only inside an expression dim, every tensor is read."""

    def __init__(self, launch):  # a tkir.backend.launch.LaunchDescription
        from tkir.backend.runtime import LaunchError, describe_array, is_torch_tensor

        self.count = len(launch.tensors) + len(launch.scalars)
        self.is_torch_tensor, self.describe_array, self.error = is_torch_tensor, describe_array, LaunchError
        self.read = _size_readers(launch.tensors)

    def __call__(self, args: tuple) -> tuple | None:
        if len(args) != self.count:
            return None
        shapes = []
        for i in self.read:
            a = args[i]
            if self.is_torch_tensor(a):
                shapes.append(a.shape)  # a torch.Size: a tuple
                continue
            try:
                shapes.append(self.describe_array(a, "argument").shape)
            except self.error:
                return None
        return tuple(shapes)


def _size_readers(tensors) -> tuple[int, ...]:  # tensors: the launch description's TensorArgs
    """The indices of the tensors whose plain dims first bind every size name (in argument order); all of
    them where some name occurs only inside an expression such as `D / 2`."""
    from tkir import symexpr

    bound: set[str] = set()
    used: set[str] = set()
    read = []
    for i, t in enumerate(tensors):
        plain = {d for d in t.dims if isinstance(d, str) and d.isidentifier()}
        used |= {n for d in t.dims if isinstance(d, str) for n in symexpr.names(d)}
        if plain - bound:
            read.append(i)
            bound |= plain
    return tuple(read) if used <= bound else tuple(range(len(tensors)))


def autotune(path: str, *, target: str = "sm_90a", passes: str | None = None, tune_on_miss: bool = False,
             reps: int = DEFAULT_REPS, **fixed: int | float) -> TunedKernel:
    """A kernel that launches, for each call's shapes, the configuration `tkc tune` found best."""
    return TunedKernel(path, target=target, passes=passes, tune_on_miss=tune_on_miss, reps=reps, **fixed)


if __name__ == "__main__" and "--worker" in sys.argv:
    sys.exit(_worker())
