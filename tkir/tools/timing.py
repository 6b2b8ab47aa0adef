"""GPU timing shared by `tkc bench` (bench.py) and `tkc tune` (tune.py): one way to measure a kernel.

Every timed run starts from a cold cache and with the host out of the measurement: a 256 MB buffer is
zeroed before it (which evicts the 60 MB L2), the GPU then spins HOST_LEAD_CYCLES while the host
enqueues the call, and CUDA events around the call give its time. Several kernels compared with each
other are timed *interleaved* (`time_pair_ms`: each rep runs every kernel once, in an order that
rotates from rep to rep), so drift in clocks or temperature falls on all of them alike; inputs rotate
over enough sets (`rotation_sets`) that no run reads what the previous ones left in L2 (METHOD.md).
The host time per launch is measured apart (`host_us_per_call`), and correctness is ||out - ref|| /
||ref|| (`rel_err`). Needs torch and a CUDA GPU: every function takes the `torch` module as its first
argument, so importing this module imports neither.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

L2_BYTES = 60 * 2**20        # H200 L2 (KINDS.md: PyTorch reported 60 MB)
ROTATE_FACTOR = 3            # rotated input bytes >= 3 x L2
MAX_ROTATE_SETS = 16
WARMUP_S = 0.25             # seconds of warm-up runs per timed group (clocks ramp up; METHOD.md: warm up first)
WARMUP_MAX_ROUNDS = 2000
FLUSH_BYTES = 256 * 2**20    # zeroed before every timed run: > 4x the L2
# GPU-side lead before each timed run's start event: torch.cuda._sleep spins this many SM clock
# cycles (~100 us at the H200's 1.98 GHz boost), so the host has flush + lead (~175 us of GPU work)
# to enqueue the timed call. Without a lead, tkir's small kernels measured 6-9 us in one run and 14-37 us
# in another: Python launch paths that outran the ~75 us flush were timed as kernel time (METHOD.md:
# shrink launch gaps out of the measurement; every peer gets the same lead). Raised from 200,000 to
# 1,000,000 (~0.5 ms): torch.compile's host path took 50-270 us per call on one machine, and its timings
# at N = 1 and 128 came out at about that host time (a 3.8 us kernel timed at 63 us).
HOST_LEAD_CYCLES = 1_000_000
# Without torch.cuda._sleep (a private API) the lead is this many more zeroings of the flush buffer
# (~75 us each on the H200).
FALLBACK_LEAD_FLUSHES = 6
ROTATE_BUDGET = 24 * 2**30   # never allocate more than this for rotation
# With up to this many kernels in one interleaved group the reps round up to a multiple of them, so each
# runs equally often in each position (a bench: tkir and its peers). A tune space times tens or hundreds
# of kernels in one group: rounding 20 reps up to 132 (layernorm at D = 768 in the row sweep) cost
# ~10 s a point in host leads and flushes and ~10 minutes at 600 kernels, where the rotation alone
# already puts each kernel first in at most one of its 20 reps, which no median notices.
ROTATE_FULL_MAX = 8
HOST_CALLS = 50  # calls per kernel when measuring host time per launch

# A kernel to time, per input set: fn_for_set(i)() runs it once on set i.
KernelForSet = Callable[[int], Callable[[], object]]


def rel_err(torch: ModuleType, out: Any, ref: Any) -> float:
    """||out - ref|| / ||ref|| in float64; an output holding NaN (never written) is infinitely wrong."""
    o, r = out.double(), ref.double()
    if torch.isnan(o).any():
        return math.inf
    return float((o - r).norm() / r.norm())


_FLUSH: list = []  # the flush buffer, allocated on first use and kept for the process


def _flush_buffer(torch: ModuleType) -> Any:
    if not _FLUSH:
        _FLUSH.append(torch.empty(FLUSH_BYTES // 4, dtype=torch.int32, device="cuda"))
    return _FLUSH[0]


def to_torch(torch: ModuleType, a: Any) -> Any:
    """A numpy array (ml_dtypes bf16 included) as a CUDA tensor of the same dtype."""
    import ml_dtypes
    import numpy as np

    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).cuda()
    return torch.from_numpy(np.ascontiguousarray(a)).cuda()


def copy_bandwidth(torch: ModuleType, nbytes: int = 2**30, reps: int = 20) -> float:
    """Device-to-device copy bandwidth in GB/s (bytes read + bytes written), median of `reps`."""
    src = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = time_ms(torch, lambda i: (lambda: dst.copy_(src)), 1, reps, 3)
    return 2 * nbytes / ms / 1e6


def time_ms(torch: ModuleType, fn_for_set: KernelForSet, nsets: int, reps: int, warmup: int) -> float:
    """Median milliseconds of fn_for_set(i % nsets)() over `reps` runs, each timed with CUDA events.

    Before each run a 256 MB buffer is zeroed (as triton.testing.do_bench does), which evicts the L2,
    and the GPU then spins HOST_LEAD_CYCLES: both keep it busy while the host enqueues the timed call,
    so host launch overhead is not timed (it is GPU time per launch, for tkir and peers alike).
    """
    return time_pair_ms(torch, [fn_for_set], nsets, reps, warmup)[0]


def time_pair_ms(torch: ModuleType, fns_for_set: list[KernelForSet], nsets: int, reps: int, warmup: int,
                 rotate: bool = True) -> list[float]:
    """Median milliseconds of each of several kernels, timed *interleaved*: each rep runs every kernel
    once, each after its own L2 flush and with its own CUDA events, so clock and temperature drift
    during the run touch every kernel alike (METHOD.md: compare versions in one run).

    The order rotates from rep to rep (rep i starts with kernel i mod K) and, for K <= ROTATE_FULL_MAX, the
    reps are rounded up to a multiple of K, so every kernel runs equally often in every position (with
    more kernels each is first in at most ceil(reps / K) of its reps). Measured on the H200: the same
    ~4 us row kernel timed twice per rep in a fixed order ran 1.11-1.15x faster second than first
    (0.999x at 68 us); rotated, 1.004-1.021x. The kernels of one rep read the same input set, so the
    likely cause is the first one warming what the L2 flush does not evict (address translations).
    `rotate=False` is the fixed order the timings used before, which put tkir first against its peers in
    every comparison."""
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


def host_us_per_call(torch: ModuleType, fns_for_set: list[KernelForSet], nsets: int,
                     calls: int = HOST_CALLS) -> list[float]:
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


def _host_lead(torch: ModuleType, flush: Any) -> None:
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
