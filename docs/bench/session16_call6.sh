#!/usr/bin/env bash
# Session 16, call 6: issue 15's small rows, the hoisted W/Bias loads kept above X's shuffles by a fence
# (docs/bench/session16_small.py: PTX rewrite screen against torch.compile, interleaved).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r6; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 300 python3 docs/bench/session16_small.py --out "$R" >"$R/small.txt" 2>&1
t1=$(date +%s)
cp -r "$R" "$OUT/"
echo "== small rows ($((t1 - t0)) s)"; sed -n '/^== small/,$p' "$R/small.txt"; grep -E "Error|Traceback" "$R/small.txt" | head -5
true
