#!/usr/bin/env bash
# Session 16, call 9: the whole GPU suite at the final code (fence-loads out of the default pipeline,
# time_pair_ms's rotated order, tests/test_gpu_sm80.py's 64 x 64 case for both plans, fence-loads.tk).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests >"$OUT/gpu_tests.log" 2>&1
t1=$(date +%s)
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 "$OUT/gpu_tests.log"; grep -hE "^FAILED|^ERROR" "$OUT/gpu_tests.log" | head
true
