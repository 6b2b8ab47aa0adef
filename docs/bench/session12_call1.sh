#!/usr/bin/env bash
# Session 12, call 1: the sm_80 gemm at 4096^3 with cp.async producer warps (plan-occupancy{producer_warps=P},
# pipeline's sm_80 roles) against the one-role cp.async loop (P = 0) and the wgmma gemm, each checked first.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 400 python3 docs/bench/session11_sm80.py --only gemm12 --json "$R/gemm12.json" >"$R/gemm12.log" 2>&1
{ echo "== sm_80 gemm 4096^3, producer warps (row, ok, TFLOP/s, cuBLAS, x wgmma)"
  sed -n '/^row /,$p' "$R/gemm12.log"; grep -E "Error|error" "$R/gemm12.log" | head -5
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
