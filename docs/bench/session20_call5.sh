#!/usr/bin/env bash
# Session 20, call 5: issue 15's 16 layernorm points afresh with OCC = 3 in layernorm.tk's space (the
# rmsnorm and softmax spaces and PTX are unchanged since session 19's sweep; the GEMM was swept in call 2).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
bash docs/bench/sweep15.sh --part rows --kernel layernorm --budget-s 530 --grace-s 15 >/tmp/ln20.txt 2>&1
(cd "$OUT" && tar czf ln20.tgz sweep15 && rm -rf sweep15)
grep -E "^layernorm|^sweep15: [0-9]+ of" /tmp/ln20.txt | tail -20
true
