#!/usr/bin/env bash
# Session 21, call 2: issue 15's whole sweep, all 76 points, in one device call: each point benched with
# the consts session 20's merged sweep recorded for it (GEMM from session 20 call 2, layernorm from call 5,
# rmsnorm and softmax from session 19; the tuning is in those records), against its peers, with the copy
# bandwidth of this call (sweep15.py --consts-from).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
bash docs/bench/sweep15.sh --part all --consts-from docs/bench/latest/session20/sweep_merged \
  --budget-s 540 --grace-s 15 >/tmp/sw21.txt 2>&1
(cd "$OUT" && tar czf sweep21.tgz sweep15 && rm -rf sweep15)
grep -E "^(gemm|layernorm|rmsnorm|softmax) |^sweep15: " /tmp/sw21.txt | tail -80
true
