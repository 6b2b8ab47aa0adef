#!/usr/bin/env bash
# Session 20, call 6: the example GPU tests (two new layernorm cases at OCC = 3), the tune GPU tests and the
# skinny stream-K tests after the session's last changes.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
python3 -m pytest -q -m gpu -n 16 tests/test_gpu_examples.py tests/test_tune_gpu.py tests/test_gpu_stream_k_skinny.py >"$OUT/gpu20b.log" 2>&1
tail -4 "$OUT/gpu20b.log"
true
