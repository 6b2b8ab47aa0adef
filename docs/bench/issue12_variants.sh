#!/usr/bin/env bash
# Tile and warpgroup choices for attention, one device call: each VARIANTS line is
# "name | sizes | -D flags" benchmarked causal and non-causal (tkir vs cuDNN and FA2, same process).
# Results: $OUT/r/variant_*.txt, summary printed last. Usage: bash docs/bench/issue12_variants.sh
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
D128="--size B=8 --size H=16 --size N=4096"
D64="--size B=16 --size H=32 --size N=2048"
VARIANTS=${VARIANTS:-"d128_bq128_bkv128_s2|$D128|-D D=128 -D BQ=128 -D BKV=128 -D STAGES=2
d128_bq192_bkv64_s2|$D128|-D D=128 -D BQ=192 -D BKV=64 -D STAGES=2
d128_bq192_bkv64_s3|$D128|-D D=128 -D BQ=192 -D BKV=64 -D STAGES=3
d64_bq128_bkv128_s2|$D64|-D D=64 -D BQ=128 -D BKV=128 -D STAGES=2
d64_bq192_bkv64_s3|$D64|-D D=64 -D BQ=192 -D BKV=64 -D STAGES=3
d64_bq192_bkv128_s2|$D64|-D D=64 -D BQ=192 -D BKV=128 -D STAGES=2"}
while IFS='|' read -r name sizes flags; do
  for causal in 0 1; do
    timeout 200 tkc bench examples/attention_fwd.tk $sizes $flags -D CAUSAL=$causal --reps ${REPS:-20} \
      --variant "$name" >"$R/variant_${name}_c$causal.txt" 2>&1
  done
done <<<"$VARIANTS"
for f in "$R"/variant_*.txt; do grep -E "attention_fwd  " "$f" | tail -1 || tail -3 "$f"; done >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
