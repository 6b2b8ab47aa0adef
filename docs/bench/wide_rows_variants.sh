#!/usr/bin/env bash
# rmsnorm variants at the issue-10 shapes, one device call (after docs/bench/wide_rows_run.sh):
# the example (x kept bf16 between the reduction and the scaling), its earlier form with an f32
# copy of x live (variants/rmsnorm_v1.tk), and a block that loops over rows with W loaded once
# (variants/rmsnorm_rows_loop.tk); rows per block and warpgroups varied. Then the GPU tests of the
# new conformance cases. Writes $OUT/wide_rows_variants.txt (printed last).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}; mkdir -p "$OUT"
source docs/bench/device_setup.sh
bench() {  # file, then flags
  local f=$1; shift
  echo "$(basename $f) $*: $(timeout 60 tkc bench $f --reps 20 "$@" 2>&1 | grep -E "^rmsnorm|reaches" | tr '\n' ' ')"
}
{
  for s in "--size N=8192 -D D=8192" "--size N=65536 -D D=4096"; do
    for c in "-D ROWS=1 -D WG=1" "-D ROWS=1 -D WG=2" "-D ROWS=2 -D WG=2"; do
      bench examples/rmsnorm.tk $s -D DC=8192 $c
    done
    bench docs/bench/variants/rmsnorm_v1.tk $s -D DC=8192 -D ROWS=1 -D WG=1
    bench docs/bench/variants/rmsnorm_rows_loop.tk $s -D WG=2 -D ITERS=4
    bench docs/bench/variants/rmsnorm_rows_loop.tk $s -D WG=1 -D ITERS=4
  done
  bench examples/rmsnorm.tk --size N=65536
  bench docs/bench/variants/rmsnorm_v1.tk --size N=65536
} >"$OUT/wide_rows_variants.txt" 2>&1
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n ${WORKERS:-16} -rfE \
  tests/conformance/test_conformance_gpu.py tests/test_gpu_examples.py -k "wide_rows or short_rows or rmsnorm or ROWS" \
  >"$OUT/gpu_tests.log" 2>&1
grep -E "passed|failed|FAILED|Error" "$OUT/gpu_tests.log" | tail -15 >>"$OUT/wide_rows_variants.txt"
cat "$OUT/wide_rows_variants.txt"
