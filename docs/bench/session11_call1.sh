#!/usr/bin/env bash
# Session 11, call 1 (issue 13 item 4, the mma.sync path): the sm_80 GPU tests (whole-row warps of 32 rows
# included), then docs/bench/session11_sm80.py: the mma.sync ceilings, gemm tile shapes and warp counts at
# 4096^3 beside the wgmma gemm and cuBLAS, attention on sm_80 beside FA2 and cuDNN. Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_sm80.py >"$R/gpu_tests.log" 2>&1
timeout 330 python3 docs/bench/session11_sm80.py --json "$R/sm80.json" --reps 20 >"$R/sm80.txt" 2>&1
{ echo "== GPU tests (tests/test_gpu_sm80.py)"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head
  echo "== docs/bench/session11_sm80.py"; sed -n '/^row /,$p' "$R/sm80.txt"; grep -E "Error|error" "$R/sm80.txt" | head -5; } >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
