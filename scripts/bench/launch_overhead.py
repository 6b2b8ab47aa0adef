"""Host cost of one launch: tkir beside Triton and torch on tiny problems, so the host path is what is timed.

    python3 scripts/bench/launch_overhead.py --calls 2000 --json out.json    # on a GPU (torch; Triton if installed)
    python3 scripts/bench/launch_overhead.py --fake-driver --calls 20000     # anywhere: tkir's Python path alone

Each number is host wall time per call: `--calls` calls back to back (a synchronize, not timed, after
every QUEUED_CALLS of them, so the launch queue never fills), the median of `--rounds` such runs after
WARMUP_CALLS calls. The problems are tiny (softmax 64 x 1024, a 128 x 256 x 256 GEMM with TMA
descriptors), so the GPU keeps up with the host and idles between kernels. The call patterns:

- same: the same tensors every call (the prepared launch at its best);
- rotated: ROTATED_SETS tensor sets in turn (new pointers, signatures already seen);
- fresh: a new output tensor each call, allocated inside the timed call (`torch.empty_like`), as a model's
  forward allocates its activations; every side pays that allocation.

Then `tkir.autotune`'s wrapper against a plain launch of the configuration it chose (layernorm 3000 x 1024,
rmsnorm 65536 x 768, the same tensors every call). Before anything is timed, every tkir launch (and the
Triton kernel) is checked against torch (relative L2 error within CHECK_TOLERANCE).

`--fake-driver` needs no GPU, torch or Triton: the CUDA driver calls tkir makes are replaced by Python
stand-ins that return at once (`FakeDriver`) and the tensors by objects that look like torch's to the runtime
(`FakeTensor`), so what is left is tkir's own Python per call: the part of the table tkir controls. Its rows
use fresh addresses where the GPU run uses a fresh output (the stand-in has no caching allocator to hand
back a recent block), the worst case for the tensor maps. The verdicts compare a GPU run with the launch
targets (TARGETS); the fake run has none.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import itertools
import json
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if importlib.util.find_spec("tkir") is None and str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tkir not installed: this checkout's (an installed tkir, or PYTHONPATH's, wins)

DEFAULT_CALLS = 2000
DEFAULT_ROUNDS = 5
WARMUP_CALLS = 200        # before each timed group: first launches load modules, build templates, JIT Triton
# Calls enqueued between two synchronizations: well under the launches a stream queues before
# cuLaunchKernel blocks (about a thousand), so rmsnorm at 65536 x 768 (~70 us of GPU time a call) is
# still timed on the host, not at the GPU's pace.
QUEUED_CALLS = 256
ROTATED_SETS = 64         # tensor sets of the "rotated" rows
CHECK_TOLERANCE = 2e-2    # bf16 outputs (the companions' TOLERANCE)
SIDES = ("tkir", "triton", "torch")

SOFTMAX = dict(N=64, D=1024)              # the softmax 64 x 1024 (softmax.tk's default D)
GEMM = dict(M=128, N=256, K=256)          # one 128 x 256 tile of gemm.tk's defaults: three tensor maps
LAYERNORM = dict(N=3000, D=1024)          # the autotune rows
RMSNORM = dict(N=65536, D=768)

# "Done when" of the launch-path work, on the GPU, in one run (each a ratio or a bound in microseconds).
TARGETS = [
    # (what, row, side, compared with (row, side) or None, factor or bound in us)
    ("softmax fresh output: tkir <= 1.2x Triton", "softmax_fresh", "tkir", ("softmax_fresh", "triton"), 1.2),
    ("gemm fresh output: tkir <= 30 us", "gemm_fresh", "tkir", None, 30.0),
    ("softmax same tensors: tkir <= Triton", "softmax_same", "tkir", ("softmax_same", "triton"), 1.0),
    ("layernorm: autotune <= 1.1x plain", "layernorm_autotune", "autotune", ("layernorm_autotune", "plain"), 1.1),
    ("rmsnorm: autotune <= 1.1x plain", "rmsnorm_autotune", "autotune", ("rmsnorm_autotune", "plain"), 1.1),
]


@dataclass
class Row:
    """One call pattern: host microseconds per call for each side that has it (None: not measured)."""

    key: str
    label: str
    us: dict[str, float | None] = field(default_factory=dict)
    note: str = ""


@dataclass
class Report:
    device: str
    calls: int
    rounds: int
    rows: list[Row]
    autotune: list[Row]
    checks: dict[str, float] = field(default_factory=dict)   # what was checked -> relative error
    versions: dict[str, str] = field(default_factory=dict)
    fake_driver: bool = False

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdicts"] = verdicts(self) if not self.fake_driver else []
        return d


# --- measuring -------------------------------------------------------------------------------------
PAIR_ROUNDS = 5  # alternated measurements per side of a pair (interleaved)


def per_call_us(fn: Callable[[], Any], calls: int, rounds: int, sync: Callable[[], Any] = lambda: None,
                warmup: int = WARMUP_CALLS, clock: Callable[[], float] = time.perf_counter,
                chunk: int = QUEUED_CALLS) -> float:
    """Median over `rounds` of host microseconds per call of `fn`: `calls` calls back to back per round, in
    chunks of at most `chunk` with a synchronize (not timed) between them, so the launch queue never
    fills and a kernel slower than its launch does not put GPU time in the number."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(rounds):
        total, left = 0.0, calls
        while left:
            n = min(left, chunk)
            t0 = clock()
            for _ in range(n):
                fn()
            total += clock() - t0
            sync()
            left -= n
        times.append(total / calls * 1e6)
    return statistics.median(times)


