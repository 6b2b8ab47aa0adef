#!/usr/bin/env bash
# Attention tile configurations at the reference size (B8 H16 N4096 D128), non-causal and causal, one device call.
# Usage on the GPU machine: bash scripts/bench/attention_variants.sh
set -uo pipefail
source scripts/bench/device_setup.sh
S="--size B=8 --size H=16 --size N=4096"
for v in "BQ=64 STAGES=2" "BQ=128 STAGES=2" "BQ=128 STAGES=3" "BQ=128 BKV=128 STAGES=2"; do
  flags=""; for kv in $v; do flags="$flags -D $kv"; done
  tkc bench examples/attention_fwd.tk $S $flags --reps 20 --variant "${v// /_}" 2>&1 | grep -E "^attention|rror" || echo "$v failed"
  tkc bench examples/attention_fwd.tk $S $flags -D CAUSAL=1 --reps 20 --variant "${v// /_}_causal" 2>&1 | grep -E "^attention|rror" || echo "$v causal failed"
done
