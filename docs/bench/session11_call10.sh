#!/usr/bin/env bash
# Session 11, call 10: the final head. sm_80 GPU tests, and sm_80 attention at (8, 16, 4096) with the tiles
# chosen by `auto` (passes over points with fewer than 8 warps per SM), non-causal and causal, head dims 128
# and 64, FA2 and cuDNN in the same rows. Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_sm80.py tests/test_auto_consts.py \
  >"$R/gpu_tests.log" 2>&1
for c in "-D D=128" "-D D=128 -D CAUSAL=1" "-D D=64" "-D D=64 -D CAUSAL=1"; do
  timeout 60 tkc bench examples/attention_fwd.tk --target sm_80 -D BQ=auto -D BKV=auto $c --size B=8 --size H=16 \
    --size N=4096 --reps 20 >>"$R/auto.txt" 2>&1
done
{ echo "== GPU tests"; tail -1 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head
  echo "== tkc bench --target sm_80 -D BQ=auto -D BKV=auto (kernel, sizes, consts, tkir, cuDNN, x, FA2, x, err, ok)"
  grep -E "^attention_fwd " "$R/auto.txt"; grep -iE "error" "$R/auto.txt" | head -3
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
