#!/usr/bin/env bash
# Session 14, call 2: the GPU tests of the examples (both targets; session 14's vector-access and chunk-loop
# cases among them), Nsight Compute's instruction and source-level counters on tkir's layernorm chunk loop
# and Inductor's at 4096 x 16384 (clocks left alone), then the GEMM part of issue 15's sweep, tuned afresh
# (call 3 resumes it with the rows: SWEEP_PREV=.sweep15, so one sweep.jsonl holds all 76 points).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r2; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_examples.py >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
for pt in "4096 16384 1 2048 4 4" "4096 16384 1 4096 4 4"; do
  set -- $pt
  timeout 50 ncu --clock-control none --profile-from-start off --section InstructionStats --section SourceCounters \
    --section WarpStateStats --section ComputeWorkloadAnalysis --section SchedulerStats \
    python3 docs/bench/session13_ncu_rows.py "$@" >"$R/ncu_src_$4_$5_$6.txt" 2>&1
done
t2=$(date +%s)
bash docs/bench/sweep15.sh --part gemm --force-tune --budget-s 330 >/dev/null 2>&1
t3=$(date +%s)
tar czf "$OUT/r2.tgz" -C "$R" .
echo "== GPU tests ($((t1 - t0)) s)"; tail -2 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head
echo "== ncu ($((t2 - t1)) s)"; for f in "$R"/ncu_src_*.txt; do echo "-- $(basename $f)"; grep -E "^  [a-z_]+.*\(|Executed Instructions  |Issued Instructions  |Warp Cycles Per Issued|No Eligible|Branch Instructions  " "$f" | head -16; done
echo "== GEMM sweep ($((t3 - t2)) s)"; grep -E "^gemm M=|sweep15: [0-9]+ of" "$OUT/sweep15/log.txt" | tail -30
