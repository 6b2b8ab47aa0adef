"""md5 of the PTX of every example configuration on both targets: the proof that a backend refactor
changed nothing (`python3 scripts/ptx_md5.py > before.txt`, refactor, run again, `diff`)."""

from __future__ import annotations

import hashlib
import os
import sys

os.environ.setdefault("TKIR_CACHE", "0")

import tkir  # noqa: E402

CONFIGS: list[tuple[str, dict, dict]] = [
    ("examples/gemm.tk", {}, {}),
    ("examples/gemm.tk", {}, {"no_tma": True}),
    ("examples/gemm.tk", {}, {"swizzle": "none"}),
    ("examples/gemm.tk", {}, {"pass_options": {"stream_k": 1}}),
    ("examples/gemm.tk", {}, {"pass_options": {"epilogue_chunk": 128}}),
    ("examples/gemm.tk", {"BM": 64}, {}),
    ("examples/softmax.tk", {}, {}),
    ("examples/layernorm.tk", {}, {}),
    ("examples/rotary.tk", {}, {}),
]
for d in (64, 128):
    for causal in (0, 1):
        CONFIGS.append(("examples/attention_fwd.tk", {"D": d, "CAUSAL": causal}, {}))
CONFIGS.append(("examples/attention_fwd.tk", {"D": 128}, {"swizzle": "none"}))


def main(extra: list[str]) -> int:
    paths = [(p, c, o) for p, c, o in CONFIGS] + [(p, {}, {}) for p in extra]
    for path, consts, opts in paths:
        for target in ("sm_90a", "sm_80"):
            if target == "sm_80" and (opts.get("pass_options") or opts.get("swizzle") or opts.get("no_tma")):
                continue
            label = f"{path} {consts} {opts} {target}"
            try:
                k = tkir.compile(path, target=target, **opts, **consts)
                ptx = k.asm["ptx"]
                print(hashlib.md5(ptx.encode()).hexdigest(), label)
            except Exception as e:  # noqa: BLE001 - the listing records failures as they are
                print("ERROR", label, type(e).__name__, str(e).splitlines()[0][:120])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
