#!/usr/bin/env bash
# Session 11, call 3 (issue 13): sm_80 attention at BKV = 48 against 64 (three interleaved repetitions each,
# FA2 and cuDNN in the same rows), the whole `tkc bench examples/based.tk` again, and the claims table
# (docs/bench/claims.py: with the mma.sync ceilings in row (a), the sm_80 attention at BQ = 128, BKV = 64).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 150 python3 docs/bench/session11_sm80.py --only attn3 --json "$R/attn3.json" --reps 20 >"$R/attn3.txt" 2>&1
timeout 240 tkc bench examples/based.tk --reps 20 --json "$R/based.json" --plot "$R/based.png" >"$R/based.txt" 2>&1
timeout 180 python3 docs/bench/claims.py --json "$R/claims.json" --sm80 BM=256,BN=128,BK=64,STAGES=4 \
    --sm80-attn BQ=128,BKV=64 --reps 20 --skip c >"$R/claims.txt" 2>&1
{ echo "== sm_80 attention (docs/bench/session11_sm80.py --only attn3)"; sed -n '/^row /,$p' "$R/attn3.txt"
  grep -E "Error" "$R/attn3.txt" | head -3
  echo "== tkc bench examples/based.tk"; grep -vE "━|^\s*$" "$R/based.txt" | tail -12
  echo "== docs/bench/claims.py"; sed -n '/^claim/,$p' "$R/claims.txt"; grep -E "Error" "$R/claims.txt" | head -3
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
