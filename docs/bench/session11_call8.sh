#!/usr/bin/env bash
# Session 11, call 8: the sm_80 GPU tests at the final head (rotation gated by registers), and the example's
# own attention tile (BQ = 64) at STAGES = 3 rotated or not, beside BQ = 128 BKV = 64. Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_sm80.py >"$R/gpu_tests.log" 2>&1
timeout 150 python3 docs/bench/session11_sm80.py --only attn8 --json "$R/attn8.json" --reps 20 >"$R/attn8.txt" 2>&1
{ echo "== GPU tests (tests/test_gpu_sm80.py)"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head
  echo "== docs/bench/session11_sm80.py --only attn8"; sed -n '/^row /,$p' "$R/attn8.txt"; grep -E "Error" "$R/attn8.txt" | head -3
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
