#!/usr/bin/env bash
# Session 16, call 4: the sm_80 cp.async copies with the ignore-src predicate, round addresses as one add
# from round 0's, and each tile's copies as one run (backend/rules_sm80.py cp_async_rows): the sm_80 GPU
# tests, then the A/B of the session's start (07649a1) against the head on the sm_80 gemm and attention
# configurations (docs/bench/session16_ab.py; PTX dumped on the CPU machine into .ab16/).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r4; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_sm80.py tests/test_gpu_examples.py >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
timeout 330 python3 docs/bench/session16_ab.py run --dir .ab16 --out "$R" --reps 20 >"$R/ab16.txt" 2>&1
t2=$(date +%s)
cp -r "$R" "$OUT/"
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -hE "^FAILED|^ERROR" "$R/gpu_tests.log" | head
echo "== A/B ($((t2 - t1)) s)"; sed -n '/^== A\/B/,$p' "$R/ab16.txt"; grep -E "ERROR|Traceback" "$R/ab16.txt" | head -5
true
