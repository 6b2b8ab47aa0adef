"""Run one CUTLASS Ampere GEMM of docs/bench/cutlass_sm80/ at 4096^3 twice (for Nsight Compute's -c 1).

    python3 docs/bench/session24_cutlass_mm.py NAME [LIB]    # LIB: .cutlass/libcutlass_sm80.so
"""

from __future__ import annotations

import ctypes
import sys

import torch


def main() -> int:
    name = sys.argv[1]
    lib = ctypes.CDLL(sys.argv[2] if len(sys.argv) > 2 else ".cutlass/libcutlass_sm80.so")
    fn = getattr(lib, name)
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 4
    m = n = k = 4096
    a = torch.randn(m, k, device="cuda").bfloat16()
    b = torch.randn(k, n, device="cuda").bfloat16()
    c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(2):
        rc = fn(m, n, k, a.data_ptr(), b.data_ptr(), c.data_ptr(), torch.cuda.current_stream().cuda_stream)
        if rc:
            raise SystemExit(f"{name}: status {rc}")
    torch.cuda.synchronize()
    err = ((c.float() - a.float() @ b.float()).norm() / (a.float() @ b.float()).norm()).item()
    print(f"{name}: rel err {err:.2e}")
    return 0 if err < 2e-2 else 1


if __name__ == "__main__":
    sys.exit(main())