def interleaved(us: Callable[[Callable[[], Any]], float], calls: dict[str, Callable[[], Any]],
                rounds: int = PAIR_ROUNDS) -> dict[str, float]:
    """The median of `rounds` measurements `us(fn)` of each call, taken in alternation (a, b, a, b, ...), so
    a drift of the host's speed during the run falls on both sides alike (the bar compares the two)."""
    seen: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(rounds):
        for k, fn in calls.items():
            seen[k].append(us(fn))
    return {k: statistics.median(v) for k, v in seen.items()}


def cycling(sets: list[tuple], call: Callable[..., Any]) -> Callable[[], Any]:
    """A zero-argument call that passes the next of `sets` each time (the "rotated" rows)."""
    it = itertools.cycle(sets)
    return lambda: call(*next(it))


# --- the report ------------------------------------------------------------------------------------

def format_table(rows: list[Row], sides: tuple[str, ...] = SIDES) -> str:
    """A Markdown table: one line per row, a column per side (`-` where a side has no number)."""
    head = ["call", *sides]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [r.label + (f" ({r.note})" if r.note else "")]
        cells += [f"{r.us[s]:.1f} us" if r.us.get(s) is not None else "-" for s in sides]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdicts(report: Report) -> list[dict[str, Any]]:
    """Each target of TARGETS that this run's numbers decide: value, limit, ok."""
    found = {r.key: r.us for r in [*report.rows, *report.autotune]}
    out = []
    for what, row, side, other, bound in TARGETS:
        value = found.get(row, {}).get(side)
        if other is None:
            limit = bound
        else:
            base = found.get(other[0], {}).get(other[1])
            limit = None if base is None else bound * base
        if value is None or limit is None:
            continue
        out.append({"what": what, "value_us": round(value, 2), "limit_us": round(limit, 2), "ok": value <= limit})
    return out


def format_report(report: Report) -> str:
    where = "fake driver (no GPU): tkir's Python per call" if report.fake_driver else report.device
    lines = [f"host us per call, median of {report.rounds} runs of {report.calls} calls; {where}", "",
             format_table(report.rows), ""]
    if report.autotune:
        lines += [format_table(report.autotune, ("autotune", "plain")), ""]
    if report.checks:
        lines.append("checked against torch first: " + ", ".join(f"{k} {v:.1e}" for k, v in report.checks.items()))
    for v in verdicts(report) if not report.fake_driver else []:
        lines.append(f"{'ok  ' if v['ok'] else 'MISS'} {v['what']}: {v['value_us']} us (limit {v['limit_us']} us)")
    return "\n".join(lines).rstrip() + "\n"


