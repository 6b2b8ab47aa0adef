#!/usr/bin/env bash
# Session 22, call 2: issue 15's whole sweep, all 76 points, in one call (consts from
# docs/bench/latest/session22/consts.jsonl, made by docs/bench/session22_consts.py: session 20's tuned
# records, the two GEMM points at N = 128256, M >= 4096 tuned again in this call with the 6% re-timing
# band, layernorm 1 x 768 with the consts the bench A/B chose), then the whole GPU test suite.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
T0=$(date +%s)
bash docs/bench/sweep15.sh --part all --consts-from docs/bench/latest/session22/consts.jsonl \
  --budget-s 330 --grace-s 15 >/tmp/sw22.txt 2>&1
(cd "$OUT" && tar czf sweep22.tgz sweep15 && rm -rf sweep15)
T1=$(date +%s)
source docs/bench/device_setup.sh
timeout $((585 - (T1 - T0))) python3 -m pytest -q -m gpu -n 16 -p no:cacheprovider tests >"$OUT/gpu_tests.log" 2>&1
echo "gpu tests rc=$? in $(( $(date +%s) - T1 )) s; sweep $((T1 - T0)) s"
grep -E "passed|failed|FAILED|ERROR" "$OUT/gpu_tests.log" | tail -8
grep -E "FAIL|ERROR|not run|^sweep15: |128256|N=1 D=768|N=4096 D=8192" /tmp/sw22.txt | tail -30
true
