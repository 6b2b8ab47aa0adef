#!/usr/bin/env bash
# Issue 6 in one device call: GPU tests, GEMM variants timed interleaved, the 7-shape `tkc bench`
# (twice with GEMM_REPEAT=1), the other examples' benches (EXAMPLES="..." to choose, "" for none), and
# the ablations. Results: $OUT/results.tgz and $OUT/summary.txt (printed last).
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
timeout 200 python3 -m pytest -q -m gpu --timeout 60 tests/ >"$R/gpu_tests.log" 2>&1
if grep -q "FAILED.*swizzle_none" "$R/gpu_tests.log" && [ -f scratch/s2/probe_interleave.py ]; then
  timeout 60 python3 scratch/s2/probe_interleave.py >"$R/probe_interleave.txt" 2>&1
fi
timeout 150 python3 docs/bench/gemm_variants.py --json "$R/gemm_variants.json" >"$R/gemm_variants.txt" 2>&1
timeout 200 tkc bench examples/gemm.tk --json "$R/gemm.json" --plot "$R/gemm.png" >"$R/gemm.txt" 2>&1
if [ -n "${GEMM_REPEAT:-}" ]; then  # a second identical run: the run-to-run spread
  timeout 200 tkc bench examples/gemm.tk --json "$R/gemm_run2.json" >"$R/gemm_run2.txt" 2>&1
fi
for ex in ${EXAMPLES-attention_fwd softmax layernorm rotary}; do
  timeout 100 tkc bench "examples/$ex.tk" --json "$R/$ex.json" --plot "$R/$ex.png" >"$R/$ex.txt" 2>&1
done
OUT="$R" timeout 150 bash docs/bench/ablations.sh >"$R/ablations.txt" 2>&1
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$R/gpu.txt" 2>&1
tar czf "$OUT/results.tgz" -C "$R" .
{
  grep -E "passed|failed|FAILED" "$R/gpu_tests.log" | tail -8
  cat "$R/probe_interleave.txt" 2>/dev/null
  cat "$R/gemm_variants.txt"
  grep -vE "^\s*$" "$R/gemm.txt" | grep -v "bench gemm" | tail -9
  [ -f "$R/gemm_run2.txt" ] && grep -E "^gemm" "$R/gemm_run2.txt" | sed 's/^gemm /gemm(run2) /'
  for ex in ${EXAMPLES-attention_fwd softmax layernorm rotary}; do grep -E "^($ex|device-to-device)" "$R/$ex.txt"; done
  cat "$R/ablations.txt"
} >"$OUT/summary.txt"
rm -rf "$R"
cat "$OUT/summary.txt"
