#!/usr/bin/env bash
# Session 25, call 3 (issue 13): step_ahead with the split cp.async addresses (the candidate final state).
# 1. the whole GPU suite (pytest -m gpu -n 16 tests);
# 2. the 4096^3 table (session16_sm80.py --set session25c): against the same defaults without the split (the
#    parent's PTX) and step_ahead's ablation, CUTLASS beside;
# 3. linear.tk and the sm_80 attention configuration (BQ 128, BKV 64; (8, 16, 4096, 128)) on sm_80.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r25c; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 230 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests >"$R/gpu_suite.txt" 2>&1
DISABLE_MMA_V3=1 timeout 260 python3 docs/bench/session16_sm80.py --set session25c --rows triton,tkir \
  --cutlass-lib .cutlass/libcutlass_sm80.so --cutlass-names cutlass_128x256x32_s4,cutlass_256x128x64_s4 \
  --out "$R/table" >"$R/table.txt" 2>&1
timeout 60 tkc bench examples/linear.tk --target sm_80 --size M=4096 --size N=4096 --size K=4096 >"$R/linear_sm80.txt" 2>&1
timeout 60 tkc bench examples/attention_fwd.tk --target sm_80 -D BQ=128 -D BKV=64 --size B=8 --size H=16 --size N=4096 \
  >"$R/attn_sm80.txt" 2>&1
cp "$R/table.txt" "$R/gpu_suite.txt" "$OUT/"
tar -czf "$OUT/r25c.tar.gz" -C /tmp r25c
tail -2 "$R/gpu_suite.txt"; grep -E "^FAILED|^ERROR" "$R/gpu_suite.txt" | head -15
tail -3 "$R/linear_sm80.txt"; tail -3 "$R/attn_sm80.txt"
sed -n '/^== /,$p' "$R/table.txt"; grep -E "Error|Traceback|error" "$R/table.txt" | head -5
true
