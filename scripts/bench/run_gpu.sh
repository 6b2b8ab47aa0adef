#!/usr/bin/env bash
# One device call: install tkir (wheels carried in .whl/), run the GPU tests, bench the examples given.
# Usage (on the GPU machine, from the repo root): bash scripts/bench/run_gpu.sh [examples/NAME.tk ...]
# Writes logs and NAME.json / NAME.png (`tkc bench --json --plot`, the files of docs/bench/results/) under
# ${OUT:-/tmp/tkir-out}; prints each bench table.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
mkdir -p "$OUT"
source scripts/bench/device_setup.sh
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/gpu.txt" 2>&1
python3 -m pytest -q -m gpu -p no:cacheprovider -n ${WORKERS:-16} tests/ 2>&1 | tee "$OUT/gpu_tests.log" | tail -15
for ex in "$@"; do
  name=$(basename "$ex" .tk)
  tkc bench "$ex" --json "$OUT/$name.json" --plot "$OUT/$name.png" 2>&1 | tee "$OUT/$name.txt"
done
