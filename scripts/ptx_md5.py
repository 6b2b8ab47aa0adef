"""md5 of the PTX (and of the tile IR after the passes) of every example configuration and every
conformance case, on both targets: the proof that a refactor changed nothing.

    python3 scripts/ptx_md5.py > before.txt          # the example configurations (37 lines)
    python3 scripts/ptx_md5.py --conformance -j 2 > before_conf.txt   # + every conformance case
    ... refactor ...
    python3 scripts/ptx_md5.py [...] > after.txt && diff before.txt after.txt
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

os.environ.setdefault("TKIR_CACHE", "0")

ROOT = Path(__file__).resolve().parent.parent

CONFIGS: list[tuple[str, dict, dict]] = [
    ("examples/gemm.tk", {}, {}),
    ("examples/gemm.tk", {}, {"no_tma": True}),
    ("examples/gemm.tk", {}, {"swizzle": "none"}),
    ("examples/gemm.tk", {}, {"passes": "canonicalize,legalize-mma,infer-layouts,select-swizzle,bank-conflicts,"
                                        "create-tma,plan-occupancy,pipeline,persistent,stream-k,canonicalize"}),
    ("examples/gemm.tk", {}, {"passes": "canonicalize,legalize-mma,infer-layouts,select-swizzle,bank-conflicts,"
                                        "create-tma{epilogue_chunk=128},plan-occupancy,pipeline,persistent,canonicalize"}),
    # the 64-row tile at the rest of the old header's consts (BN, STAGES, SK, SKI are auto: given here, so the
    # line keeps naming the same kernel rather than what auto picks at BM=64)
    ("examples/gemm.tk", {"BM": 64, "BN": 256, "STAGES": 4, "SK": 0, "SKI": 16}, {}),
    ("examples/softmax.tk", {}, {}),
    ("examples/layernorm.tk", {}, {}),
    ("examples/rotary.tk", {}, {}),
]
# attention_fwd.tk's BQ and BKV are auto now: the 64 x 64 tile its header gave is given, so the lines keep naming the
# same kernels (its auto tile is the last line)
for d in (64, 128):
    for causal in (0, 1):
        CONFIGS.append(("examples/attention_fwd.tk", {"D": d, "CAUSAL": causal, "BQ": 64, "BKV": 64}, {}))
CONFIGS.append(("examples/attention_fwd.tk", {"D": 128, "BQ": 64, "BKV": 64}, {"swizzle": "none"}))
# the examples added later (linear, transpose, rmsnorm; listed after the original 23, so older listings still
# diff line by line)
CONFIGS += [("examples/linear.tk", {}, {}), ("examples/transpose.tk", {}, {}), ("examples/rmsnorm.tk", {}, {}),
            ("examples/rmsnorm.tk", {"D": 8192, "ROWS": 1}, {})]  # one wide row a block (its warps: infer-layouts)
# Based and the sm_80 attention tiles the bench uses (32-row warps; rotated at STAGES = 3)
CONFIGS += [("examples/based.tk", {}, {}), ("examples/attention_fwd.tk", {"BQ": 128, "BKV": 64}, {}),
            ("examples/attention_fwd.tk", {"BQ": 128, "BKV": 32, "STAGES": 3}, {})]
CONFIGS += [("examples/attention_fwd.tk", {}, {})]  # at its defaults: the auto tile (128 x 128 at D = 128)


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def _example(item: tuple[str, dict, dict, str]) -> str:
    import tkir

    path, consts, opts, target = item
    label = f"{path} {consts} {opts} {target}"
    try:
        k = tkir.compile(str(ROOT / path), target=target, **opts, **consts)
        return f"{_md5(k.asm['ptx'])} {label}"
    except Exception as e:  # noqa: BLE001 - the listing records failures as they are
        return f"ERROR {label} {type(e).__name__} {str(e).splitlines()[0][:120]}"


def _conformance(case_id: str) -> str:
    """'<ptx md5> <ir md5> <id>' for one conformance case; 'refused'/'ERROR' lines record the rest."""
    from conformance.cases import all_cases, kernel_source

    import tkir
    from tkir.diagnostics import CompileError

    case = {c.id: c for c in all_cases()}[case_id]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "case.tk"  # one fixed name: locations in diagnostics do not vary
        path.write_text(kernel_source(case), encoding="utf-8")
        try:
            k = tkir.compile(str(path), target=case.target)
            ir = k.ir
            ptx = k.asm["ptx"]
        except CompileError as e:
            return f"refused {_md5(e.format().replace(str(path), 'case.tk'))} {case_id}"
        except Exception as e:  # noqa: BLE001
            return f"ERROR {type(e).__name__} {case_id}"
    return f"{_md5(ptx)} {_md5(ir)} {case_id}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("extra", nargs="*", help="more .tk files, default constants")
    ap.add_argument("--conformance", action="store_true", help="also every conformance case")
    ap.add_argument("-j", type=int, default=1, help="worker processes")
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    items = []
    for path, consts, opts in [*CONFIGS, *[(p, {}, {}) for p in args.extra]]:
        for target in ("sm_90a", "sm_80"):
            if target == "sm_80" and (opts.get("passes") or opts.get("swizzle") or opts.get("no_tma")):
                continue
            items.append((path, consts, opts, target))
    with ProcessPoolExecutor(args.j) as pool:
        for line in pool.map(_example, items):
            print(line, flush=True)
        if args.conformance:
            from conformance.cases import all_cases

            ids = [c.id for c in all_cases()]
            for line in pool.map(_conformance, ids, chunksize=8):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
