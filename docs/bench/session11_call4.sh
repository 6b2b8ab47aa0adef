#!/usr/bin/env bash
# Session 11, call 4 (issue 13 item 4): overlap-mma on the mma.sync path. The sm_80 GPU tests (the rotated
# loops among them), then sm_80 attention at (8, 16, 4096): the rotated loop (BKV = 32, STAGES = 3 / 4)
# against call 1's best (BKV = 64, STAGES = 2) and the same loop not rotated (pipeline-cp-async{hold=0}),
# FA2 and cuDNN in every row; and the sm_80 gemm after the cp.async change (16 bytes or nothing per
# chunk) beside the wgmma gemm. Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_sm80.py >"$R/gpu_tests.log" 2>&1
timeout 300 python3 docs/bench/session11_sm80.py --only attn4,gemm4 --json "$R/call4.json" --reps 20 >"$R/call4.txt" 2>&1
{ echo "== GPU tests (tests/test_gpu_sm80.py)"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head
  echo "== docs/bench/session11_sm80.py --only attn4,gemm4"; sed -n '/^row /,$p' "$R/call4.txt"; grep -E "Error" "$R/call4.txt" | head -3
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
