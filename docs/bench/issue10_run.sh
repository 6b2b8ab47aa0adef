#!/usr/bin/env bash
# Issue 10 in one device call: every GPU test (examples, runtime, the conformance suite's GPU half),
# then `tkc bench` for the new examples (linear, transpose, rmsnorm) and for rotary and gemm (the
# examples whose PTX changed: softmax, layernorm, rotary; gemm guards the refactor). Results: $OUT/results.tgz,
# $OUT/summary.txt (printed last). Usage on the GPU machine: bash docs/bench/issue10_run.sh
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$R/install.log" 2>&1 || { cat "$R/install.log"; exit 1; }
export PYTHONUNBUFFERED=1 TKIR_CACHE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$R/gpu.txt" 2>&1
timeout ${GPU_TEST_TIMEOUT:-300} python3 -m pytest -q -m gpu --timeout 120 -p no:cacheprovider -n ${WORKERS:-16} -rfE ${GPU_TESTS:-tests/} >"$R/gpu_tests.log" 2>&1
for spec in ${BENCHES-linear transpose rmsnorm softmax layernorm rotary}; do
  timeout 150 tkc bench "examples/$spec.tk" --json "$R/$spec.json" --plot "$R/$spec.png" >"$R/$spec.txt" 2>&1
done
if [ -n "${GEMM:-1}" ]; then
  timeout 120 tkc bench examples/gemm.tk --size M=4096 --size N=4096 --size K=4096 --json "$R/gemm.json" >"$R/gemm.txt" 2>&1
fi
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$R/gpu.txt" 2>&1
tar czf "$OUT/results.tgz" -C "$R" .
{
  grep -E "passed|failed|FAILED|Error" "$R/gpu_tests.log" | tail -40
  for spec in ${BENCHES-linear transpose rmsnorm softmax layernorm rotary} gemm; do
    [ -f "$R/$spec.txt" ] && grep -vE "^\s*$" "$R/$spec.txt" | grep -vE "^(compil|bench )" | tail -8
  done
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
