#!/usr/bin/env bash
# Session 6 (issues 13 and 14) in one device call. Switches (empty: skip): TESTS (GPU tests, TEST_K /
# GPU_TESTS select), CLAIMS (docs/bench/claims.py: the claims table; CLAIMS_ARGS), BASED (tkc bench
# examples/based.tk), SM80 (tkc bench of gemm/attention built for sm_80, SM80_GEMM_D / SM80_ATTN_D
# hold -D flags), GEMM (the sm_90a gemm guard at 4096^3), EXTRA (a command of your own).
# Results under $OUT/r (tarred to $OUT/results.tgz); a short summary printed last.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$R/gpu.txt" 2>&1
if [ -n "${TESTS-1}" ]; then
  timeout ${GPU_TEST_TIMEOUT:-300} python3 -m pytest -q -m gpu --timeout 200 -p no:cacheprovider -n ${WORKERS:-16} -rfE \
    -k "${TEST_K:-}" ${GPU_TESTS:-tests/} >"$R/gpu_tests.log" 2>&1
fi
if [ -n "${CLAIMS-1}" ]; then
  timeout 300 python3 docs/bench/claims.py --json "$R/claims.json" ${CLAIMS_ARGS:-} >"$R/claims.txt" 2>&1
fi
if [ -n "${BASED-1}" ] && [ -f examples/based.tk ]; then
  timeout 400 tkc bench examples/based.tk --reps ${REPS:-20} --json "$R/based.json" --plot "$R/based.png" >"$R/based.txt" 2>&1
fi
if [ -n "${SM80-1}" ]; then
  timeout 150 tkc bench examples/gemm.tk --target sm_80 --size M=4096 --size N=4096 --size K=4096 ${SM80_GEMM_D:-} \
    --variant sm80 --json "$R/gemm_sm80.json" >"$R/gemm_sm80.txt" 2>&1
  timeout 200 tkc bench examples/attention_fwd.tk --target sm_80 --size B=8 --size H=16 --size N=4096 ${SM80_ATTN_D:-} \
    --variant sm80 --json "$R/attn_sm80.json" >"$R/attn_sm80.txt" 2>&1
fi
if [ -n "${GEMM-1}" ]; then
  timeout 120 tkc bench examples/gemm.tk --size M=4096 --size N=4096 --size K=4096 --json "$R/gemm.json" >"$R/gemm.txt" 2>&1
fi
if [ -n "${EXTRA:-}" ]; then
  bash -c "$EXTRA" >"$R/extra.txt" 2>&1
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$R/gpu.txt" 2>&1
{
  [ -f "$R/gpu_tests.log" ] && grep -E "passed|failed|FAILED|Error" "$R/gpu_tests.log" | tail -30
  for f in claims based gemm_sm80 attn_sm80 gemm extra; do
    [ -f "$R/$f.txt" ] && { echo "--- $f"; grep -vE "^\s*$|^(compil|bench )" "$R/$f.txt" | tail -${TAIL:-14}; }
  done
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
