#!/usr/bin/env bash
# Session 11, call 9: cp.async addresses advanced by whole-row steps (one 64-bit add per copy). The whole GPU
# suite, then the sm_80 gemm (both 8-warp shapes) beside the wgmma gemm, sm_80 attention at BQ = 128,
# BKV = 64, and `tkc bench examples/based.tk`. Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
t0=$(date +%s)
timeout 220 python3 -m pytest -q -m gpu --timeout 200 -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
timeout 150 python3 docs/bench/session11_sm80.py --only gemm4,attn9 --json "$R/call9.json" --reps 20 >"$R/call9.txt" 2>&1
timeout 100 tkc bench examples/based.tk --reps 20 --json "$R/based.json" >"$R/based.txt" 2>&1
{ echo "== GPU suite ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head -20
  echo "== session11_sm80.py --only gemm4,attn9"; sed -n '/^row /,$p' "$R/call9.txt"; grep -E "Error" "$R/call9.txt" | head -3
  echo "== based"; grep -E "^based " "$R/based.txt" | awk '{print $4, $5, $6}'
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
