#!/usr/bin/env bash
# GEMM ablations at 4096^3, all in one device call (one process per variant, same GPU): each row the default
# gemm with one thing changed (docs/experiments.md, "GEMM ablations").
# Usage on the GPU machine: bash scripts/bench/ablations.sh
# Writes $OUT/ablation_<name>.json; scripts/bench/tables.py turns them into a markdown table.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}; mkdir -p "$OUT"
source scripts/bench/device_setup.sh
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
run stream_k -D SK=1                                     # the kernel's @stream_k(SK): tails <= max_tail split
run stream_k_all -D SK=1 "$(with 'stream-k{opt_in=true}' 'stream-k{opt_in=true,max_tail=100}')"