# --- on the GPU ------------------------------------------------------------------------------------

try:  # the Triton column stays empty without it
    import triton
    import triton.language as tl
except ImportError:
    triton = tl = None

if triton is not None:
    @triton.jit
    def _softmax_rows(y_ptr, x_ptr, stride, n_cols, BLOCK: tl.constexpr):
        """y = softmax(x) along one row per program, math in f32, bf16 out: Triton's minimal row softmax."""
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        mask = cols < n_cols
        x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=0))
        tl.store(y_ptr + row * stride + cols, (e / tl.sum(e, axis=0)).to(tl.bfloat16), mask=mask)


def _triton_softmax(d: int) -> Callable[[Any, Any], Any] | None:
    """launch(x, y): y = softmax(x) along rows of width d with the Triton kernel, as a user launches it
    (`kernel[grid](...)`); None without Triton."""
    if triton is None:
        return None
    block = triton.next_power_of_2(d)

    def launch(x: Any, y: Any) -> Any:
        return _softmax_rows[(x.shape[0],)](y, x, x.stride(0), x.shape[1], BLOCK=block)

    return launch


def _rel_err(torch: Any, got: Any, want: Any) -> float:
    got, want = got.float(), want.float()
    return float((got - want).norm() / want.norm())


def _checked(torch: Any, checks: dict[str, float], what: str, got: Any, want: Any) -> None:
    torch.cuda.synchronize()
    err = _rel_err(torch, got, want)
    checks[what] = err
    if not err <= CHECK_TOLERANCE:
        raise SystemExit(f"{what}: rel err {err:.3e} > {CHECK_TOLERANCE}: not timing a wrong kernel")


def gpu_report(calls: int, rounds: int) -> Report:
    import torch

    import tkir

    dev = torch.device("cuda")
    sync = torch.cuda.synchronize
    checks: dict[str, float] = {}

    def us(fn: Callable[[], Any]) -> float:
        return per_call_us(fn, calls, rounds, sync)

    # softmax 64 x 1024
    ks = tkir.compile(str(ROOT / "examples/softmax.tk"))
    tri = _triton_softmax(SOFTMAX["D"])
    x = torch.randn(SOFTMAX["N"], SOFTMAX["D"], device=dev).bfloat16()
    y = torch.full_like(x, float("nan"))
    ks(x, y)
    _checked(torch, checks, "tkir softmax", y, torch.softmax(x.float(), dim=1))
    if tri is not None:
        yt = torch.full_like(x, float("nan"))
        tri(x, yt)
        _checked(torch, checks, "triton softmax", yt, torch.softmax(x.float(), dim=1))
    sets = [(torch.randn_like(x), torch.empty_like(x)) for _ in range(ROTATED_SETS)]
    xs = [(s[0],) for s in sets]

    def softmax_torch(a: Any) -> Any:
        return torch.softmax(a, dim=1)

    rows = [
        Row("softmax_same", "softmax 64x1024, the same tensors every call",
            {"tkir": us(lambda: ks(x, y)), "triton": us(lambda: tri(x, y)) if tri else None,
             "torch": us(lambda: softmax_torch(x))}),
        Row("softmax_rotated", f"softmax, {ROTATED_SETS} tensor sets in rotation",
            {"tkir": us(cycling(sets, ks)), "triton": us(cycling(sets, tri)) if tri else None,
             "torch": us(cycling(xs, softmax_torch))}),
        Row("softmax_fresh", "softmax, a fresh output tensor each call",
            {"tkir": us(lambda: ks(x, torch.empty_like(x))),
             "triton": us(lambda: tri(x, torch.empty_like(x))) if tri else None,
             "torch": us(lambda: softmax_torch(x))}, note="torch allocates its output in every row"),
    ]

    # gemm 128 x 256 x 256 (TMA descriptors for A, B and C)
    kg = tkir.compile(str(ROOT / "examples/gemm.tk"))
    a = torch.randn(GEMM["M"], GEMM["K"], device=dev).bfloat16()
    b = torch.randn(GEMM["K"], GEMM["N"], device=dev).bfloat16()
    c = torch.full((GEMM["M"], GEMM["N"]), float("nan"), device=dev, dtype=torch.bfloat16)
    kg(a, b, c)
    _checked(torch, checks, "tkir gemm", c, a.float() @ b.float())
    rows += [
        Row("gemm_same", "gemm 128x256x256 (TMA descriptors), the same tensors",
            {"tkir": us(lambda: kg(a, b, c)), "torch": us(lambda: torch.matmul(a, b, out=c))},
            note="torch: matmul(out=)"),
        Row("gemm_fresh", "gemm, a fresh output tensor each call",
            {"tkir": us(lambda: kg(a, b, torch.empty_like(c))), "torch": us(lambda: torch.matmul(a, b))}),
    ]

    tuned_rows = [_autotune_row(torch, tkir, checks, us, "layernorm", LAYERNORM),
                  _autotune_row(torch, tkir, checks, us, "rmsnorm", RMSNORM)]
    return Report(torch.cuda.get_device_name(), calls, rounds, rows, tuned_rows, checks, _versions())


