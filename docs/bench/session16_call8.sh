#!/usr/bin/env bash
# Session 16, call 8: the position of a kernel in time_pair_ms's interleaved order (A-vs-A, fixed and
# rotated), and issue 15's latency-bound row points against eager and torch.compile in both orders
# (docs/bench/session16_position.py).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r8; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 320 python3 docs/bench/session16_position.py --out "$R" --reps 30 >"$R/position.txt" 2>&1
t1=$(date +%s)
cp "$R/position.txt" "$OUT/"; cp "$R/position.json" "$OUT/" 2>/dev/null
echo "== position ($((t1 - t0)) s)"; grep -E "^A-vs-A|^peers" "$R/position.txt"; grep -E "Error|Traceback" "$R/position.txt" | head -5
true
