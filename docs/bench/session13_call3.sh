#!/usr/bin/env bash
# Session 13, call 3: the GPU tests of the row examples (new cases: split rows, hoisted loads), then
# docs/bench/session13_rows_diag.py --set 3 (hoist-loads at the small rows; the chunk loops, with a
# reduction per chunk and with element-wise accumulators, at the wide rows).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r3; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_examples.py -k "layernorm or rmsnorm or softmax" >"$R/gpu_tests.log" 2>&1
timeout 380 python3 docs/bench/session13_rows_diag.py --set 3 --out "$R" >"$R/diag.log" 2>&1
tar czf "$OUT/r3.tgz" -C "$R" .
echo "== GPU tests"; tail -3 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head
echo "== diag (set 3)"; cat "$R/diag.txt" 2>/dev/null || tail -20 "$R/diag.log"
