#!/usr/bin/env bash
# Session 23, call 2 (issue 13): with the rotated loop as pipeline-cp-async's default (rotate=1), the whole GPU
# suite (two conformance cases and the sm_80 GEMM tests rotate), then the 4096^3 sweep of 8-warp tiles, stages and
# BK with the rotation, other R, the 4-warp tiles again, and a k16 step's A loaded a unit ahead (a_ahead) / B two
# units ahead (fragments_ahead=2) (docs/bench/session16_sm80.py --set session23b).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
timeout 230 python3 -m pytest -q -m gpu -n 16 tests -p no:cacheprovider >"$OUT/gpu_suite.txt" 2>&1
echo "gpu suite: $(tail -1 "$OUT/gpu_suite.txt") ($(( $(date +%s) - t0 )) s)"
DISABLE_MMA_V3=1 timeout 330 python3 docs/bench/session16_sm80.py --set session23b --out "$OUT" >"$OUT/sm80_session23b.txt" 2>&1
grep -E "^FAILED|^ERROR" "$OUT/gpu_suite.txt" | head -10
sed -n '/^== 4096/,$p' "$OUT/sm80_session23b.txt"; grep -E "Error|Traceback" "$OUT/sm80_session23b.txt" | head -5
true
