"""Session 15, call 1: a screen of cache hints and FMA contraction on issue 15's row-kernel misses.

For each point (a row kernel at a size, with the configuration session 14's sweep tuned for it) the
kernel is compiled once with the default pipeline and once with contract-fma added; the default PTX is
then rewritten into variants that differ only in the cache qualifiers of the global loads and stores
(regular expressions over the PTX text, below). Every variant is checked against the reference on fresh
inputs first, then all variants and torch.compile (Inductor) are timed interleaved (tkir.bench's
time_pair_ms: L2 flush, host lead, medians, inputs rotated past L2). This is a screen to pick what to
build as a pass, not a product path: the winner is then implemented in the compiler and measured again.

    python3 docs/bench/session15_hints.py --out DIR [--reps 30] [--only 0,3]
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "bench"))

# (kernel, N, consts): session 14's misses with their tuned consts (docs/bench/latest/session14/call5_sweep)
POINTS = [
    ("layernorm", 4096, dict(D=8192, DC=8192, ROWS=1, WG=1, OCC=4, HOIST=0)),
    ("layernorm", 4096, dict(D=16384, DC=16384, ROWS=1, WG=2, OCC=0, HOIST=0)),
    ("layernorm", 65536, dict(D=768, DC=1024, ROWS=4, WG=1, OCC=0, HOIST=1)),
    ("layernorm", 65536, dict(D=16384, DC=16384, ROWS=1, WG=2, OCC=0, HOIST=0)),
    ("rmsnorm", 4096, dict(D=8192, DC=16384, ROWS=1, WG=2, OCC=0, HOIST=1)),
    ("rmsnorm", 4096, dict(D=16384, DC=16384, ROWS=1, WG=4, OCC=0, HOIST=0)),
    ("rmsnorm", 65536, dict(D=768, DC=4096, ROWS=8, WG=4, OCC=0, HOIST=1)),
    ("rmsnorm", 65536, dict(D=8192, DC=4096, ROWS=1, WG=4, OCC=4, HOIST=0)),
    ("layernorm", 65536, dict(D=4096, DC=4096, ROWS=2, WG=2, OCC=4, HOIST=0)),   # passes: a control
    ("softmax", 65536, dict(D=8192, DC=8192, ROWS=1, WG=2, OCC=0)),              # not run in session 14
    # chunk loops (two reads of X), which an evict_last first pass may favour
    ("layernorm", 65536, dict(D=16384, DC=4096, ROWS=1, WG=4, OCC=4, HOIST=0)),
    ("layernorm", 4096, dict(D=16384, DC=2048, ROWS=1, WG=4, OCC=4, HOIST=0)),
    ("rmsnorm", 4096, dict(D=16384, DC=4096, ROWS=1, WG=4, OCC=0, HOIST=0)),
]

POLICY = "%tkhint"
_LD = re.compile(r"\bld\.global\.((?:v[248]\.)?[busf]\d+)\s+([^;]*?)\s*;")
_ST = re.compile(r"\bst\.global\.((?:v[248]\.)?[busf]\d+)\s+([^;]*?)\s*;")


def _with_policy(ptx: str, priority: str) -> str:
    """Declare the 64-bit policy register and create it at the top of the entry's body."""
    i = ptx.index("{", ptx.index(".entry"))
    j = ptx.index("{", i + 1) if ptx[i + 1:].lstrip().startswith("(") else i
    return (ptx[:j + 1] + f"\n\t.reg .b64 {POLICY};\n\tcreatepolicy.fractional.L2::{priority}.b64 {POLICY}, 1.0;\n"
            + ptx[j + 1:])


