#!/usr/bin/env bash
# Session 25, call 2 (issue 13): pipeline-cp-async's new default, step_ahead (every k16 step's ldmatrix fragments
# loaded a whole step ahead, the loop rotated by a whole step, where two steps fit the registers).
# 1. correctness: the sm_80 GPU tests, the examples' GPU tests and the stage-epilogue GPU tests;
# 2. the 4096^3 table (session16_sm80.py --set session25b): step_ahead against its ablation at tkir's tiles, the
#    rotate=1 variant at 256 x 128, CUTLASS beside;
# 3. linear.tk and the sm_80 attention configuration (BQ 128, BKV 64; (8, 16, 4096, 128)) on sm_80.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r25b; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 200 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests/test_gpu_sm80.py tests/test_gpu_examples.py \
  tests/test_stage_epilogue.py >"$R/gpu_tests.txt" 2>&1
DISABLE_MMA_V3=1 timeout 300 python3 docs/bench/session16_sm80.py --set session25b --rows triton,tkir \
  --cutlass-lib .cutlass/libcutlass_sm80.so --cutlass-names cutlass_128x256x32_s4,cutlass_256x128x64_s4 \
  --out "$R/table" >"$R/table.txt" 2>&1
timeout 100 tkc bench examples/linear.tk --target sm_80 --size M=4096 --size N=4096 --size K=4096 >"$R/linear_sm80.txt" 2>&1
timeout 100 tkc bench examples/attention_fwd.tk --target sm_80 -D BQ=128 -D BKV=64 --size B=8 --size H=16 --size N=4096 \
  >"$R/attn_sm80.txt" 2>&1
cp "$R/table.txt" "$R/gpu_tests.txt" "$OUT/"
tar -czf "$OUT/r25b.tar.gz" -C /tmp r25b
tail -2 "$R/gpu_tests.txt"; grep -E "FAILED|Error" "$R/gpu_tests.txt" | head -10
tail -4 "$R/linear_sm80.txt"; tail -4 "$R/attn_sm80.txt"
sed -n '/^== /,$p' "$R/table.txt"; grep -E "Error|Traceback|error" "$R/table.txt" | head -5
true
