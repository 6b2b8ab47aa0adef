#!/usr/bin/env bash
# Session 25, call 1 (issue 13, the sm_80 gemm at 0.6x the wgmma gemm):
# 1. correctness of the split cp.async addresses (thread part before the loop, uniform tile part): the sm_80 GPU
#    tests and the examples' GPU tests;
# 2. the 4096^3 table (session16_sm80.py --set session25a): the change against its parent commit's PTX
#    (docs/bench/variants/session25, made by session25_base.py at the parent), the fragment distance and the
#    rotation at CUTLASS's best tile (128 x 256 x 32 S4), CUTLASS beside.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r25a; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 200 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests/test_gpu_sm80.py tests/test_gpu_examples.py \
  >"$R/gpu_tests.txt" 2>&1
DISABLE_MMA_V3=1 timeout 330 python3 docs/bench/session16_sm80.py --set session25a --rows triton,tkir \
  --cutlass-lib .cutlass/libcutlass_sm80.so --cutlass-names cutlass_128x256x32_s4,cutlass_256x128x64_s4 \
  --out "$R/table" >"$R/table.txt" 2>&1
cp "$R/table.txt" "$R/gpu_tests.txt" "$OUT/"
tar -czf "$OUT/r25a.tar.gz" -C /tmp r25a
tail -2 "$R/gpu_tests.txt"; grep -E "FAILED|Error" "$R/gpu_tests.txt" | head -10
sed -n '/^== /,$p' "$R/table.txt"; grep -E "Error|Traceback|error" "$R/table.txt" | head -5
true
