#!/usr/bin/env bash
# Session 23, call 5 (issue 13): the sm_80 GPU tests after the test fixes of call 4 (the interpreter-vs-GPU check
# on the rotated default and on the producer warps; the producer FileCheck kernel with producer_warps=4), then the
# claims table's rows (a), (b), (d) with the sm_80 gemm at its best tile, 256 x 128 x 64 S4 (one role, rotated)
# (docs/bench/claims.py).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 120 python3 -m pytest -q -m gpu -n 8 tests/test_gpu_sm80.py -p no:cacheprovider >"$OUT/gpu_sm80.txt" 2>&1
echo "gpu sm80: $(tail -1 "$OUT/gpu_sm80.txt")"
grep -E "^FAILED|^ERROR" "$OUT/gpu_sm80.txt" | head -5
timeout 300 python3 docs/bench/claims.py --json "$OUT/claims.json" --sm80 BM=256,BN=128,BK=64,STAGES=4 --skip c \
  >"$OUT/claims.txt" 2>&1
tail -25 "$OUT/claims.txt"
true
