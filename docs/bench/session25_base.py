"""Session 25: the PTX of session16_sm80.py's `file:` rows, compiled by the checkout this runs in (the parent
commit of a change, so the change and its parent are timed in one process on the device).

    python3 docs/bench/session25_base.py OUT_DIR [SET]     # SET: call1 (default) or call3
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import tkir  # noqa: E402

SETS = {}
SETS["call1"] = {  # file name -> (constants, pipeline-cp-async replacement or None)
    "mm32.ptx": (dict(BM=128, BN=256, BK=32, STAGES=4), None),
    "mm32_fa4.ptx": (dict(BM=128, BN=256, BK=32, STAGES=4), "pipeline-cp-async{fragments_ahead=4}"),
    "mm64.ptx": (dict(BM=256, BN=128, BK=64, STAGES=4), None),
}
SETS["call3"] = {  # step_ahead's defaults without the split cp.async addresses (rules_sm80.py before it)
    "sa_default.ptx": ({}, None),
    "sa_mm32.ptx": (dict(BM=128, BN=256, BK=32, STAGES=4), None),
    "sa_mm64.ptx": (dict(BM=256, BN=128, BK=64, STAGES=4), None),
}


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    for name, (consts, cp) in SETS[sys.argv[2] if len(sys.argv) > 2 else "call1"].items():
        passes = None
        if cp:
            passes = ",".join(cp if p == "pipeline-cp-async" else p for p in tkir.api.default_pipeline())
        k = tkir.compile(str(ROOT / "examples/gemm.tk"), target="sm_80", **({"passes": passes} if passes else {}),
                         **consts)
        k.lower()
        (out / name).write_text(k.asm["ptx"])
        print(out / name)


if __name__ == "__main__":
    main()
