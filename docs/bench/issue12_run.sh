#!/usr/bin/env bash
# Issue 12 in one device call: every GPU test (attention at every head dim, causal or not, N in
# {1, 100, 1000, 4097}, the sm_80 / no-TMA / unswizzled paths; the conformance suite; the rest), then
# one `tkc bench` run over the issue's 16 configurations (tkir vs SDPA cuDNN and FlashAttention-2,
# same run), the ablation rows (each default schedule pass left out alone, overlap-mma and pingpong
# added, at (8, 16, 4096, 128) causal and not), overlap-mma at D = 64 and 256, and gemm 4096^3 as a
# guard.
# Switches: TESTS= BENCH= ABLATE= VARIANTS= GEMM= (empty: skip); TEST_K, GPU_TESTS select tests.
# Results: $OUT/r/*, summary printed last. Usage on the GPU machine: bash docs/bench/issue12_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$R/gpu.txt" 2>&1
if [ -n "${TESTS-1}" ]; then
  timeout ${GPU_TEST_TIMEOUT:-300} python3 -m pytest -q -m gpu --timeout 200 -p no:cacheprovider -n ${WORKERS:-16} -rfE \
    -k "${TEST_K:-}" ${GPU_TESTS:-tests/} >"$R/gpu_tests.log" 2>&1
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
  NONE=$(echo "$DEFAULT" | tr ',' '\n' | grep -vxE "fold-scale|early-release|split-masks" | paste -sd, -)
  OVERLAP=$(echo "$DEFAULT" | sed 's/split-masks,/split-masks,overlap-mma,/')
  PING=$(echo "$DEFAULT" | sed 's/split-masks,/split-masks,overlap-mma,pingpong,/')
  for causal in 0 1; do
    ablate "full_c$causal" -D CAUSAL=$causal
    for p in fold-scale early-release split-masks; do
      ablate "no_${p}_c$causal" -D CAUSAL=$causal --passes "$(without $p)"
    done
    ablate "with_overlap-mma_c$causal" -D CAUSAL=$causal --passes "$OVERLAP"
    ablate "with_overlap-mma_pingpong_c$causal" -D CAUSAL=$causal --passes "$PING"
    ablate "none_c$causal" -D CAUSAL=$causal --passes "$NONE"
  done
fi
if [ -n "${VARIANTS-1}" ]; then  # overlap-mma at the other head dims (the bench's tiles)
  for causal in 0 1; do
    timeout 200 tkc bench examples/attention_fwd.tk --size B=16 --size H=32 --size N=2048 --reps ${REPS:-20} \
      -D D=64 -D BQ=192 -D BKV=128 -D STAGES=2 -D CAUSAL=$causal --passes "$OVERLAP" --variant d64_with_overlap \
      >"$R/variant_d64_overlap_c$causal.txt" 2>&1
    timeout 200 tkc bench examples/attention_fwd.tk --size B=8 --size H=16 --size N=2048 --reps ${REPS:-20} \
      -D D=256 -D BQ=128 -D BKV=64 -D STAGES=2 -D CAUSAL=$causal --passes "$OVERLAP" --variant d256_with_overlap \
      >"$R/variant_d256_overlap_c$causal.txt" 2>&1
  done
fi
if [ -n "${GEMM-1}" ]; then
  timeout 120 tkc bench examples/gemm.tk --size M=4096 --size N=4096 --size K=4096 --json "$R/gemm.json" >"$R/gemm.txt" 2>&1
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$R/gpu.txt" 2>&1
{
  [ -f "$R/gpu_tests.log" ] && grep -E "passed|failed|FAILED|Error" "$R/gpu_tests.log" | tail -30
  [ -f "$R/attention_fwd.txt" ] && grep -vE "^\s*$" "$R/attention_fwd.txt" | grep -vE "^(compil|bench )" | tail -20
  for f in "$R"/ablation_*.txt "$R"/variant_*.txt; do [ -f "$f" ] && grep -E "attention_fwd  " "$f" | tail -1; done
  [ -f "$R/gemm.txt" ] && grep -E "^gemm" "$R/gemm.txt" | tail -2
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
