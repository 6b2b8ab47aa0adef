#!/usr/bin/env bash
# Session 18, call 4 (written, not run in session 18: the device time ran out; the next session's rows
# sweep): the GPU tests changed since call 2 (tkc tune's choice by the second round, the C launcher's
# overlap check), then issue 15's row sweep (48 points, every one tuned afresh with
# readonly-loads in the default pipeline) in one call, as far as the budget goes.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 -rfE tests/test_tune_gpu.py tests/test_emit_c_gpu.py \
  >/tmp/gpu_tests3.log 2>&1
t1=$(date +%s)
bash docs/bench/sweep15.sh --part rows --budget-s $((530 - (t1 - t0))) --grace-s 10 >/tmp/sweep3.txt 2>&1
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 /tmp/gpu_tests3.log; grep -hE "^FAILED|^ERROR" /tmp/gpu_tests3.log | head
cp /tmp/gpu_tests3.log "$OUT/sweep15/gpu_tests3.log" 2>/dev/null
tail -60 /tmp/sweep3.txt
true
