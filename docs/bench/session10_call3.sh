#!/usr/bin/env bash
# Session 10, calls 3 and 5: the whole GPU suite (after create-tma's descriptor prefetch and @persistent), then
# issue 12's bench with the persistent choice tuned per row: `tkc bench examples/attention_fwd.tk --tune
# PERSIST` (every configuration of the issue, cuDNN and FA2 in the same run). The compile cache is on
# for the bench (a fresh folder), so the tuner's compiles are reused by the timing and the bench.
# Results under $OUT: summary.txt, results.tgz (gpu_tests.log, attention_fwd.{txt,json,png}).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$R/gpu.txt" 2>&1
t0=$(date +%s)
timeout ${SUITE_TIMEOUT:-240} python3 -m pytest -q -m gpu --timeout 200 -p no:cacheprovider -n 16 -rfE tests \
  >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
TKIR_CACHE=1 TKIR_CACHE_DIR=/tmp/tkc-s10 timeout ${BENCH_TIMEOUT:-420} tkc bench examples/attention_fwd.tk \
  --tune PERSIST --reps 20 --json "$R/attention_fwd.json" --plot "$R/attention_fwd.png" >"$R/attention_fwd.txt" 2>&1
t2=$(date +%s)
{
  echo "== GPU suite ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head -20
  echo "== tkc bench --tune PERSIST ($((t2 - t1)) s)"; grep -vE "━|^\s*$" "$R/attention_fwd.txt" | cut -c1-170 | tail -40
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