def rewrite(ptx: str, ld: str | None, st: str | None, policy: str | None = None) -> str:
    """Loads get qualifier `ld` and stores `st` (None: unchanged); 'HINT' in either means
    `.L2::cache_hint` with an L2 policy of priority `policy` as the last operand."""
    out = ptx
    if policy:
        out = _with_policy(out, policy)
    if ld:
        out = _LD.sub(lambda m: f"ld.global.{ld.replace('HINT', 'L2::cache_hint')}.{m[1]} {m[2]}"
                      + (f", {POLICY};" if "HINT" in ld else ";"), out)
    if st:
        out = _ST.sub(lambda m: f"st.global.{st.replace('HINT', 'L2::cache_hint')}.{m[1]} {m[2]}"
                      + (f", {POLICY};" if "HINT" in st else ";"), out)
    return out


def rewrite_split(ptx: str) -> str:
    """Loads before the first block barrier (a chunk loop's first pass, or a one-read kernel's row) get
    an L2 evict_last policy, loads after it evict_first, stores evict_first: what Inductor's looped
    reductions ask for (the first pass is read again, the last is not)."""
    last, first = "%tkhint_last", "%tkhint_first"
    i = ptx.index("{", ptx.index(".entry"))
    ptx = (ptx[:i + 1] + f"\n\t.reg .b64 {last};\n\t.reg .b64 {first};\n"
           f"\tcreatepolicy.fractional.L2::evict_last.b64 {last}, 1.0;\n"
           f"\tcreatepolicy.fractional.L2::evict_first.b64 {first}, 1.0;\n" + ptx[i + 1:])
    cut = ptx.find("bar.sync")
    cut = len(ptx) if cut < 0 else cut

    def ld(m: re.Match) -> str:
        pol = last if m.start() < cut else first
        return f"ld.global.L2::cache_hint.{m[1]} {m[2]}, {pol};"

    ptx = _LD.sub(ld, ptx)
    return _ST.sub(lambda m: f"st.global.L1::evict_first.L2::cache_hint.{m[1]} {m[2]}, {first};", ptx)


PRIORITIES = ("evict_last", "evict_first", "evict_normal", "evict_unchanged")


def rewrite_policies(ptx: str, before: str | None, after: str | None, store: str | None,
                     ld_l1: str = "") -> str:
    """L2 policies by position: loads before the first block barrier get priority `before`, loads after
    it `after`, stores `store` (None: no hint); `ld_l1` an L1 qualifier for the loads (e.g.
    'L1::no_allocate.'). Call 2's decomposition of call 1's `split`."""
    regs = {p: f"%tkhint_{p}" for p in PRIORITIES}
    i = ptx.index("{", ptx.index(".entry"))
    decl = "".join(f"\n\t.reg .b64 {r};\n\tcreatepolicy.fractional.L2::{p}.b64 {r}, 1.0;"
                   for p, r in regs.items() if p in (before, after, store))
    ptx = ptx[:i + 1] + decl + "\n" + ptx[i + 1:]
    cut = ptx.find("bar.sync")
    cut = len(ptx) if cut < 0 else cut

    def ld(m: re.Match) -> str:
        pol = before if m.start() < cut else after
        if pol is None:
            return f"ld.global.{ld_l1}{m[1]} {m[2]};"
        return f"ld.global.{ld_l1}L2::cache_hint.{m[1]} {m[2]}, {regs[pol]};"

    ptx = _LD.sub(ld, ptx)
    if store:
        ptx = _ST.sub(lambda m: f"st.global.L2::cache_hint.{m[1]} {m[2]}, {regs[store]};", ptx)
    return ptx


# call 2's variants: name -> (contract-fma, before, after, store, ld_l1)
POLICY_VARIANTS = {
    "base": (False, None, None, None, ""),
    "split": (False, "evict_last", "evict_first", "evict_first", ""),
    "ld_el": (False, "evict_last", "evict_last", None, ""),
    "ld_el_st_ef": (False, "evict_last", "evict_last", "evict_first", ""),
    "split_st_none": (False, "evict_last", "evict_first", None, ""),
    "ld_en": (False, "evict_normal", "evict_normal", None, ""),
    "ld_eu": (False, "evict_unchanged", "evict_unchanged", None, ""),
    "pre_el": (False, "evict_last", None, None, ""),
    "post_ef": (False, None, "evict_first", None, ""),
    "split_na": (False, "evict_last", "evict_first", "evict_first", "L1::no_allocate."),
    "fma_split": (True, "evict_last", "evict_first", "evict_first", ""),
}

