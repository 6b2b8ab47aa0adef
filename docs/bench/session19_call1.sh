#!/usr/bin/env bash
# Session 19, call 1: layernorm's rows loop at the wide-row points (docs/bench/session19_rows.py), then the
# whole GPU suite at this commit (readonly-loads.tk's GPU case had not run on a GPU).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
mkdir -p "$OUT"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
timeout 240 python3 docs/bench/session19_rows.py --out "$OUT" --reps 30 >/tmp/rows19.txt 2>&1
t1=$(date +%s)
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests >/tmp/gpu19.log 2>&1
t2=$(date +%s)
cp /tmp/rows19.txt /tmp/gpu19.log "$OUT/" 2>/dev/null
echo "== GPU suite ($((t2 - t1)) s)"; tail -1 /tmp/gpu19.log; grep -hE "^FAILED|^ERROR" /tmp/gpu19.log | head -20
echo "== rows loop ($((t1 - t0)) s)"; tail -45 /tmp/rows19.txt