def _autotune_row(torch: Any, tkir: Any, checks: dict[str, float], us: Callable[[Callable[[], Any]], float],
                  name: str, size: dict[str, int]) -> Row:
    """`tkir.autotune` (the bucket's tuned consts, else the defaults) against a plain launch of the same
    consts, the same tensors every call."""
    import torch.nn.functional as F

    path = str(ROOT / f"examples/{name}.tk")
    n, d = size["N"], size["D"]
    fixed = {"D": d}
    dev = torch.device("cuda")
    x = torch.randn(n, d, device=dev).bfloat16()
    w = torch.randn(d, device=dev).bfloat16()
    y = torch.full_like(x, float("nan"))
    if name == "layernorm":
        bias = torch.randn(d, device=dev).bfloat16()
        args: tuple = (x, w, bias, y)
        want = F.layer_norm(x.float(), (d,), w.float(), bias.float(), eps=1e-5)
    else:
        args = (x, w, y)
        want = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    tuned = tkir.autotune(path, **fixed)
    tuned(*args)
    _checked(torch, checks, f"tkir.autotune {name}", y, want)
    plain = tkir.compile(path, **tuned.last_consts)
    y.fill_(float("nan"))
    plain(*args)
    _checked(torch, checks, f"tkir {name}", y, want)
    consts = " ".join(f"{k}={v}" for k, v in tuned.last_consts.items())
    pair = interleaved(us, {"autotune": lambda: tuned(*args), "plain": lambda: plain(*args)})
    return Row(f"{name}_autotune", f"{name} {n}x{d}, the same tensors", pair, note=consts)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("torch", "triton", "cuda.bindings"):
        try:
            module = __import__(name, fromlist=["__version__"])
            out[name] = str(getattr(module, "__version__", "?"))
        except ImportError:
            out[name] = "not installed"
    import tkir.backend.runtime

    out["tkir"] = str(Path(tkir.backend.runtime.__file__).resolve().parents[1])  # which checkout was timed
    return out


# --- without a GPU -------------------------------------------------------------------------------

FAKE_BASE = 0x7F00_0000_0000       # made-up device addresses, never dereferenced
FAKE_ALIGN = 1 << 20              # fake allocations start on 1 MB boundaries (aligned for every check)
FAKE_CONTEXT = 0x1000
FAKE_SMS = 132


class FakeDevice:
    """What the runtime reads of a torch.device."""

    def __init__(self, index: int = 0):
        self.type, self.index = "cuda", index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeDevice) and other.index == self.index

    def __hash__(self) -> int:
        return hash(("cuda", self.index))


class FakeDtype:
    def __init__(self, name: str, size: int):
        self.name, self.size = name, size

    def __str__(self) -> str:
        return f"torch.{self.name}"


BF16 = FakeDtype("bfloat16", 2)
DEVICE0 = FakeDevice(0)


