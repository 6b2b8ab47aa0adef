#!/usr/bin/env bash
# Session 25, call 4 (issue 13): the closing measurements with the final code (that of call 3).
# 1. the claims table (docs/bench/claims.py: (a) gemm.tk's sm_80 default against the wgmma gemm and the peak,
#    (b) attention and its sm_80 build at BQ 128 BKV 64, (c) Based at N = 8192, (d) the FMA ceiling);
# 2. `tkc bench examples/based.tk` (B = H = 16, N = 1024 .. 16384) against the PyTorch chunked reference and
#    flash-linear-attention's Triton kernels (the fla-core wheel, carried in .whl/): the split cp.async addresses
#    changed Based's sm_90a PTX.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r25d; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 240 python3 docs/bench/claims.py --json "$R/claims.json" --sm80-attn BQ=128,BKV=64 --reps 20 >"$R/claims.txt" 2>&1
timeout 200 tkc bench examples/based.tk --json "$R/based.json" >"$R/based.txt" 2>&1
cp "$R/claims.txt" "$R/based.txt" "$OUT/"
tar -czf "$OUT/r25d.tar.gz" -C /tmp r25d
tail -14 "$R/claims.txt"; tail -8 "$R/based.txt"
true
