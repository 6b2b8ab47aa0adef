#!/usr/bin/env bash
# Session 14, call 4: issue 15's row sweep (48 points, tuned afresh with session 14's compiler: layernorm's
# shifted chunk loop, 4/8-byte vector accesses, edge tests left out where they cannot fail), resuming
# call 2's GEMM part (SWEEP_PREV=.sweep15: its 28 records and tune cache), so one sweep.jsonl holds all
# 76 points.
set -uo pipefail
SWEEP_PREV=.sweep15 bash docs/bench/sweep15.sh --part rows --budget-s 555 >/dev/null 2>&1
python3 docs/bench/sweep15.py --report-only "$OUT/sweep15" 2>&1 | tail -2
grep -E "^(layernorm|rmsnorm|softmax) N=|sweep15: [0-9]+ of" "$OUT/sweep15/log.txt" | tail -52
