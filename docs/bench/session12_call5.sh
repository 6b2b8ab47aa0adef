#!/usr/bin/env bash
# Session 12, call 5: the whole GPU suite at the session's head (sm_80 gemm/linear now with cp.async
# producer warps), `tkc bench examples/gemm.tk --target sm_80` at 4096^3 (the example's own tile), and the
# claims table's rows (a) and (b) (the sm_80 gemm at 256x128x64 S4 and attention at BQ=128 BKV=64).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
t0=$(date +%s)
timeout 260 python3 -m pytest -q -m gpu --timeout 200 -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
timeout 60 tkc bench examples/gemm.tk --target sm_80 --size M=4096 --size N=4096 --size K=4096 --reps 20 \
  >"$R/gemm80.txt" 2>&1
timeout 150 python3 docs/bench/claims.py --json "$R/claims.json" --sm80 BM=256,BN=128,BK=64,STAGES=4 \
  --sm80-attn BQ=128,BKV=64 --reps 20 --skip c,d >"$R/claims.txt" 2>&1
{ echo "== GPU suite ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head -20
  echo "== tkc bench examples/gemm.tk --target sm_80 (4096^3)"; grep -vE "━|^\s*$" "$R/gemm80.txt" | tail -6
  echo "== claims (a), (b)"; tail -25 "$R/claims.txt"
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
