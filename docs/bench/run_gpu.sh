#!/usr/bin/env bash
# One device call: install tkir (lark etc. carried as wheels in .whl/), run the GPU tests, benchmark.
# Usage (on the GPU machine, from the repo root): bash docs/bench/run_gpu.sh [bench args...]
# Writes logs and JSON/PNG results under ${OUT:-/tmp/tkir-out}; prints a short table last.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/install.log" 2>&1 || { cat "$OUT/install.log"; exit 1; }
export PYTHONUNBUFFERED=1 TKIR_CACHE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
python3 -m pytest -q -m gpu --timeout 60 tests/ 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
for ex in "$@"; do
  name=$(basename "$ex" .tk)
  tkc bench "$ex" --json "$OUT/$name.json" --plot "$OUT/$name.png" 2>&1 | tee "$OUT/$name.txt"
done
