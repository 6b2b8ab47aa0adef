#!/usr/bin/env bash
# GEMM ablations of issue 6, all in one run (one process per variant, same GPU, same session).
# Usage on the GPU machine after docs/bench/run_gpu.sh has installed tkir: bash docs/bench/ablations.sh
# Writes $OUT/ablation_<name>.json; docs/bench/tables.py turns them into docs/experiments.md rows.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
SIZE="--size M=4096 --size N=4096 --size K=4096"
DEFAULT=$(tkc passes | sed -n 's/^  --passes=//p')   # the default pipeline as --passes text
with() {  # one pass of the default pipeline replaced: with persistent 'persistent{group_m=1}'
  local spec=",$DEFAULT,"
  echo "--passes=$(echo "${spec/,$1,/,$2,}" | sed 's/^,//; s/,$//')"
}
run() {  # name, then tkc bench flags
  local name=$1; shift
  timeout 90 tkc bench examples/gemm.tk $SIZE --reps 30 --variant "$name" --json "$OUT/ablation_$name.json" "$@" \
    2>&1 | grep -E "^gemm|error" || echo "$name: failed (see above)"
}
run full
run stages3 -D STAGES=3
run stages2 -D STAGES=2
run stages1 -D STAGES=1
run rowmajor "$(with persistent 'persistent{group_m=1}')"
run group16 "$(with persistent 'persistent{group_m=16}')"
run no_tma --no-tma
run sm_80 --target sm_80
run swizzle_none --swizzle=none
run epilogue_1buf "$(with create-tma 'create-tma{epilogue_chunk=128}')"
run full_grid "$(with persistent 'persistent{balanced_grid=0}')"
run l2_256 "$(with create-tma 'create-tma{l2_promotion=256}')"
run stream_k "$(with persistent 'persistent,stream-k')"
run stream_k_all "$(with persistent 'persistent,stream-k{max_tail=100}')"
