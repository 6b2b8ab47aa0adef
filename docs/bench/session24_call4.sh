#!/usr/bin/env bash
# Session 24, call 4: the whole GPU suite on the session's code (stage-epilogue in the default pipeline), then
# the sm_80 main loop's switches again with the staged epilogue (session16_sm80.py --set session24d, with CUTLASS).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r24d; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 330 python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests >"$R/gpu_suite.txt" 2>&1
DISABLE_MMA_V3=1 timeout 200 python3 docs/bench/session16_sm80.py --set session24d --rows triton,tkir \
  --cutlass-lib .cutlass/libcutlass_sm80.so --cutlass-names cutlass_128x256x32_s4,cutlass_256x128x64_s4 \
  --out "$R/table" >"$R/table.txt" 2>&1
cp "$R/table.txt" "$R/gpu_suite.txt" "$OUT/"
tar -czf "$OUT/r24d.tar.gz" -C /tmp r24d
tail -3 "$R/gpu_suite.txt"; grep -E "^FAILED|^ERROR" "$R/gpu_suite.txt" | head -10
sed -n '/^== /,$p' "$R/table.txt"; grep -E "Error|Traceback" "$R/table.txt" | head -5
true
