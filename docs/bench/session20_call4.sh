#!/usr/bin/env bash
# Session 20, call 4: three blocks per SM at the D = 16384 row points (docs/bench/session20_rows.py).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
timeout 420 python3 docs/bench/session20_rows.py --out "$OUT" --reps 30 >"$OUT/rows20.txt" 2>&1
tail -45 "$OUT/rows20.txt"
true
