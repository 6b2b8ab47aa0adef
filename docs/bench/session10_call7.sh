#!/usr/bin/env bash
# Session 10, call 7 (issue 13, Based): examples/based.tk with no producer warpgroup (two one-warpgroup
# blocks per SM, cp.async ring buffers): the GPU correctness tests (the four sizes: O and the three
# states), then the whole `tkc bench examples/based.tk` (B = H = 16, N = 1024 ... 16384, against the
# PyTorch chunked form and flash-linear-attention in the same run). Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_based.py >"$R/gpu_tests.log" 2>&1
timeout 240 tkc bench examples/based.tk --reps 20 --json "$R/based.json" --plot "$R/based.png" >"$R/based.txt" 2>&1
{ echo "== GPU tests"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED" "$R/gpu_tests.log" | head
  echo "== tkc bench examples/based.tk"; grep -vE "━|^\s*$" "$R/based.txt" | tail -14; } >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
