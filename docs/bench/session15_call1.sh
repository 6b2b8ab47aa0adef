#!/usr/bin/env bash
# Session 15, call 1: a screen of cache hints and FMA contraction on issue 15's row-kernel misses
# (docs/bench/session15_hints.py: PTX variants of each tuned kernel and torch.compile, timed interleaved),
# then contract-fma's A/B on the other examples whose PTX it changes (attention, based, linear, rotary;
# ABAB), then session 14's three softmax sweep points that were not run.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r1; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 200 python3 docs/bench/session15_hints.py --out "$R/hints" >"$R/hints.txt" 2>&1
t1=$(date +%s)
timeout 150 python3 docs/bench/session15_hints.py --ab-fma --out "$R/hints" >"$R/ab_fma.txt" 2>&1
t2=$(date +%s)
cp -r "$R" "$OUT/"
echo "== hints ($((t1 - t0)) s)"; sed -n '/^== speedup/,$p' "$R/hints.txt"; grep -E "Error|error" "$R/hints.txt" | tail -5
echo "== ab-fma ($((t2 - t1)) s)"; grep -E "^ab-fma|Error" "$R/ab_fma.txt"
