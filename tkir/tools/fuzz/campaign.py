"""A fuzzing campaign: inputs 0..count-1 of one seed on `jobs` worker processes, and their summary.

The parent warms up (tkir.tools.fuzz.oracle.warm_up) and builds the corpus before forking the workers, so
each worker starts with everything loaded. Every SUBPROCESS_EVERY-th input is also run in a real
`python -m tkir.cli` process; a different class there counts as a `mismatch`. Inputs that break the
invariant (and unlocated errors) are saved under `save_dir` with their command line and output.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import shlex
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tkir.tools.fuzz import corpus, inputs, oracle

SUBPROCESS_EVERY = 97  # one input in this many is checked against a real `python -m tkir.cli` process
SAVED_CLASSES = ("traceback", "hang", "crash", "unlocated", "accepted-wrong", "ptxas-rejected")
MAX_SAVED_PER_SIGNATURE = 3


@dataclass
class Record:
    index: int
    kind: str
    cls: str
    seconds: float
    stages: list[str]
    first_error: str
    note: str
    argv: list[str]
    text: str = ""      # kept only for failures
    stderr: str = ""    # kept only for failures
    mismatch: str = ""  # the class a real subprocess gave, when it differs


@dataclass
class Summary:
    seed: int
    count: int
    jobs: int
    seconds: float = 0.0
    classes: Counter = field(default_factory=Counter)
    by_kind: dict[str, Counter] = field(default_factory=dict)
    stages: Counter = field(default_factory=Counter)
    mismatches: int = 0
    checked_in_subprocess: int = 0
    slowest: tuple[float, int] = (0.0, -1)
    signatures: Counter = field(default_factory=Counter)
    failures: list[Record] = field(default_factory=list)

    def add(self, r: Record) -> None:
        self.classes[r.cls] += 1
        self.by_kind.setdefault(r.kind, Counter())[r.cls] += 1
        self.stages.update(r.stages)
        self.slowest = max(self.slowest, (r.seconds, r.index))
        if r.mismatch:
            self.mismatches += 1
        if r.index % SUBPROCESS_EVERY == 0:
            self.checked_in_subprocess += 1
        if r.cls in SAVED_CLASSES or r.mismatch:
            sig = f"{r.cls}: {r.first_error}" + (f" (a real subprocess: {r.mismatch})" if r.mismatch else "")
            self.signatures[sig] += 1
            if self.signatures[sig] <= MAX_SAVED_PER_SIGNATURE or r.mismatch:  # every mismatch is kept
                self.failures.append(r)

    @property
    def violations(self) -> int:
        return sum(self.classes[c] for c in oracle.FAILURES) + self.mismatches

    def table(self) -> str:
        n = sum(self.classes.values())
        lines = [f"tkir fuzz: seed {self.seed}, {n} inputs, {self.jobs} jobs, {self.seconds:.1f} s "
                 f"({n / max(self.seconds, 1e-9):.1f} inputs/s), slowest input {self.slowest[0]:.2f} s "
                 f"(#{self.slowest[1]})", ""]
        kinds = sorted(self.by_kind)
        lines.append(f"{'kind':<13}" + "".join(f"{c:>{_width(c)}}" for c in oracle.CLASSES) + f"{'total':>8}")
        for k in kinds:
            row = self.by_kind[k]
            lines.append(f"{k:<13}" + "".join(f"{row[c]:>{_width(c)}}" for c in oracle.CLASSES)
                         + f"{sum(row.values()):>8}")
        lines.append(f"{'all':<13}" + "".join(f"{self.classes[c]:>{_width(c)}}" for c in oracle.CLASSES) + f"{n:>8}")
        lines.append("")
        lines.append("stages completed: " + ", ".join(f"{s} {self.stages[s]} ({100 * self.stages[s] / max(n, 1):.0f}%)"
                                                      for s in oracle.STAGES))
        lines.append(f"through ptxas: {self.stages['ptxas']} of the {self.stages['ptx']} inputs that reached PTX "
                     f"(one in {inputs.PTXAS_SHARE} of those that ask for PTX asks for a cubin)")
        lines.append(f"checked in a real subprocess: {self.checked_in_subprocess}, mismatches: {self.mismatches}")
        if self.signatures:
            lines.append("")
            lines.append("distinct failures (class: first error line) x count:")
            for sig, c in self.signatures.most_common():
                lines.append(f"  {c:>5}  {sig[:200]}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"seed": self.seed, "count": sum(self.classes.values()), "jobs": self.jobs,
                "seconds": round(self.seconds, 1), "classes": {c: self.classes[c] for c in oracle.CLASSES},
                "by_kind": {k: dict(v) for k, v in sorted(self.by_kind.items())},
                "stages": {s: self.stages[s] for s in oracle.STAGES}, "mismatches": self.mismatches,
                "checked_in_subprocess": self.checked_in_subprocess,
                "slowest_seconds": round(self.slowest[0], 2), "slowest_index": self.slowest[1],
                "signatures": dict(self.signatures.most_common())}


def _width(cls: str) -> int:
    return max(len(cls) + 2, 11)


# --- workers ----------------------------------------------------------------------------------------

_WORKDIR: str | None = None
_SEED = 0
_TIMEOUT = oracle.TIMEOUT_S


def _init_worker(seed: int, timeout: float, base: str | None = None) -> None:
    global _WORKDIR, _SEED, _TIMEOUT
    _WORKDIR = tempfile.mkdtemp(prefix="tkir-fuzz-", dir=base)
    _SEED, _TIMEOUT = seed, timeout


def run_index(index: int) -> Record:
    """Make input `index` of the campaign's seed and run it (in a worker, or in the parent)."""
    if _WORKDIR is None:
        _init_worker(_SEED, _TIMEOUT)
    inp = inputs.make_input(_SEED, index)
    path = os.path.join(_WORKDIR, "input" + inp.suffix)
    Path(path).write_text(inp.text, encoding="utf-8", errors="surrogatepass")
    argv = inp.command(path)
    wrong, option = bool(inp.meta.get("wrong")), inp.meta.get("option")
    res = oracle.run_forked(argv, path, inp.text, _WORKDIR, _TIMEOUT, wrong, option)
    rec = Record(index, inp.kind, res.cls, res.seconds, res.stages, res.first_error, inp.note, argv)
    if index % SUBPROCESS_EVERY == 0:
        real = oracle.run_subprocess(argv, path, inp.text, _TIMEOUT, wrong, option)
        if real.cls != res.cls:
            rec.mismatch = real.cls
    if res.cls in SAVED_CLASSES or rec.mismatch:
        rec.text, rec.stderr = inp.text, res.stderr
    return rec


