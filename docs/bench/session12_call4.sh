#!/usr/bin/env bash
# Session 12, call 4: the sm_80 GPU tests (the gemm's default is now 4 cp.async producer warps; the one-role
# loop is its ablation, plan-occupancy{producer_warps=0}), then the gemm at 4096^3 default against the
# ablation twice, and sm_80 attention at (8, 16, 4096) with producer warps asked for. Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_sm80.py >"$R/gpu_tests.log" 2>&1
timeout 300 python3 docs/bench/session11_sm80.py --only gemm12c,attn12 --json "$R/bench.json" >"$R/bench.log" 2>&1
{ echo "== GPU tests (tests/test_gpu_sm80.py)"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head
  echo "== sm_80 gemm 4096^3 and attention (8, 16, 4096) (row, ok, TFLOP/s, peer, x wgmma, x FA2)"
  sed -n '/^row /,$p' "$R/bench.log"; grep -E "Error|error" "$R/bench.log" | head -5
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
