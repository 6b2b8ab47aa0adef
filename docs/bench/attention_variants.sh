#!/usr/bin/env bash
# Attention configurations at the task's reference size (B8 H16 N4096 D128), one run.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
S="--size B=8 --size H=16 --size N=4096"
for v in "BQ=64 STAGES=2" "BQ=128 STAGES=2" "BQ=128 STAGES=3" "BQ=128 BKV=128 STAGES=2"; do
  flags=""; for kv in $v; do flags="$flags -D $kv"; done
  tkc bench examples/attention_fwd.tk $S $flags --reps 20 --variant "${v// /_}" 2>&1 | grep -E "^attention|rror" || echo "$v failed"
  tkc bench examples/attention_fwd.tk $S $flags -D CAUSAL=1 --reps 20 --variant "${v// /_}_causal" 2>&1 | grep -E "^attention|rror" || echo "$v causal failed"
done
