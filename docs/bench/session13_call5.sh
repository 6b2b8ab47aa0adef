#!/usr/bin/env bash
# Session 13, call 5: call 4's row sweep resumed (SWEEP_PREV=.sweep15, call 4's records without the
# N = 1 and 128 points): those 24 points again with tkir.bench's longer host lead (HOST_LEAD_CYCLES
# 1,000,000; call 4 timed torch.compile's host path there) and the host-gap check in sweep15.bars,
# and the 4 softmax N = 65536 points call 4's budget left.
set -uo pipefail
SWEEP_PREV=.sweep15 bash docs/bench/sweep15.sh --part rows --budget-s 300 >/dev/null 2>&1
python3 docs/bench/sweep15.py --report-only "$OUT/sweep15" 2>&1 | tail -3
grep -E "^(layernorm|rmsnorm|softmax) N=(1|128|65536) |sweep15: [0-9]+ of" "$OUT/sweep15/log.txt" | tail -32
