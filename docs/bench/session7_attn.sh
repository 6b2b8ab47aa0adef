#!/usr/bin/env bash
# Attention schedule variants in one device call (session 7, issue 12): each VARIANTS line is
# "name | sizes | flags" (flags: -D consts and/or --passes), benchmarked causal and non-causal
# by `tkc bench` (tkir, cuDNN and FA2 interleaved in one process; correctness checked first).
# Optional: TESTS (paths for pytest -m gpu, run first; TEST_K: its -k expression), EXTRA (a command of
# your own, run last). VARIANTS=none runs no variant.
# Results: $OUT/r/*.txt (tarred to $OUT/results.tgz); the summary is printed last.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$R/gpu.txt" 2>&1
BASE=canonicalize,legalize-mma,fold-scale,infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,pipeline,pipeline-cp-async,early-release,persistent,split-masks
D128="--size B=8 --size H=16 --size N=4096 -D D=128 -D BQ=128 -D BKV=128 -D STAGES=2"
D64="--size B=16 --size H=32 --size N=2048 -D D=64 -D BKV=128 -D STAGES=2"
D256="--size B=8 --size H=16 --size N=2048 -D D=256 -D BQ=128 -D BKV=64 -D STAGES=2"
VARIANTS=${VARIANTS:-"d128_default|$D128|
d128_overlap|$D128|--passes $BASE,overlap-mma{max_acc_cols=0},canonicalize
d128_overlap_pingpong|$D128|--passes $BASE,overlap-mma{max_acc_cols=0},pingpong,canonicalize
d64_bq192_default|$D64|-D BQ=192
d64_bq128_overlap_pingpong|$D64|-D BQ=128 --passes $BASE,overlap-mma{max_acc_cols=0},pingpong,canonicalize
d256_overlap|$D256|--passes $BASE,overlap-mma{max_acc_cols=0},canonicalize"}
if [ -n "${TESTS:-}" ]; then
  timeout ${GPU_TEST_TIMEOUT:-300} python3 -m pytest -q -m gpu --timeout 200 -p no:cacheprovider -n ${WORKERS:-16} -rfE \
    -k "${TEST_K:-}" $TESTS >"$R/gpu_tests.log" 2>&1
fi
while IFS='|' read -r name sizes flags; do
  [ -z "$name" ] || [ "$name" = none ] && continue
  for causal in ${CAUSALS:-0 1}; do
    timeout 200 tkc bench examples/attention_fwd.tk $sizes $flags -D CAUSAL=$causal --reps ${REPS:-20} \
      --variant "$name" --json "$R/v_${name}_c$causal.json" >"$R/v_${name}_c$causal.txt" 2>&1
  done
done <<<"$VARIANTS"
if [ -n "${EXTRA:-}" ]; then bash -c "$EXTRA" >"$R/extra.txt" 2>&1; fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$R/gpu.txt" 2>&1
{
  [ -f "$R/gpu_tests.log" ] && grep -E "passed|failed|FAILED|Error" "$R/gpu_tests.log" | tail -20
  for f in "$R"/v_*.txt; do
    line=$(grep -E "^attention_fwd " "$f" | tail -1)
    [ -n "$line" ] && echo "$line" | cut -c16- || { echo "$(basename "$f"): $(tail -2 "$f" | tr "\n" " ")"; }
  done
  [ -f "$R/extra.txt" ] && tail -${TAIL:-20} "$R/extra.txt"
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
