#!/usr/bin/env bash
# Session 18, call 5: the GPU suite at the session's last code, and fuse-row-stats measured
# (docs/bench/session18_fuse.py: layernorm through row_mean / row_var, fused and apart, beside
# examples/layernorm.tk).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r5; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
t0=$(date +%s)
timeout 180 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
timeout 120 python3 docs/bench/session18_fuse.py --out "$R" --reps 40 >"$R/fuse18.txt" 2>&1
t2=$(date +%s)
tar czf "$OUT/r5.tgz" -C "$R" .
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -hE "^FAILED|^ERROR" "$R/gpu_tests.log" | head -20
echo "== fuse-row-stats ($((t2 - t1)) s)"; sed -n '/^== session 18/,$p' "$R/fuse18.txt"; grep -hE "Error|Traceback" "$R/fuse18.txt" | head -5
true
