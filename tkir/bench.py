"""`tkc bench` and `tkc run` on the GPU: correctness on fresh random inputs, then timing against a peer.

For each size: compile, draw fresh random inputs (outputs poisoned with NaN), run once and compare
with the companion's reference by ||out - ref|| / ||ref||; then time the tkir kernel and its peer
(torch) in the same process with CUDA events, interleaved run by run (tkir, peer, tkir, peer, ...)
so drift in clocks or temperature falls on both: warm-up, the median of `reps` runs, inputs rotated
over enough sets that their bytes exceed 3x the 60 MB L2 and a 256 MB buffer zeroed before each run,
so every run starts from a cold cache (METHOD.md). Needs torch and a CUDA GPU (imported when timing).
A driver beside the CLI: tkir/cli.py parses the flags, and every function here takes plain values
(sizes, constants, `compile_kw`: keyword arguments of tkir.compile).

Companion hooks (examples/<name>.py): BENCH_SIZES, BENCH_CONSTS, flops(), bytes_moved(),
torch_inputs(sizes, consts) -> list of tensors (outputs NaN), torch_reference(inputs, sizes, consts)
-> {output: tensor}, peer(inputs, sizes, consts) -> a zero-argument callable, PEER (its name).
Optional: EXTRA_PEERS (names) and extra_peer(name, inputs, sizes, consts) -> a zero-argument
callable: more peers timed interleaved in the same run, each with its own ratio column.
Correctness alone, without torch (tkir DeviceArrays, the numpy `make_inputs` and `reference`): tkir/check.py.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from tkir.diagnostics import TkirError

L2_BYTES = 60 * 2**20        # H200 L2 (KINDS.md: PyTorch reported 60 MB)
ROTATE_FACTOR = 3            # rotated input bytes >= 3 x L2
MAX_ROTATE_SETS = 16
WARMUP_S = 0.25             # seconds of warm-up runs per timed group (clocks ramp up; METHOD.md: warm up first)
WARMUP_MAX_ROUNDS = 2000
FLUSH_BYTES = 256 * 2**20    # zeroed before every timed run: > 4x the L2
# GPU-side lead before each timed run's start event: torch.cuda._sleep spins this many SM clock
# cycles (~100 us at the H200's 1.98 GHz boost), so the host has flush + lead (~175 us of GPU work)
# to enqueue the timed call. One sweep saw tkir's small kernels at 6-9 us in one run and 14-37 us in
# another: Python launch paths that outran the ~75 us flush were timed as kernel time (METHOD.md:
# shrink launch gaps out of the measurement; every peer gets the same lead). It was raised from
# 200,000 to 1,000,000 (~0.5 ms): torch.compile's host path took 50-270 us per call on that machine, and
# its timings at N = 1 and 128 came out at about that host time (a 3.8 us kernel timed at 63 us).
HOST_LEAD_CYCLES = 1_000_000
# Without torch.cuda._sleep (a private API) the lead is this many more zeroings of the flush buffer
# (~75 us each on the H200).
FALLBACK_LEAD_FLUSHES = 6
ROTATE_BUDGET = 24 * 2**30   # never allocate more than this for rotation
# With up to this many kernels in one interleaved group the reps round up to a multiple of them, so each
# runs equally often in each position (a bench: tkir and its peers). A tune space times tens or hundreds
# of kernels in one group: rounding 20 reps up to 132 (layernorm at D = 768 in the sweep) cost
# ~10 s a point in host leads and flushes and ~10 minutes at 600 kernels, where the rotation alone
# already puts each kernel first in at most one of its 20 reps, which no median notices.
ROTATE_FULL_MAX = 8


@dataclass
class Row:
    kernel: str
    sizes: dict
    consts: dict
    variant: str
    rel_err: float
    bound: float
    ok: bool
    ms: float
    peer_ms: float | None
    peer: str
    flops: int
    bytes: int
    copy_gbps: float | None = None  # memory-bound kernels: copy bandwidth measured in the same run
    extra_ms: dict | None = None    # EXTRA_PEERS: name -> median ms, timed in the same run
    host_us: dict | None = None     # host time per call to enqueue (tkir, the peer, extra peers): not in `ms`
    tune_note: str | None = None    # `tkc bench --tune`: the consts the tuner chose and its timings

    def extra_ratio(self, name: str) -> float | None:
        """How many times faster than the extra peer `name` (its ms / ours)."""
        theirs = (self.extra_ms or {}).get(name)
        return theirs / self.ms if theirs and self.ms else None

    @property
    def tflops(self) -> float:
        return self.flops / self.ms / 1e9 if self.ms else 0.0

    @property
    def gbps(self) -> float:
        return self.bytes / self.ms / 1e6 if self.ms else 0.0

    @property
    def peer_tflops(self) -> float | None:
        return self.flops / self.peer_ms / 1e9 if self.peer_ms else None

    @property
    def ratio(self) -> float | None:
        return self.peer_ms / self.ms if self.peer_ms and self.ms else None

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(tflops=self.tflops, gbps=self.gbps, peer_tflops=self.peer_tflops, ratio=self.ratio)
        return d


def _rel_err(torch, out, ref) -> float:
    o, r = out.double(), ref.double()
    if torch.isnan(o).any():
        return math.inf
    return float((o - r).norm() / r.norm())


_FLUSH: list = []


def _flush_buffer(torch):
    if not _FLUSH:
        _FLUSH.append(torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda"))
    return _FLUSH[0]


def _to_torch(torch, a):
    """A numpy array (ml_dtypes bf16 included) as a CUDA tensor of the same dtype."""
    import ml_dtypes
    import numpy as np

    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


_INDUCTOR: dict = {}


def inductor(math):
    """`torch.compile(math)` (Inductor), made once per function: the peer a user who fuses with the
    compiler would pick (issue 15). Its guards recompile for new shapes; warm-up runs absorb that."""
    import torch

    if math not in _INDUCTOR:
        _INDUCTOR[math] = torch.compile(math, dynamic=False)
    return _INDUCTOR[math]


def copy_bandwidth(torch, nbytes: int = 2**30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written), median of `reps`."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = time_ms(torch, lambda i: (lambda: dst.copy_(src)), 1, reps, 3)
    return 2 * nbytes / ms / 1e6


def time_ms(torch, fn_for_set, nsets: int, reps: int, warmup: int) -> float:
    """Median milliseconds of fn_for_set(i % nsets)() over `reps` runs, each timed with CUDA events.

    Before each run a 256 MB buffer is zeroed (as triton.testing.do_bench does), which evicts the L2,
    and the GPU then spins HOST_LEAD_CYCLES: both keep it busy while the host enqueues the timed call,
    so host launch overhead is not timed (it is GPU time per launch, for tkir and peers alike).
    """
    return time_pair_ms(torch, [fn_for_set], nsets, reps, warmup)[0]


def time_pair_ms(torch, fns_for_set: list, nsets: int, reps: int, warmup: int, rotate: bool = True) -> list[float]:
    """Median milliseconds of each of several kernels, timed *interleaved*: each rep runs every kernel
    once, each after its own L2 flush and with its own CUDA events, so clock and temperature drift
    during the run touch every kernel alike (METHOD.md: compare versions in one run).

    The order rotates from rep to rep (rep i starts with kernel i mod K) and, for K <= ROTATE_FULL_MAX, the
    reps are rounded up to a multiple of K, so every kernel runs equally often in every position (with
    more kernels each is first in at most ceil(reps / K) of its reps). Measured on the H200 (docs/bench/README.md,
    "Method"): the same ~4 us row kernel timed twice per rep in a fixed order ran
    1.11-1.15x faster second than first (0.999x at 68 us); rotated, 1.004-1.021x. The kernels of one rep
    read the same input set, so the likely cause is the first one warming what the L2 flush does not
    evict (address translations). `rotate=False` is the fixed order used before, which put tkir
    first against its peers in every comparison."""
    flush = _flush_buffer(torch)
    # warm-up: at least `warmup` rounds and WARMUP_S seconds, so an idle GPU's clocks have ramped up
    # before the first timed run (an H200 idles at 345 MHz; a few short kernels do not wake it)
    start_s, i = time.perf_counter(), 0
    while i < warmup or (time.perf_counter() - start_s < WARMUP_S and i < WARMUP_MAX_ROUNDS):
        for f in fns_for_set:
            flush.zero_()
            f(i % nsets)()
        i += 1
        if i >= warmup:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    times: list[list[float]] = [[] for _ in fns_for_set]
    count = len(fns_for_set)
    if rotate and count <= ROTATE_FULL_MAX:
        reps = -(-reps // count) * count
    for i in range(reps):
        order = [(i + j) % count for j in range(count)] if rotate else range(count)
        for k in order:
            f = fns_for_set[k]
            fn = f(i % nsets)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.zero_()
            _host_lead(torch, flush)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times[k].append(start.elapsed_time(end))
    return [statistics.median(t) for t in times]


HOST_CALLS = 50  # calls per kernel when measuring host time per launch


def host_us_per_call(torch, fns_for_set: list, nsets: int, calls: int = HOST_CALLS) -> list[float]:
    """Microseconds of host time per call of each kernel (enqueue only: the calls run back to back
    without a synchronize, the GPU drains them afterwards). The timings above leave this out, for
    every side alike; it is reported beside them, since a launch-bound problem pays it."""
    out = []
    for f in fns_for_set:
        fns = [f(i % nsets) for i in range(calls)]
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for fn in fns:
            fn()
        out.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return out


def _host_lead(torch, flush) -> None:
    """Keep the GPU busy for HOST_LEAD_CYCLES after the flush, so the start event is reached only after
    the host has enqueued the timed call (its Python launch path is then not in the timing); without
    torch.cuda._sleep, FALLBACK_LEAD_FLUSHES more zeroings of the flush buffer."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(HOST_LEAD_CYCLES)
    else:
        for _ in range(FALLBACK_LEAD_FLUSHES):
            flush.zero_()


