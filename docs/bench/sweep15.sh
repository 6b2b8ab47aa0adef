#!/usr/bin/env bash
# Issue 15's sweep on a lent H200 (docs/bench/sweep15.py says what it measures and how). One device call:
#   bash docs/bench/sweep15.sh --part gemm --budget-s 480          # arguments go to sweep15.py
# Results in $OUT/sweep15/: sweep.jsonl (a line per point), state.json, tune_cache.tgz (the tuned
# configurations), log.txt, sweep.md, sweep_gemm.png, sweep_rows.png: 7 files (the device returns at
# most 8 from $OUT), so the compile cache stays in /tmp. To resume in a later call, copy the returned
# sweep15/ folder into the checkout as .sweep15/ (ignored via .git/info/exclude), carry it, and set
# SWEEP_PREV=.sweep15: its records, state, tune results and log are copied into $OUT/sweep15 first.
set -uo pipefail
source docs/bench/device_setup.sh    # carried wheels, editable install (TKIR_CACHE=0; sweep15.py turns its own on)
D="$OUT/sweep15"
mkdir -p "$D"
if [ -n "${SWEEP_PREV:-}" ] && [ -d "$SWEEP_PREV" ]; then
  for f in sweep.jsonl state.json tune_cache.tgz log.txt; do
    [ -f "$SWEEP_PREV/$f" ] && cp "$SWEEP_PREV/$f" "$D/$f"
  done
fi
{ echo "== sweep15.sh $* at $(git rev-parse --short HEAD 2>/dev/null) $(date -u +%FT%TZ)"
  nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv 2>&1; } >>"$D/log.txt"
timeout 590 python3 docs/bench/sweep15.py --out "$D" --cache-dir /tmp/sweep15-cache "$@" 2>&1 | tee -a "$D/log.txt"
