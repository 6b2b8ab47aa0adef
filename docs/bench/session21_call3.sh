#!/usr/bin/env bash
# Session 21, call 3: the sweep's misses in its own bench_one harness (docs/bench/session21_bench_ab.py).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
timeout 450 python3 docs/bench/session21_bench_ab.py --out "$OUT" --reps 30 >"$OUT/bench_ab21.txt" 2>&1
tail -16 "$OUT/bench_ab21.txt"
true
