#!/usr/bin/env bash
# Session 22, call 4: docs/bench/session22_sets.py (the tuner's 3 input sets against bench_one's 16 at the
# few-microsecond row points).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
timeout 560 python3 docs/bench/session22_sets.py --out "$OUT" >"$OUT/sets22.txt" 2>&1
grep -v "^round" "$OUT/sets22.txt" | tail -30
true
