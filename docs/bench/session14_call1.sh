#!/usr/bin/env bash
# Session 14, call 1: GPU tests of what changed (4- and 8-byte vector accesses of row tiles, layernorm's
# shifted per-position chunk loop; the conformance casts whose PTX changed), then the wide-row misses
# against chunk-loop variants (session13_rows_diag.py --set 4), Nsight Compute on tkir's chunk loop and
# Inductor's layernorm at 4096 x 16384 (clocks left alone), and the six D = 768 small points tuned again
# (the tune model's fix of session 13, not measured then).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r1; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_gpu_examples.py \
  tests/conformance/test_conformance_gpu.py -k "layernorm or rmsnorm or softmax or cast_to" >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
timeout 250 python3 docs/bench/session13_rows_diag.py --set 4 --out "$R" >"$R/diag.log" 2>&1
t2=$(date +%s)
for pt in "4096 16384 1 2048 4 4" "4096 16384 1 16384 2 0"; do
  set -- $pt
  timeout 45 ncu --clock-control none --profile-from-start off --section SpeedOfLight --section Occupancy \
    --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    python3 docs/bench/session13_ncu_rows.py "$@" >"$R/ncu_$4_$5_$6.txt" 2>&1
done
t3=$(date +%s)
bash docs/bench/sweep15.sh --part rows --rows 1,128 --d 768 --force-tune --budget-s 90 >/dev/null 2>&1
t4=$(date +%s)
cp "$OUT/sweep15/sweep.jsonl" "$R/sweep768.jsonl" 2>/dev/null; rm -rf "$OUT/sweep15"
tar czf "$OUT/r1.tgz" -C "$R" .
echo "== GPU tests ($((t1 - t0)) s)"; tail -2 "$R/gpu_tests.log"; grep -E "^FAILED|^ERROR" "$R/gpu_tests.log" | head
echo "== ncu ($((t3 - t2)) s)"; for f in "$R"/ncu_*.txt; do echo "-- $(basename $f)"; grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|L2 Hit Rate|Warp Cycles Per Issued|Block Size" "$f" | head -24; done
echo "== D=768 sweep ($((t4 - t3)) s)"; python3 -c "
import json
for l in open('$R/sweep768.jsonl'):
    r = json.loads(l); print(r['id'], r.get('consts'), round(r.get('ms', 0) * 1e3, 2), 'us x compiled', round(r.get('ratio_compiled') or 0, 3), 'x eager', round(r.get('ratio_eager') or 0, 3))
" 2>&1 | tail -8
echo "== diag set 4 ($((t2 - t1)) s)"; cat "$R/diag.txt" 2>/dev/null || tail -20 "$R/diag.log"
