#!/usr/bin/env bash
# Session 23, call 1 (issue 13, the sm_80 gemm): the rotated cp.async loop (pipeline-cp-async{rotate=R}: the block
# barrier R mma.sync units before the end of the k-tile's mma, the next k-tile's first k16 step of fragments
# loaded then and carried over the back edge, CUTLASS MmaMultistage's order) against the old order (rotate=0):
# first the sm_80 GPU tests (the rotated cases at ragged sizes, 2 stages, one iteration, 32-row warps), then the
# 4096^3 table (docs/bench/session16_sm80.py --set session23: tkir sm_80 variants, Triton's mma.sync GEMM, the
# wgmma gemm, cuBLAS; every kernel checked against torch.matmul on fresh inputs first).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 200 python3 -m pytest -q -m gpu -n 8 tests/test_gpu_sm80.py -p no:cacheprovider >"$OUT/gpu_sm80.txt" 2>&1
tail -3 "$OUT/gpu_sm80.txt"
DISABLE_MMA_V3=1 timeout 330 python3 docs/bench/session16_sm80.py --set session23 --out "$OUT" >"$OUT/sm80_session23.txt" 2>&1
grep -E "FAIL|Error|Traceback" "$OUT/gpu_sm80.txt" | head -5
sed -n '/^== 4096/,$p' "$OUT/sm80_session23.txt"; grep -E "Error|Traceback" "$OUT/sm80_session23.txt" | head -5
true