def run(count: int, seed: int, jobs: int = 2, timeout: float = oracle.TIMEOUT_S, start: int = 0,
        progress=None, out_dir: str | Path | None = None) -> Summary:
    """Run inputs start..start+count-1; `progress(done, summary)` is called now and then. With
    `out_dir`, each saved failure is written as soon as it comes (a long run can be read while it runs)."""
    global _SEED, _TIMEOUT
    _SEED, _TIMEOUT = seed, timeout
    oracle.warm_up()
    corpus.dumps()
    summary = Summary(seed, count, jobs)
    base = tempfile.TemporaryDirectory(prefix="tkir-fuzz-")  # every worker's files, removed at the end
    t0 = time.perf_counter()
    indices = range(start, start + count)
    if jobs <= 1:
        _init_worker(seed, timeout, base.name)
        results = map(run_index, indices)
        pool = None
    else:
        pool = multiprocessing.get_context("fork").Pool(jobs, _init_worker, (seed, timeout, base.name))
        results = pool.imap_unordered(run_index, indices, chunksize=4)
    try:
        for done, rec in enumerate(results, 1):
            saved = len(summary.failures)
            summary.add(rec)
            if out_dir is not None and len(summary.failures) > saved:
                save_record(rec, Path(out_dir))
            if progress and done % 500 == 0:
                summary.seconds = time.perf_counter() - t0
                progress(done, summary)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
        base.cleanup()
    summary.seconds = time.perf_counter() - t0
    return summary


def save(summary: Summary, out_dir: str | Path) -> None:
    """summary.json, summary.txt and, per failing input, its text, command line and stderr."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    (out / "summary.txt").write_text(summary.table() + "\n")
    for r in summary.failures:
        save_record(r, out)


def save_record(r: Record, out: Path) -> None:
    """A failing input's text, and a .txt with how it was made, its command line and its stderr."""
    stem = out / r.cls / f"{r.index:06d}"
    stem.parent.mkdir(parents=True, exist_ok=True)
    suffix = ".tkir" if r.kind.startswith("ir") else ".tk"
    Path(str(stem) + suffix).write_text(r.text, encoding="utf-8", errors="surrogatepass")
    cmd = ["tkc", *(str(stem) + suffix if a.endswith(suffix) and os.sep in a else a for a in r.argv)]
    Path(str(stem) + ".txt").write_text(f"# {r.note}\n# mismatch: {r.mismatch or 'none'}\n"
                                        f"{shlex.join(cmd)}\n\n{r.stderr}")
