#!/usr/bin/env bash
# The whole GPU session in one call: tests, every example's bench, attention sweep, GEMM ablations.
# Results: $OUT/results.tgz (JSON, PNG, logs) and $OUT/summary.txt; prints the tables last.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
mkdir -p "$OUT/r"
OUT="$OUT/r" timeout 200 bash docs/bench/run_gpu.sh examples/gemm.tk examples/attention_fwd.tk \
  examples/softmax.tk examples/layernorm.tk examples/rotary.tk > "$OUT/r/main.log" 2>&1
export PYTHONPATH=/tmp/site
OUT="$OUT/r" bash docs/bench/ablations.sh > "$OUT/r/ablations.txt" 2>&1
tar czf "$OUT/results.tgz" -C "$OUT/r" .
grep -E "passed|failed|FAILED" "$OUT/r/main.log" | tail -5 > "$OUT/summary.txt"
grep -E "^(gemm|attention_fwd|softmax|layernorm|rotary) |copy, same run" "$OUT/r/main.log" >> "$OUT/summary.txt"
cat "$OUT/r/ablations.txt" >> "$OUT/summary.txt"
rm -rf "$OUT/r"
cat "$OUT/summary.txt"
