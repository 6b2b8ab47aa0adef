"""`tkc bench` and `tkc run` on the GPU: correctness on fresh random inputs, then timing against a peer.

For each size: compile, draw fresh random inputs (outputs poisoned with NaN), run once and compare
with the companion's reference by ||out - ref|| / ||ref||; then time the tkir kernel and its peer
(torch) in the same process with CUDA events, interleaved run by run (tkir, peer, tkir, peer, ...)
so drift in clocks or temperature falls on both: warm-up, the median of `reps` runs, inputs rotated
over enough sets that their bytes exceed 3x the 60 MB L2 and a 256 MB buffer zeroed before each run,
so every run starts from a cold cache (METHOD.md; the measuring itself is timing.py, which the tuner
shares). Needs torch and a CUDA GPU (imported when timing).
A driver beside the CLI: tkir/cli.py parses the flags, and every function here takes plain values
(sizes, constants, `compile_kw`: keyword arguments of tkir.compile).

Companion hooks (examples/<name>.py): BENCH_SIZES, BENCH_CONSTS, flops(), bytes_moved(),
torch_inputs(sizes, consts) -> list of tensors (outputs NaN), torch_reference(inputs, sizes, consts)
-> {output: tensor}, peer(inputs, sizes, consts) -> a zero-argument callable, PEER (its name).
Optional: EXTRA_PEERS (names) and extra_peer(name, inputs, sizes, consts) -> a zero-argument
callable: more peers timed interleaved in the same run, each with its own ratio column.
Correctness alone, without torch (tkir DeviceArrays, the numpy `make_inputs` and `reference`): check.py.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from tkir.diagnostics import TkirError
from tkir.output_file import write_outputs
from tkir.tools import timing


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


_INDUCTOR: dict = {}


def inductor(math):
    """`torch.compile(math)` (Inductor), made once per function: the peer a user who fuses with the
    compiler would pick (issue 15). Its guards recompile for new shapes; warm-up runs absorb that."""
    import torch

    if math not in _INDUCTOR:
        _INDUCTOR[math] = torch.compile(math, dynamic=False)
    return _INDUCTOR[math]


def bench_one(path: str, companion, sizes: dict, consts: dict, *, reps: int = 20, warmup: int = 5,
              variant: str = "tkir", compile_kw: dict | None = None, peer: bool = True,
              kernel: object | None = None) -> Row:
    """`kernel`: a compiled kernel to time in place of compiling `path` (anything callable on the inputs
    with a `consts` dict: an A/B of PTX another compiler made, scripts/bench/ab.py)."""
    import torch

    from tkir import api

    k = kernel if kernel is not None else api.compile(path, **(compile_kw or {}), **consts)
    if hasattr(k, "for_sizes"):  # auto consts: the kernel chosen for this row's size bucket, its consts reported
        k = k.for_sizes(sizes)
    nbytes = companion.bytes_moved(sizes, consts)
    nsets = timing.rotation_sets(nbytes)
    if hasattr(companion, "torch_inputs"):
        sets = [companion.torch_inputs(sizes, consts) for _ in range(nsets)]
        host = None
    else:  # the companion's numpy inputs (fresh random, outputs NaN), copied to the GPU
        import numpy as np

        rng = np.random.default_rng()
        host = companion.make_inputs(rng, sizes, consts)
        sets = [[timing.to_torch(torch, a) for a in host]]
        sets += [[timing.to_torch(torch, a) for a in companion.make_inputs(rng, sizes, consts)]
                 for _ in range(nsets - 1)]
    # correctness first, on the first set (fresh random inputs, NaN-poisoned outputs)
    k(*sets[0])
    torch.cuda.synchronize()
    if host is None:
        ref = companion.torch_reference(sets[0], sizes, consts)
    else:
        ref = {n: torch.from_numpy(r) for n, r in companion.reference(host, sizes, consts).items()}
    errs = {}
    for name, r in ref.items():
        out = sets[0][companion.PARAMS.index(name)]
        errs[name] = timing.rel_err(torch, out.cpu() if host is not None else out, r)
    from tkir.tools.examples import worst

    err, bound, ok = worst(companion, errs)  # each output at its own bound
    mine = lambda i: (lambda: k(*sets[i]))  # noqa: E731
    peer_ms = None
    extra: dict | None = None
    if peer:
        names = list(getattr(companion, "EXTRA_PEERS", {}) or {})
        fns = [mine, lambda i: companion.peer(sets[i], sizes, consts)]
        fns += [(lambda i, n=n: companion.extra_peer(n, sets[i], sizes, consts)) for n in names]
        ms, peer_ms, *more = timing.time_pair_ms(torch, fns, nsets, reps, warmup)
        extra = dict(zip(names, more, strict=True)) if names else None
        host_time = dict(zip(["tkir", companion.PEER, *names], timing.host_us_per_call(torch, fns, nsets), strict=True))
    else:
        ms = timing.time_ms(torch, mine, nsets, reps, warmup)
        host_time = dict(zip(["tkir"], timing.host_us_per_call(torch, [mine], nsets), strict=True))
    chosen = {n: k.consts.get(n, v) for n, v in consts.items()}  # `auto` consts: the values the compiler chose
    return Row(Path(path).stem, dict(sizes), chosen, variant, err, bound, ok, ms, peer_ms, companion.PEER,
               companion.flops(sizes, consts),
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
    """The row's consts with `names` chosen by the tuner (tkir.tools.tune: the cached result for these sizes'
    bucket, or a tuning run), the row's other consts pinned (`auto` ones resolved by the compiler first);
    and a note naming the choice and what it was measured against."""
    from tkir import api
    from tkir.tools import tune

    resolved = api.compile(path, **compile_kw, **{n: v for n, v in consts.items() if n not in names}).consts
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
    from tkir.tools.examples import load_companion

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

        copy = timing.copy_bandwidth(torch)
        for r in rows:
            r.copy_gbps = copy
        print(f"device-to-device copy, same run: {copy:.0f} GB/s; tkir reaches "
              + ", ".join(f"{100 * r.gbps / copy:.0f}%" for r in rows) + " of it")
    if json_out:
        write_outputs([(json_out, json.dumps([r.as_dict() for r in rows], indent=2) + "\n")], "--json")
    if plot:
        plot_rows(rows, plot, memory_bound)
    return rows


def run_check(path: str, sizes: dict[str, int | float], consts: dict[str, int | float], *,
              compile_kw: dict) -> Row:
    """`tkc run FILE` on the GPU: one size (empty `sizes`: the companion's first CHECK_SIZES), fresh
    inputs, the reference comparison; prints one line and returns the row."""
    from tkir.tools.examples import load_companion

    companion = load_companion(path)
    sizes = dict(sizes) or dict(companion.CHECK_SIZES[0])
    row = bench_one(path, companion, sizes, consts, reps=3, warmup=1, peer=False, compile_kw=compile_kw)
    size_txt = " ".join(f"{n}={v}" for n, v in sizes.items())
    print(f"{Path(path).name} [{size_txt}] on GPU: rel_err {row.rel_err:.3e} (bound {row.bound:.0e}) "
          f"{'ok' if row.ok else 'FAIL'}; {row.ms:.3f} ms")
    return row
