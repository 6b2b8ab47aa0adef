#!/usr/bin/env bash
# Session 16, call 1: a mature compiler's mma.sync GEMM on the H200 (Triton with DISABLE_MMA_V3=1)
# beside tkir's sm_80 and wgmma gemms and cuBLAS (docs/bench/session16_sm80.py), then session 15's
# own pass kernels on the GPU (tests/test_gpu_pass_kernels.py, not yet run on a GPU).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r1; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
python3 -c "import triton, torch; print('triton', triton.__version__, 'torch', torch.__version__)"
t0=$(date +%s)
DISABLE_MMA_V3=1 timeout 300 python3 docs/bench/session16_sm80.py --out "$R" >"$R/sm80_peer.txt" 2>&1
t1=$(date +%s)
if [ -f "$R/triton_best.cubin" ]; then
  nvdisasm -c "$R/triton_best.cubin" >"$R/triton_best.sass" 2>&1 || cuobjdump -sass "$R/triton_best.cubin" >"$R/triton_best.sass" 2>&1
fi
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_pass_kernels.py >"$R/gpu_pass_kernels.log" 2>&1
t2=$(date +%s)
cp -r "$R" "$OUT/"
echo "== GPU pass-kernel tests ($((t2 - t1)) s)"; tail -1 "$R/gpu_pass_kernels.log"; grep -hE "^FAILED|^ERROR" "$R/gpu_pass_kernels.log" | head
echo "== sm80 peer ($((t1 - t0)) s)"; sed -n '/^== 4096/,$p' "$R/sm80_peer.txt"; grep -E "Error|Traceback" "$R/sm80_peer.txt" | head -5
true