def rotation_sets(nbytes: int) -> int:
    """Input sets a timing rotates through for a kernel that moves `nbytes`: enough that the sets together
    are ROTATE_FACTOR x the L2 (each run then reads inputs the previous runs did not leave in L2), at least
    2, at most MAX_ROTATE_SETS and ROTATE_BUDGET bytes."""
    return max(2, min(MAX_ROTATE_SETS, math.ceil(ROTATE_FACTOR * L2_BYTES / max(nbytes, 1)),
                      max(1, ROTATE_BUDGET // max(nbytes, 1))))


def bench_one(path: str, companion, sizes: dict, consts: dict, *, reps: int = 20, warmup: int = 5,
              variant: str = "tkir", compile_kw: dict | None = None, peer: bool = True,
              kernel: object | None = None) -> Row:
    """`kernel`: a compiled kernel to time in place of compiling `path` (anything callable on the inputs
    with a `consts` dict: an A/B of PTX another compiler made, scripts/bench/ab.py)."""
    import torch

    import tkir

    k = kernel if kernel is not None else tkir.compile(path, **(compile_kw or {}), **consts)
    nbytes = companion.bytes_moved(sizes, consts)
    nsets = rotation_sets(nbytes)
    if hasattr(companion, "torch_inputs"):
        sets = [companion.torch_inputs(sizes, consts) for _ in range(nsets)]
        host = None
    else:  # the companion's numpy inputs (fresh random, outputs NaN), copied to the GPU
        import numpy as np

        rng = np.random.default_rng()
        host = companion.make_inputs(rng, sizes, consts)
        sets = [[_to_torch(torch, a) for a in host]]
        sets += [[_to_torch(torch, a) for a in companion.make_inputs(rng, sizes, consts)]
                 for _ in range(nsets - 1)]
    # correctness first, on the first set (fresh random inputs, NaN-poisoned outputs)
    k(*sets[0])
    torch.cuda.synchronize()
    if host is None:
        ref = companion.torch_reference(sets[0], sizes, consts)
    else:
        ref = {n: torch.from_numpy(r) for n, r in companion.reference(host, sizes, consts).items()}
    errs = []
    for name, r in ref.items():
        out = sets[0][companion.PARAMS.index(name)]
        errs.append(_rel_err(torch, out.cpu() if host is not None else out, r))
    err = max(errs)
    mine = lambda i: (lambda: k(*sets[i]))  # noqa: E731
    peer_ms = None
    extra: dict | None = None
    if peer:
        names = list(getattr(companion, "EXTRA_PEERS", {}) or {})
        fns = [mine, lambda i: companion.peer(sets[i], sizes, consts)]
        fns += [(lambda i, n=n: companion.extra_peer(n, sets[i], sizes, consts)) for n in names]
        ms, peer_ms, *more = time_pair_ms(torch, fns, nsets, reps, warmup)
        extra = dict(zip(names, more, strict=True)) if names else None
        host_time = dict(zip(["tkir", companion.PEER, *names], host_us_per_call(torch, fns, nsets), strict=True))
    else:
        ms = time_ms(torch, mine, nsets, reps, warmup)
        host_time = dict(zip(["tkir"], host_us_per_call(torch, [mine], nsets), strict=True))
    chosen = {n: k.consts.get(n, v) for n, v in consts.items()}  # `auto` consts: the values the compiler chose
    return Row(Path(path).stem, dict(sizes), chosen, variant, err, companion.TOLERANCE,
               err <= companion.TOLERANCE, ms, peer_ms, companion.PEER, companion.flops(sizes, consts),
               nbytes, extra_ms=extra, host_us=host_time)


def format_rows(rows: list[Row], memory_bound: bool = False) -> str:
    extras = list(dict.fromkeys(n for r in rows for n in (r.extra_ms or {})))
    head = ["kernel", "variant", "sizes", "tkir", "peer", "ratio"]
    head += [h for n in extras for h in (n, f"x{n}")] + ["rel_err", "ok"]
    unit = "GB/s" if memory_bound else "TFLOP/s"
    lines = []
    for r in rows:
        size = " ".join(f"{k}={v}" for k, v in {**r.sizes, **r.consts}.items())
        mine = r.gbps if memory_bound else r.tflops
        theirs = (r.bytes / r.peer_ms / 1e6 if memory_bound else r.peer_tflops) if r.peer_ms else None
        line = [r.kernel, r.variant, size, f"{mine:.1f}", f"{theirs:.1f}" if theirs else "-",
                f"{r.ratio:.3f}" if r.ratio else "-"]
        for n in extras:
            ems = (r.extra_ms or {}).get(n)
            val = (r.bytes / ems / 1e6 if memory_bound else r.flops / ems / 1e9) if ems else None
            ratio = r.extra_ratio(n)
            line += [f"{val:.1f}" if val else "-", f"{ratio:.3f}" if ratio else "-"]
        lines.append(line + [f"{r.rel_err:.2e}", "ok" if r.ok else "FAIL"])
    widths = [max(len(h), *(len(ln[i]) for ln in lines)) for i, h in enumerate(head)] if lines else []
    out = [f"({unit}; peer = {rows[0].peer if rows else ''})",
           "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True))]
    out += ["  ".join(c.ljust(w) for c, w in zip(ln, widths, strict=True)) for ln in lines]
    return "\n".join(out)


def plot_rows(rows: list[Row], out: str, memory_bound: bool = False) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = ["\n".join(f"{k}={v}" for k, v in {**r.sizes, **r.consts}.items()) for r in rows]

    def rate(ms: float | None, r: Row) -> float:
        return (r.bytes / ms / 1e6 if memory_bound else r.flops / ms / 1e9) if ms else 0.0

    extras = list(dict.fromkeys(n for r in rows for n in (r.extra_ms or {})))
    series = [("tkir", [rate(r.ms, r) for r in rows]),
              (rows[0].peer if rows else "peer", [rate(r.peer_ms, r) for r in rows])]
    series += [(n, [rate((r.extra_ms or {}).get(n), r) for r in rows]) for n in extras]
    x = range(len(rows))
    width = 0.8 / len(series)
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 4))
    for k, (name, vals) in enumerate(series):
        ax.bar([i - 0.4 + width * (k + 0.5) for i in x], vals, width, label=name)
    ax.set_xticks(list(x), labels, fontsize=7)
    ax.set_ylabel("GB/s" if memory_bound else "TFLOP/s")
    ax.set_title(f"{rows[0].kernel}: tkir vs " + ", ".join(n for n, _ in series[1:]) if rows else "")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def progress(items: list, what: str):
    try:
        from rich.progress import track

        return track(items, description=what)
    except ImportError:
        return items


def tuned_consts(path: str, sizes: dict, consts: dict, names: list[str], *, compile_kw: dict,
                 tune_kw: dict) -> tuple[dict, str]:
    """The row's consts with `names` chosen by the tuner (tkir.tune: the cached result for these sizes'
    bucket, or a tuning run), the row's other consts pinned (`auto` ones resolved by the compiler first);
    and a note naming the choice and what it was measured against."""
    import tkir
    from tkir import tune

    resolved = tkir.compile(path, **compile_kw, **{n: v for n, v in consts.items() if n not in names}).consts
    space = tune.read_space(path)  # every other const of the space pinned: only `names` vary
    fixed = {**{n: space.defaults[n] for n in space.values if n not in names},
             **{n: v for n, v in resolved.items() if n not in names}}
    result = tune.tune(path, sizes, fixed=fixed, **tune_kw)
    if result.best is None:
        raise TkirError(f"{Path(path).name} at {sizes}: no point of the tune space over {', '.join(names)} "
                        "compiled and checked; `tkc tune` with the same -D and --size says why")
    timed = sorted(result.timed(), key=lambda c: c.ms)
    note = ", ".join(f"{' '.join(f'{n}={c.consts[n]}' for n in names)}: {c.ms:.4f} ms" for c in timed)
    return {**fixed, **{n: result.best[n] for n in names}}, ("cached " if result.cached else "") + note


def run_bench(path: str, sizes_list: list[dict], consts_list: list[dict], *, reps: int, json_out: str | None,
              plot: str | None, compile_kw: dict, variant: str, tuned: list[str] | None = None,
              tune_kw: dict | None = None) -> list[Row]:
    from tkir.examples import load_companion

    companion = load_companion(path)
    rows = []
    cases = list(zip(sizes_list, consts_list, strict=True))
    notes = []
    for sizes, consts in progress(cases, f"bench {Path(path).name}"):
        note = None
        if tuned:
            consts, note = tuned_consts(path, sizes, consts, tuned, compile_kw=compile_kw, tune_kw=tune_kw or {})
            notes.append(f"  {' '.join(f'{k}={v}' for k, v in sizes.items())}: {note}")
        row = bench_one(path, companion, sizes, consts, reps=reps, compile_kw=compile_kw, variant=variant)
        row.tune_note = note
        rows.append(row)
    if tuned:
        print("\n".join([f"tuned per row ({', '.join(tuned)}; the tuner's own timings, fastest first):", *notes]))
    memory_bound = bool(getattr(companion, "MEMORY_BOUND", False))
    print(format_rows(rows, memory_bound))
    if memory_bound:
        import torch

        copy = copy_bandwidth(torch)
        for r in rows:
            r.copy_gbps = copy
        print(f"device-to-device copy, same run: {copy:.0f} GB/s; tkir reaches "
              + ", ".join(f"{100 * r.gbps / copy:.0f}%" for r in rows) + " of it")
    if json_out:
        Path(json_out).write_text(json.dumps([r.as_dict() for r in rows], indent=2) + "\n")
    if plot:
        plot_rows(rows, plot, memory_bound)
    return rows


def run_check(path: str, sizes: dict[str, int | float], consts: dict[str, int | float], *,
              compile_kw: dict) -> Row:
    """`tkc run FILE` on the GPU: one size (empty `sizes`: the companion's first CHECK_SIZES), fresh
    inputs, the reference comparison; prints one line and returns the row."""
    from tkir.examples import load_companion

    companion = load_companion(path)
    sizes = dict(sizes) or dict(companion.CHECK_SIZES[0])
    row = bench_one(path, companion, sizes, consts, reps=3, warmup=1, peer=False, compile_kw=compile_kw)
    size_txt = " ".join(f"{n}={v}" for n, v in sizes.items())
    print(f"{Path(path).name} [{size_txt}] on GPU: rel_err {row.rel_err:.3e} (bound {row.bound:.0e}) "
          f"{'ok' if row.ok else 'FAIL'}; {row.ms:.3f} ms")
    return row
