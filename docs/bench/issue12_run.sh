#!/usr/bin/env bash
# Issue 12 in one device call: the attention GPU tests (every head dim, causal or not, N in
# {1, 100, 1000, 4097}, the sm_80 / no-TMA / unswizzled paths), then one `tkc bench` run over the
# issue's 16 configurations (tkir vs SDPA cuDNN and FlashAttention-2, same run), then the ablation
# rows: each schedule pass left out alone, at (8, 16, 4096, 128) causal and not.
# Results: $OUT/r/*, summary printed last. Usage on the GPU machine: bash docs/bench/issue12_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$R/gpu.txt" 2>&1
if [ -n "${TESTS-1}" ]; then
  timeout ${GPU_TEST_TIMEOUT:-300} python3 -m pytest -q -m gpu --timeout 200 -p no:cacheprovider -n ${WORKERS:-16} -rfE \
    -k "${TEST_K:-attention}" ${GPU_TESTS:-tests/test_gpu_examples.py} >"$R/gpu_tests.log" 2>&1
fi
if [ -n "${BENCH-1}" ]; then
  timeout 420 tkc bench examples/attention_fwd.tk --reps ${REPS:-20} --json "$R/attention_fwd.json" \
    --plot "$R/attention_fwd.png" >"$R/attention_fwd.txt" 2>&1
fi
DEFAULT=$(python3 -c "from tkir.passes.registry import DEFAULT_PIPELINE as d; print(','.join(d))")
without() { echo "$DEFAULT" | tr ',' '\n' | grep -vx "$1" | paste -sd, -; }
ablate() {  # name, extra tkc args...
  local name=$1; shift
  timeout 200 tkc bench examples/attention_fwd.tk --size B=8 --size H=16 --size N=4096 --reps ${REPS:-20} -D BQ=128 -D BKV=128 -D STAGES=2 \
    --variant "$name" "$@" --json "$R/ablation_$name.json" >"$R/ablation_$name.txt" 2>&1
}
if [ -n "${ABLATE-1}" ]; then
  NONE=$(echo "$DEFAULT" | tr ',' '\n' | grep -vxE "early-release|split-masks|overlap-mma|pingpong" | paste -sd, -)
  for causal in 0 1; do
    ablate "full_c$causal" -D CAUSAL=$causal
    for p in early-release split-masks overlap-mma pingpong; do
      ablate "no_${p}_c$causal" -D CAUSAL=$causal --passes "$(without $p)"
    done
    ablate "none_c$causal" -D CAUSAL=$causal --passes "$NONE"
    ablate "bkv64_s3_c$causal" -D CAUSAL=$causal -D BKV=64 -D STAGES=3
    ablate "bkv64_s3_none_c$causal" -D CAUSAL=$causal -D BKV=64 -D STAGES=3 --passes "$NONE"
  done
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$R/gpu.txt" 2>&1
{
  [ -f "$R/gpu_tests.log" ] && grep -E "passed|failed|FAILED|Error" "$R/gpu_tests.log" | tail -30
  [ -f "$R/attention_fwd.txt" ] && grep -vE "^\s*$" "$R/attention_fwd.txt" | grep -vE "^(compil|bench )" | tail -20
  for f in "$R"/ablation_*.txt; do [ -f "$f" ] && grep -E "attention_fwd  " "$f" | tail -1; done
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
