#!/usr/bin/env bash
# Session 10, call 4 (issue 12): causal attention made persistent with the rotated tile order
# (`-D PERSIST=1`): first correctness on the GPU at the issue's odd lengths (N = 1, 100, 1000, 4097;
# D = 64, 128, 256; `tkc run --check` against the float64 reference), then the issue's bench with the
# persistent choice tuned per row (`tkc bench --tune PERSIST`, cuDNN and FA2 in the same run).
# Results under $OUT: summary.txt, results.tgz.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$R/gpu.txt" 2>&1
t0=$(date +%s)
for d in "D=128 -D BQ=128 -D BKV=128" "D=64 -D BQ=192 -D BKV=128" "D=256 -D BQ=128 -D BKV=64"; do
  for n in 1 100 1000 4097; do
    timeout 120 tkc run examples/attention_fwd.tk --check -D $d -D CAUSAL=1 -D PERSIST=1 --size B=2 --size H=3 \
      --size N=$n 2>&1 | tail -2 >>"$R/checks.txt"
  done
done
t1=$(date +%s)
TKIR_CACHE=1 TKIR_CACHE_DIR=/tmp/tkc-s10 timeout ${BENCH_TIMEOUT:-420} tkc bench examples/attention_fwd.tk \
  --tune PERSIST --reps 20 --json "$R/attention_fwd.json" --plot "$R/attention_fwd.png" >"$R/attention_fwd.txt" 2>&1
t2=$(date +%s)
{
  echo "== causal PERSIST=1 checks ($((t1 - t0)) s): $(grep -c ' ok$' "$R/checks.txt") ok of $(wc -l <"$R/checks.txt") lines"
  grep -v " ok$" "$R/checks.txt" | head -10
  echo "== tkc bench --tune PERSIST ($((t2 - t1)) s)"; grep -vE "━|^\s*$" "$R/attention_fwd.txt" | cut -c1-170 | tail -40
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
