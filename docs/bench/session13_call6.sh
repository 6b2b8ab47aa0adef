#!/usr/bin/env bash
# Session 13, call 6: call 5's sweep resumed without its 6 points at N = 1, 128 and D = 768, which used
# tune results cached in call 4 (timed with the old, shorter host lead): those 6 tuned again
# (--force-tune), and softmax N = 65536, D = 16384, which call 5's budget left.
set -uo pipefail
SWEEP_PREV=.sweep15 bash docs/bench/sweep15.sh --part rows --rows 1,128,65536 --d 768,16384 --force-tune \
  --budget-s 170 >/dev/null 2>&1
grep -E "^(layernorm|rmsnorm|softmax) N=(1|128|65536) D=(768|16384) |sweep15: [0-9]+ of" "$OUT/sweep15/log.txt" | tail -20