# variant -> (pipeline has contract-fma, ld qualifier, st qualifier, L2 policy priority)
VARIANTS = {
    "base": (False, None, None, None),
    "fma": (True, None, None, None),
    "ld_nc_noalloc": (False, "nc.L1::no_allocate", None, None),
    "ld_cs_st_cs": (False, "cs", "cs", None),
    "st_cs": (False, None, "cs", None),
    "ld_ef_st_ef": (False, "L1::evict_first.HINT", "L1::evict_first.HINT", "evict_first"),
    "st_ef": (False, None, "L1::evict_first.HINT", "evict_first"),
    "ld_256B": (False, "L2::256B", None, None),
    "split": (False, "SPLIT", None, None),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--only", default="")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--policies", action="store_true", help="call 2: POLICY_VARIANTS instead of VARIANTS")
    ap.add_argument("--ab-fma", action="store_true", help="instead: the examples contract-fma changes, "
                    "default pipeline against default + contract-fma, ABAB")
    a = ap.parse_args()
    if a.ab_fma:
        return ab_fma(a)
    import sweep15
    import torch

    import tkir
    import tkir.bench as tb
    from tkir.api import default_pipeline
    from tkir.examples import load_companion

    sweep15.patch_rel_err(tb)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    names = list(POLICY_VARIANTS) if a.policies else a.variants.split(",")
    only = {int(x) for x in a.only.split(",") if x}
    pipe = default_pipeline()
    fma_pipe = pipe[:pipe.index("fold-scale") + 1] + ["contract-fma"] + pipe[pipe.index("fold-scale") + 1:]
    recs, table = [], []
    for idx, (kern, n, consts) in enumerate(POINTS):
        if only and idx not in only:
            continue
        path = str(ROOT / "examples" / f"{kern}.tk")
        comp = sweep15.GpuRowInputs(load_companion(path), kern)
        sizes = {"N": n}
        kernels, ptx_dir = {}, out / f"p{idx}"
        ptx_dir.mkdir(exist_ok=True)
        for v in names:
            if a.policies:
                fma, *spec = POLICY_VARIANTS[v]
                k = tkir.compile(path, passes=fma_pipe if fma else pipe, **consts)
                k.lower()
                if any(spec[:3]) or spec[3]:
                    k.asm["ptx"] = rewrite_policies(k.asm["ptx"], *spec)
                (ptx_dir / f"{v}.ptx").write_text(k.asm["ptx"])
                kernels[v] = k
                continue
            fma, ld, st, pol = VARIANTS[v]
            k = tkir.compile(path, passes=fma_pipe if fma else pipe, **consts)
            k.lower()
            if ld == "SPLIT":
                k.asm["ptx"] = rewrite_split(k.asm["ptx"])
            elif ld or st:
                k.asm["ptx"] = rewrite(k.asm["ptx"], ld, st, pol)
            (ptx_dir / f"{v}.ptx").write_text(k.asm["ptx"])
            kernels[v] = k
        nbytes = comp.bytes_moved(sizes, consts)
        nsets = max(2, min(tb.MAX_ROTATE_SETS, -(-int(tb.ROTATE_FACTOR * tb.L2_BYTES) // nbytes),
                           max(1, tb.ROTATE_BUDGET // nbytes)))
        sets = [comp.torch_inputs(sizes, consts) for _ in range(nsets)]
        errs = {}
        for v, k in kernels.items():   # correctness first: fresh NaN output, every variant
            sets[0][-1].fill_(float("nan"))
            k(*sets[0])
            torch.cuda.synchronize()
            ref = comp.torch_reference(sets[0], sizes, consts)["Y"]
            errs[v] = float(tb._rel_err(torch, sets[0][-1], ref))
        fns = [(lambda i, k=k, s=sets: (lambda: k(*s[i]))) for k in kernels.values()]
        fns.append(lambda i, s=sets, c=comp, z=sizes, q=consts: c.extra_peer("compiled", s[i], z, q))
        ms = tb.time_pair_ms(torch, fns, nsets, a.reps, 5)
        rec = dict(point=idx, kernel=kern, N=n, consts=consts, bytes=nbytes, nsets=nsets,
                   ms=dict(zip([*names, "compiled"], ms, strict=True)), rel_err=errs)
        recs.append(rec)
        base, comp_ms = rec["ms"]["base"], rec["ms"]["compiled"]
        line = (f"{kern:9s} {n:6d}x{consts['D']:<6d} base {1e3 * base:8.1f} us {nbytes / base / 1e6:6.0f} GB/s"
                f"  compiled {1e3 * comp_ms:8.1f} (x{comp_ms / base:.3f})  "
                + "  ".join(f"{v} {base / rec['ms'][v]:.3f}" for v in names[1:])
                + f"  maxerr {max(errs.values()):.1e}")
        print(line, flush=True)
        table.append(line)
        del sets, fns
        torch.cuda.empty_cache()
    (out / "hints.json").write_text(json.dumps(recs, indent=1))
    print("\n== speedup over base (base ms / variant ms); compiled column: compiled ms / base ms")
    print("\n".join(table))
    return 0


# examples whose PTX contract-fma changes (besides the row kernels), at their bench sizes
AB_FMA = [
    ("attention_fwd", dict(B=8, H=16, N=4096), dict(D=128)),
    ("attention_fwd", dict(B=8, H=16, N=4096), dict(D=128, CAUSAL=1)),
    ("based", dict(B=16, H=16, N=4096), {}),
    ("based", dict(B=16, H=16, N=16384), {}),
    ("linear", dict(M=4096, N=4096, K=4096), dict(ACT=1)),
    ("rotary", dict(T=65536), {}),
]


def ab_fma(a: argparse.Namespace) -> int:
    """Each example of AB_FMA benched (tkir.bench.bench_one, no peer) four times: default, +fma,
    default, +fma; prints ms of each and the ratio of the medians of the two pairs."""
    import torch  # noqa: F401 - CUDA up before the first compile

    import tkir.bench as tb
    from tkir.api import default_pipeline
    from tkir.examples import load_companion

    pipe = default_pipeline()
    fma_pipe = pipe[:pipe.index("fold-scale") + 1] + ["contract-fma"] + pipe[pipe.index("fold-scale") + 1:]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    recs = []
    for name, sizes, consts in AB_FMA:
        path = str(ROOT / "examples" / f"{name}.tk")
        comp = load_companion(path)
        runs = []
        for label, pl in (("base", pipe), ("fma", fma_pipe), ("base", pipe), ("fma", fma_pipe)):
            row = tb.bench_one(path, comp, dict(sizes), dict(consts), reps=a.reps, peer=False,
                               compile_kw={"passes": pl})
            runs.append(dict(label=label, ms=row.ms, rel_err=row.rel_err, ok=bool(row.ok)))
        b = [r["ms"] for r in runs if r["label"] == "base"]
        f = [r["ms"] for r in runs if r["label"] == "fma"]
        rec = dict(example=name, sizes=sizes, consts=consts, runs=runs, speedup=sum(b) / sum(f))
        recs.append(rec)
        print(f"ab-fma {name:14s} {sizes} {consts}  base {b[0] * 1e3:.1f} {b[1] * 1e3:.1f} us  fma "
              f"{f[0] * 1e3:.1f} {f[1] * 1e3:.1f} us  speedup x{rec['speedup']:.3f}  "
              f"ok {all(r['ok'] for r in runs)} err {max(r['rel_err'] for r in runs):.1e}", flush=True)
    (out / "ab_fma.json").write_text(json.dumps(recs, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