class FakeTensor:
    """A contiguous CUDA tensor as tkir's runtime reads torch tensors (it knows torch by the type's module)."""

    def __init__(self, shape: tuple[int, ...], ptr: int, dtype: FakeDtype = BF16, device: FakeDevice = DEVICE0):
        self.shape, self.dtype, self.device, self.is_cuda, self._ptr = tuple(shape), dtype, device, True, ptr
        strides, step = [], 1
        for d in reversed(self.shape):
            strides.append(step)
            step *= d
        self._strides = tuple(reversed(strides))

    def data_ptr(self) -> int:
        return self._ptr

    def stride(self) -> tuple[int, ...]:
        return self._strides

    def element_size(self) -> int:
        return self.dtype.size


FakeTensor.__module__ = "torch.fake"


class FakeDriver:
    """The cuda.bindings calls tkir's runtime makes, answered at once from Python (one GPU), and the
    tensor-map encoder; `with FakeDriver(): ...` installs them and puts the real ones back after."""

    NAMES = ("cuInit", "cuDeviceGetCount", "cuDeviceGet", "cuDevicePrimaryCtxRetain", "cuCtxGetCurrent",
             "cuCtxSetCurrent", "cuDeviceGetAttribute", "cuModuleLoadData", "cuModuleGetFunction",
             "cuFuncGetAttribute", "cuFuncSetAttribute", "cuLaunchKernel", "cuStreamIsCapturing")

    def __init__(self) -> None:
        from tkir.backend import cuda as tkcuda

        self.tkcuda, self.cu = tkcuda, tkcuda.cu
        self.ok = self.cu.CUresult.CUDA_SUCCESS
        self.current = 0
        self.launches = 0
        self.encodes = 0
        self._saved: dict[str, Any] = {}

    def __enter__(self) -> FakeDriver:
        from tkir.backend import runtime

        ok = self.ok
        fakes = {
            "cuInit": lambda flags: (ok,), "cuDeviceGetCount": lambda: (ok, 1), "cuDeviceGet": lambda i: (ok, i),
            "cuDevicePrimaryCtxRetain": lambda dev: (ok, FAKE_CONTEXT + dev),
            "cuCtxGetCurrent": lambda: (ok, self.current), "cuCtxSetCurrent": self._set_current,
            "cuDeviceGetAttribute": lambda attr, dev: (ok, FAKE_SMS if "MULTIPROCESSOR" in attr.name else 232_448),
            "cuModuleLoadData": lambda image: (ok, "module"), "cuModuleGetFunction": lambda m, name: (ok, "function"),
            "cuFuncGetAttribute": lambda attr, f: (ok, 1024), "cuFuncSetAttribute": lambda f, attr, v: (ok,),
            "cuLaunchKernel": self._launch,
            "cuStreamIsCapturing": lambda stream: (ok, self.cu.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE),
        }
        for name in self.NAMES:
            self._saved[name] = getattr(self.cu, name)
            setattr(self.cu, name, fakes[name])
        self._saved["encode"] = runtime._driver_encode_tiled
        runtime._driver_encode_tiled = lambda: self._encode
        self._clear()
        return self

    def __exit__(self, *exc: object) -> None:
        from tkir.backend import runtime

        for name in self.NAMES:
            setattr(self.cu, name, self._saved[name])
        runtime._driver_encode_tiled = self._saved["encode"]
        self._clear()

    def _clear(self) -> None:
        self.tkcuda._driver.cache_clear()
        self.tkcuda._primary_context.cache_clear()

    def _set_current(self, ctx: Any) -> tuple:
        self.current = int(ctx)
        return (self.ok,)

    def _launch(self, *args: Any) -> tuple:
        self.launches += 1
        return (self.ok,)

    def _encode(self, *args: Any) -> int:
        self.encodes += 1
        return 0


