"""Launch docs/bench/session16_sm80.py's Triton GEMM (mma.sync with DISABLE_MMA_V3=1) a few times at
4096^3, for Nsight Compute (docs/bench/session16_call3.sh).

    DISABLE_MMA_V3=1 python3 docs/bench/session16_triton_mm.py BM BN BK STAGES WARPS
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    import torch

    spec = importlib.util.spec_from_file_location("s16", HERE / "session16_sm80.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mm, triton = mod.triton_kernel()
    bm, bn, bk, st, nw = (int(x) for x in sys.argv[1:6])
    m = n = k = 4096
    a = torch.randn(m, k, device="cuda").bfloat16()
    b = torch.randn(k, n, device="cuda").bfloat16()
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    for _ in range(3):
        mm[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
                 BM=bm, BN=bn, BK=bk, GROUP_M=8, num_stages=st, num_warps=nw)
    torch.cuda.synchronize()
    err = ((c.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()).item()
    print(f"rel err {err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
