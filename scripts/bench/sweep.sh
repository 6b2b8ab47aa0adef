#!/usr/bin/env bash
# The benchmark sweep on a lent GPU (scripts/bench/sweep.py says what it measures and how). One device call:
#   bash scripts/bench/sweep.sh --part gemm --budget-s 480          # arguments go to sweep.py
#   bash scripts/bench/sweep.sh --part all --consts-from scripts/bench/sweep_consts.jsonl   # 76 points, ~200 s
# Results in $OUT/sweep/: sweep.jsonl (a line per point), state.json, tune_cache.tgz (the tuned
# configurations), log.txt, sweep.md, sweep_gemm.png, sweep_rows.png: 7 files (the device returns at
# most 8 from $OUT), so the compile cache stays in /tmp. To resume in a later call, copy the returned
# sweep/ folder into the checkout as .sweep/ (ignored via .git/info/exclude), carry it, and set
# SWEEP_PREV=.sweep: its records, state, tune results and log are copied into $OUT/sweep first.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source scripts/bench/device_setup.sh    # carried wheels, editable install (TKIR_CACHE=0; sweep.py turns its own on)
D="$OUT/sweep"
mkdir -p "$D"
if [ -n "${SWEEP_PREV:-}" ] && [ -d "$SWEEP_PREV" ]; then
  for f in sweep.jsonl state.json tune_cache.tgz log.txt; do
    [ -f "$SWEEP_PREV/$f" ] && cp "$SWEEP_PREV/$f" "$D/$f"
  done
fi
{ echo "== sweep.sh $* at $(git rev-parse --short HEAD 2>/dev/null) $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>&1; } >>"$D/log.txt"
timeout 590 python3 scripts/bench/sweep.py --out "$D" --cache-dir /tmp/sweep-cache "$@" 2>&1 | tee -a "$D/log.txt"
