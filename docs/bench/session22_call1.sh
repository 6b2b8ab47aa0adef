#!/usr/bin/env bash
# Session 22, call 1: docs/bench/session22_probe.py (GEMM at N = 128256: group vs pair timings and the
# tuner's choice; the row points at the edge of their bars).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
timeout 540 python3 docs/bench/session22_probe.py --out "$OUT" >"$OUT/probe22.txt" 2>&1
grep -v "^round\|rel err" "$OUT/probe22.txt" | tail -60
true
