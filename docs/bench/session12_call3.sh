#!/usr/bin/env bash
# Session 12, call 3: the sm_80 gemm at 4096^3, BK = 32 (half the copies and ldmatrix addresses per k-tile) and 2 producer warps,
# beside the one-role loop (pw0) and 4 producer warps (pw4np), each checked first.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 400 python3 docs/bench/session11_sm80.py --only gemm12b --json "$R/gemm12b.json" >"$R/gemm12b.log" 2>&1
{ echo "== sm_80 gemm 4096^3, producer warps (row, ok, TFLOP/s, cuBLAS, x wgmma)"
  sed -n '/^row /,$p' "$R/gemm12b.log"; grep -E "Error|error" "$R/gemm12b.log" | head -5
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
