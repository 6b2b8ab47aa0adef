#!/usr/bin/env bash
# Session 16, call 2: Triton's fastest mma.sync shape of call 1 (128 x 128 blocks of 4 warps, two per
# SM) built by tkir in several stage / k-tile / fragment / occupancy variants, beside Triton's own
# (DISABLE_MMA_V3=1), tkir's wgmma gemm and cuBLAS, interleaved in one process.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r2; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
DISABLE_MMA_V3=1 timeout 400 python3 docs/bench/session16_sm80.py --set call2 --out "$R" >"$R/sm80_call2.txt" 2>&1
t1=$(date +%s)
cp -r "$R" "$OUT/"
echo "== call 2 ($((t1 - t0)) s)"; sed -n '/^== 4096/,$p' "$R/sm80_call2.txt"; grep -E "Error|Traceback" "$R/sm80_call2.txt" | head -5
true
