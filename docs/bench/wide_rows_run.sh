#!/usr/bin/env bash
# Wide rows (issue 10's rmsnorm line, issue 15 item 4) in one device call: the GPU conformance cases
# of short and split row tiles, then rmsnorm (and softmax, layernorm) at D = 8192 and 4096 with rows
# split over warps (row layout `parts`), beside the two-pass rmsnorm they replace, each `tkc bench`
# with torch's peer and the copy bandwidth of the same run. Usage on the GPU machine:
#   bash docs/bench/wide_rows_run.sh      (writes $OUT/wide_rows.txt, printed last)
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}; mkdir -p "$OUT"
source docs/bench/device_setup.sh
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n ${WORKERS:-16} -rfE \
  tests/conformance/test_conformance_gpu.py tests/test_gpu_examples.py -k "wide_rows or short_rows or rmsnorm or ROWS" \
  >"$OUT/gpu_tests.log" 2>&1
bench() {  # kernel, then flags
  local k=$1; shift
  echo "$k $*: $(timeout 60 tkc bench examples/$k.tk --reps 20 "$@" 2>&1 | grep -E "^$k|reaches" | tr '\n' ' ')"
}
{
  for s in "--size N=8192 -D D=8192" "--size N=65536 -D D=4096"; do
    bench rmsnorm $s -D DC=1024                      # the two-pass path (one warp per row, 16 rows)
    for c in "-D ROWS=1 -D WG=1" "-D ROWS=2 -D WG=1" "-D ROWS=2 -D WG=2" "-D ROWS=4 -D WG=2"; do
      bench rmsnorm $s -D DC=8192 $c
    done
  done
  for k in softmax layernorm; do
    bench $k --size N=8192 -D D=8192 -D ROWS=1 -D WG=1
    bench $k --size N=65536 -D D=4096 -D ROWS=2 -D WG=1
  done
} >"$OUT/wide_rows.txt" 2>&1
grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -15 >>"$OUT/wide_rows.txt"
cat "$OUT/wide_rows.txt"
