#!/usr/bin/env bash
# Session 13, call 1: issue 15's row misses diagnosed (docs/bench/session13_rows_diag.py), Inductor's
# generated kernels kept, and Nsight Compute on tkir's and Inductor's layernorm at two points.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
timeout 330 python3 docs/bench/session13_rows_diag.py --out "$R" >"$R/diag.log" 2>&1
for pt in "1 768 1 1024 2 0" "4096 16384 1 16384 2 0"; do
  set -- $pt
  # call 1 ran ncu with its default --clock-control base (it locks the SM clock while it profiles),
  # against session 11's note in docs/bench/NOTES.md; the flag below leaves the clocks alone
  timeout 90 ncu --clock-control none --profile-from-start off --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__block_size,launch__grid_size,launch__occupancy_limit_registers,launch__waves_per_multiprocessor,smsp__inst_executed.sum,launch__shared_mem_per_block_static,launch__shared_mem_per_block_dynamic \
    python3 docs/bench/session13_ncu_rows.py "$@" >"$R/ncu_$1_$2.txt" 2>&1
done
mkdir -p "$R/inductor"
find /tmp/ind -name "*.py" -newer docs/bench/session13_call1.sh -exec cp {} "$R/inductor/" \; 2>/dev/null
find /tmp/tri -name "*.json" -exec sh -c 'cp "$1" "'"$R"'/inductor/$(basename $(dirname "$1"))_$(basename "$1")"' _ {} \; 2>/dev/null
{ echo "== diag"; cat "$R/diag.txt" 2>/dev/null || tail -30 "$R/diag.log"
  for f in "$R"/ncu_*.txt; do echo "== $(basename $f)"; grep -E "^\s+[a-z_]+__|^  [a-zA-Z_]+.*\(" "$f" | head -30; done
  echo "== inductor files: $(ls "$R/inductor" | wc -l)"
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
