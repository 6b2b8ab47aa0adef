#!/usr/bin/env bash
# Session 15, call 2: call 1's `split` cache policy (+1-4% on every row point) decomposed: L2 policies on
# the loads before / after the first block barrier and on the stores, one at a time
# (docs/bench/session15_hints.py --policies), on call 1's points and three chunk-loop configurations.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r2; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 300 python3 docs/bench/session15_hints.py --policies --out "$R/policies" >"$R/policies.txt" 2>&1
t1=$(date +%s)
rm -rf "$R"/policies/p*; cp -r "$R" "$OUT/"
echo "== policies ($((t1 - t0)) s)"; sed -n '/^== speedup/,$p' "$R/policies.txt"; grep -E "Error|error" "$R/policies.txt" | tail -5
