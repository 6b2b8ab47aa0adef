#!/usr/bin/env bash
# Session 24, call 3 (issue 13, the sm_80 gemm): stage-epilogue (the mma.sync accumulator store through per-warp
# shared rows and 16-byte global stores) on the GPU.
# 1. correctness: the sm_80 GPU tests and the examples' GPU tests (every sm_80 epilogue now staged);
# 2. the 4096^3 table: staged against the pass's ablation at tkir's tiles, Triton, CUTLASS (session16_sm80.py
#    --set session24c);
# 3. sm_80 attention at the bar configuration (BQ 128, BKV 64; (8, 16, 4096, 128)) and linear.tk on sm_80.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r24c; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 240 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests/test_gpu_sm80.py tests/test_gpu_examples.py \
  tests/test_stage_epilogue.py >"$R/gpu_tests.txt" 2>&1
DISABLE_MMA_V3=1 timeout 300 python3 docs/bench/session16_sm80.py --set session24c --rows triton,tkir \
  --cutlass-lib .cutlass/libcutlass_sm80.so --cutlass-names cutlass_128x256x32_s4,cutlass_128x256x64_s3,cutlass_256x128x64_s4 \
  --out "$R/table" >"$R/table.txt" 2>&1
timeout 120 tkc bench examples/attention_fwd.tk --target sm_80 -D BQ=128 -D BKV=64 --size B=8 --size H=16 --size N=4096 \
  >"$R/attn_sm80.txt" 2>&1
timeout 120 tkc bench examples/linear.tk --target sm_80 --size M=4096 --size N=4096 --size K=4096 >"$R/linear_sm80.txt" 2>&1
cp "$R/table.txt" "$R/gpu_tests.txt" "$OUT/"
tar -czf "$OUT/r24c.tar.gz" -C /tmp r24c
tail -3 "$R/gpu_tests.txt"; grep -E "FAILED|Error" "$R/gpu_tests.txt" | head -10
tail -6 "$R/attn_sm80.txt"; tail -6 "$R/linear_sm80.txt"
sed -n '/^== /,$p' "$R/table.txt"; grep -E "Error|Traceback" "$R/table.txt" | head -5
true