class Addresses:
    """Fresh fake device addresses: each allocation after the last, FAKE_ALIGN aligned."""

    def __init__(self) -> None:
        self.next = FAKE_BASE

    def __call__(self, nbytes: int) -> int:
        ptr = self.next
        self.next += -(-max(nbytes, 1) // FAKE_ALIGN) * FAKE_ALIGN
        return ptr


def fake_report(calls: int, rounds: int) -> Report:
    """The tkir side of the table with FakeDriver and FakeTensor: tkir's Python per call, no GPU."""
    import tkir
    from tkir.backend.runtime import Kernel
    from tkir.tools import tune

    new = Addresses()

    def tensor(*shape: int) -> FakeTensor:
        return FakeTensor(shape, new(BF16.size * math.prod(shape)))

    def us(fn: Callable[[], Any]) -> float:
        return per_call_us(fn, calls, rounds)

    with FakeDriver(), _no_tuning_cache(tune):
        ks = tkir.compile(str(ROOT / "examples/softmax.tk"))
        n, d = SOFTMAX["N"], SOFTMAX["D"]
        x, y = tensor(n, d), tensor(n, d)
        sets = [(tensor(n, d), tensor(n, d)) for _ in range(ROTATED_SETS)]
        validate = Kernel(ks.asm["ptx"], ks.launch).validate
        rows = [
            Row("softmax_validate", "softmax 64x1024, validate() alone (every check, no launch)",
                {"tkir": us(lambda: validate(x, y))}),
            Row("softmax_same", "softmax 64x1024, the same tensors every call", {"tkir": us(lambda: ks(x, y))}),
            Row("softmax_rotated", f"softmax, {ROTATED_SETS} tensor sets in rotation", {"tkir": us(cycling(sets, ks))}),
            Row("softmax_fresh", "softmax, a fresh output address each call",
                {"tkir": us(lambda: ks(x, tensor(n, d)))}),
        ]
        kg = tkir.compile(str(ROOT / "examples/gemm.tk"))
        a, b, c = tensor(GEMM["M"], GEMM["K"]), tensor(GEMM["K"], GEMM["N"]), tensor(GEMM["M"], GEMM["N"])
        rows += [
            Row("gemm_same", "gemm 128x256x256 (TMA descriptors), the same tensors", {"tkir": us(lambda: kg(a, b, c))}),
            Row("gemm_fresh", "gemm, a fresh output address each call (its tensor map re-encoded)",
                {"tkir": us(lambda: kg(a, b, tensor(GEMM["M"], GEMM["N"])))}),
        ]
        tuned_rows = [_fake_autotune_row(tkir, tensor, us, "layernorm", LAYERNORM),
                      _fake_autotune_row(tkir, tensor, us, "rmsnorm", RMSNORM)]
    return Report("fake driver", calls, rounds, rows, tuned_rows, {}, _versions(), fake_driver=True)


def _fake_autotune_row(tkir: Any, tensor: Callable[..., FakeTensor], us: Callable[[Callable[[], Any]], float],
                       name: str, size: dict[str, int]) -> Row:
    path = str(ROOT / f"examples/{name}.tk")
    n, d = size["N"], size["D"]
    tuned = tkir.autotune(path, D=d)
    args = [tensor(n, d), tensor(d)] + ([tensor(d)] if name == "layernorm" else []) + [tensor(n, d)]
    tuned(*args)
    plain = tkir.compile(path, **tuned.last_consts)
    return Row(f"{name}_autotune", f"{name} {n}x{d}, the same tensors",
               {"autotune": us(lambda: tuned(*args)), "plain": us(lambda: plain(*args))})


@contextlib.contextmanager
def _no_tuning_cache(tune: Any) -> Iterator[None]:
    """tkir.autotune without a GPU: no tuned point is found (its lookup asks the GPU's name), so it
    launches the kernel's defaults, as on a GPU whose cache has no entry for the bucket."""
    saved = tune.lookup
    tune.lookup = lambda *a, **k: None
    try:
        yield
    finally:
        tune.lookup = saved


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=DEFAULT_CALLS, help="calls per timed run")
    ap.add_argument("--rounds", type=int, default=DEFAULT_ROUNDS, help="timed runs per number (the median is kept)")
    ap.add_argument("--json", type=Path, help="write the report (rows, checks, verdicts) here")
    ap.add_argument("--fake-driver", action="store_true", help="no GPU: tkir's Python per call against stand-ins")
    args = ap.parse_args(argv)
    report = fake_report(args.calls, args.rounds) if args.fake_driver else gpu_report(args.calls, args.rounds)
    print(format_report(report), end="")
    if args.json:
        args.json.write_text(json.dumps(report.as_dict(), indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
