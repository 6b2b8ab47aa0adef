"""Fuzz tkc: `python3 scripts/fuzz.py --count 20000 -j 2 --seed 1 --out fuzz-out` (docs/fuzzing.md).

Prints the summary table (classes per input kind, stages reached, distinct failures) and writes
summary.json, summary.txt and the failing inputs under --out. Exits 1 when any input gave a traceback,
a hang, a crash, an accepted-wrong or a ptxas-rejected, or behaved differently in a real subprocess.
`--only INDEX` reruns one input and prints its command line and output.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tkir.tools.fuzz import campaign, inputs, oracle  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="fuzz.py", description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=1000, help="number of inputs (default 1000)")
    ap.add_argument("--start", type=int, default=0, help="first input index (default 0)")
    ap.add_argument("--seed", type=int, default=0, help="campaign seed (default 0)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="worker processes (default 2)")
    ap.add_argument("--timeout", type=float, default=oracle.TIMEOUT_S, help="seconds per input (default 10)")
    ap.add_argument("--out", default=None, help="directory for summary.json/.txt and failing inputs")
    ap.add_argument("--only", type=int, default=None, metavar="INDEX", help="rerun one input, print everything")
    args = ap.parse_args(argv)
    if args.only is not None:
        return _only(args)

    def progress(done: int, s: campaign.Summary) -> None:
        bad = {c: s.classes[c] for c in oracle.FAILURES if s.classes[c]}
        print(f"  {done}/{args.count} in {s.seconds:.0f} s {dict(s.classes)} {bad or ''}", file=sys.stderr,
              flush=True)

    summary = campaign.run(args.count, args.seed, args.jobs, args.timeout, args.start, progress, args.out)
    print(summary.table())
    if args.out:
        campaign.save(summary, args.out)
    return 1 if summary.violations else 0


def _only(args: argparse.Namespace) -> int:
    import tempfile

    oracle.warm_up()
    inp = inputs.make_input(args.seed, args.only)
    work = tempfile.mkdtemp(prefix="tkir-fuzz-one-")
    path = str(Path(work) / ("input" + inp.suffix))
    Path(path).write_text(inp.text, encoding="utf-8", errors="surrogatepass")
    res = oracle.run_forked(inp.command(path), path, inp.text, work, args.timeout, bool(inp.meta.get("wrong")),
                            inp.meta.get("option"))
    print(f"# input {args.only} ({inp.kind}: {inp.note})\n# tkc {shlex.join(inp.command(path))}\n"
          f"# class {res.cls}, stages {res.stages}, {res.seconds:.2f} s\n{res.stderr}")
    return 0 if res.cls not in oracle.FAILURES else 1


if __name__ == "__main__":
    sys.exit(main())
