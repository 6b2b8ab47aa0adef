#!/usr/bin/env bash
# Session 13, call 4: issue 15's row sweep, all 48 points, tuned afresh with this session's compiler
# (split_idle_warps, hoist-loads with HOIST in the row examples' tune spaces, rmsnorm's chunk loop).
# Call 5 resumes it with the GEMM part (SWEEP_PREV=.sweep15), so one sweep.jsonl holds all 76 points.
set -uo pipefail
bash docs/bench/sweep15.sh --part rows --budget-s 520 >/dev/null 2>&1
grep -E "^(layernorm|rmsnorm|softmax) N=|sweep15: [0-9]+ of" "$OUT/sweep15/log.txt" | tail -50
