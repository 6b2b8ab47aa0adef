#!/usr/bin/env bash
# Session 13, call 2: after split_idle_warps (infer-layouts) and the element-wise accumulators of
# layernorm's and rmsnorm's chunk loops: the small rows with and without W loaded first and chunked
# points at the wide rows (docs/bench/session13_rows_diag.py --set 2), then issue 15's sweep for the
# layernorm and rmsnorm points at D = 768, 8192, 16384 (24 points, tuned afresh).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/diag2; mkdir -p "$R"
source docs/bench/device_setup.sh
timeout 150 python3 docs/bench/session13_rows_diag.py --set 2 --out "$R" >"$R/diag.log" 2>&1
tar czf "$OUT/diag.tgz" -C "$R" .
bash docs/bench/sweep15.sh --part rows --kernel layernorm,rmsnorm --d 768,8192,16384 --budget-s 360 >/dev/null 2>&1
echo "== diag (set 2)"; cat "$R/diag.txt" 2>/dev/null || tail -20 "$R/diag.log"
echo "== sweep"; grep -E "^(layernorm|rmsnorm|softmax) N=|sweep15: [0-9]+ of" "$OUT/sweep15/log.txt" | tail -30
