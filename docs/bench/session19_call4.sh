#!/usr/bin/env bash
# Session 19, call 4: the 15 softmax points call 3 left (SWEEP_PREV=.sweep19 holds call 3's sweep15/), then
# the 28 GEMM points afresh in their own directory (.sweep19 also holds session 17's GEMM records, kept
# for any point this call does not reach). Both directories come back as one tarball (the device returns
# at most 8 files).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
t0=$(date +%s)
SWEEP_PREV=.sweep19 bash docs/bench/sweep15.sh --part rows --budget-s 250 --grace-s 10 >/tmp/rows19.txt 2>&1
t1=$(date +%s)
mkdir -p "$OUT/g"
OUT="$OUT/g" bash docs/bench/sweep15.sh --part gemm --budget-s $((560 - (t1 - t0))) --grace-s 10 >/tmp/gemm19.txt 2>&1
(cd "$OUT" && tar czf all19.tgz sweep15 g && rm -rf sweep15 g)
echo "== rows ($((t1 - t0)) s)"; grep -E "^softmax|^sweep15: [0-9]+ of" /tmp/rows19.txt | tail -20
echo "== gemm"; grep -E "^gemm|^sweep15: [0-9]+ of" /tmp/gemm19.txt | tail -32
true
