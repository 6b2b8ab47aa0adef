#!/usr/bin/env bash
# Builds libcutlass_sm80.so (one object per line of configs.txt) for sm_90a with nvcc.
#   bash scripts/bench/cutlass_sm80/build.sh CUTLASS_INCLUDE_DIR OUT_DIR [JOBS]
# CUTLASS_INCLUDE_DIR: a CUTLASS checkout's include/ (measured with NVIDIA/cutlass 7107b05, v4.7.0).
set -euo pipefail
inc=$1; out=$2; jobs=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out"
grep -v '^#' "$here/configs.txt" | grep . | xargs -P "$jobs" -L 1 bash -c '
  nvcc -O3 -std=c++17 --expt-relaxed-constexpr -Xptxas -v -arch=sm_90a -Xcompiler -fPIC -I"'"$inc"'" -DNAME=$0 -DTBM=$1 -DTBN=$2 -DTBK=$3 \
    -DWM=$4 -DWN=$5 -DWK=$6 -DSTAGES=$7 -DSWZ=$8 -c "'"$here"'/gemm.cu" -o "'"$out"'/$0.o" && echo "built $0"'
nvcc -shared -cudart static -arch=sm_90a "$out"/*.o -o "$out/libcutlass_sm80.so"
grep -v '^#' "$here/configs.txt" | grep . | awk '{print $1}' > "$out/names.txt"
echo "$out/libcutlass_sm80.so"
