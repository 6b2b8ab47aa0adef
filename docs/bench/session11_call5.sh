#!/usr/bin/env bash
# Session 11, call 5: the whole GPU suite after the session's changes (whole-row warps, overlap-mma on sm_80,
# cp.async copies of 16 bytes or nothing), then sm_80 attention with the rotation's ablation at equal stages
# (pipeline-cp-async{hold=0}) and the row again, the kernels whose cp.async copies changed against
# their peers (transpose, the --no-tma gemm), and the whole `tkc bench examples/based.tk` (its copies are
# cp.async too). Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
t0=$(date +%s)
timeout 220 python3 -m pytest -q -m gpu --timeout 200 -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
timeout 150 python3 docs/bench/session11_sm80.py --only attn5 --json "$R/attn5.json" --reps 20 >"$R/attn5.txt" 2>&1
timeout 60 tkc bench examples/transpose.tk --reps 20 >"$R/transpose.txt" 2>&1
timeout 60 tkc bench examples/gemm.tk --no-tma --size M=4096 --size N=4096 --size K=4096 --reps 20 >"$R/gemm_notma.txt" 2>&1
timeout 150 tkc bench examples/based.tk --reps 20 --json "$R/based.json" --plot "$R/based.png" >"$R/based.txt" 2>&1
{ echo "== GPU suite ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head -20
  echo "== sm_80 attention (session11_sm80.py --only attn5)"; sed -n '/^row /,$p' "$R/attn5.txt"
  grep -E "Error" "$R/attn5.txt" | head -3
  for f in transpose gemm_notma based; do echo "== $f"; grep -vE "━|^\s*$" "$R/$f.txt" | tail -8; done
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
