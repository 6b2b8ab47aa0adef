#!/usr/bin/env bash
# Session 20, call 7: the stream-K hand-off without per-thread fences (backend/rules_streamk.py): the GPU
# tests that launch stream-K kernels (repeated launches, ragged shapes), then the A/B against the commit
# before it (docs/bench/session20_ab.py; .ab20/ carried, dumped on the CPU machine).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
python3 -m pytest -q -m gpu -n 8 tests/test_gpu_stream_k_skinny.py tests/test_gpu_examples.py -k "stream_k or skinny" >"$OUT/sk_tests.log" 2>&1
timeout 200 python3 docs/bench/session20_ab.py run --dir .ab20 --out "$OUT" --reps 30 >"$OUT/ab20.txt" 2>&1
tail -12 "$OUT/ab20.txt"
tail -2 "$OUT/sk_tests.log"
true
