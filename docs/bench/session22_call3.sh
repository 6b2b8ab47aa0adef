#!/usr/bin/env bash
# Session 22, call 3: issue 15's tkc tune criterion with the current tuner (6% re-timing band): gemm.tk at
# 4096^3 from an empty cache (must finish under 2 minutes and print the predicted-versus-measured table),
# then the same call again (must time nothing: the cache).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
export TKIR_CACHE=1 TKIR_CACHE_DIR=/tmp/tune22-cache
rm -rf "$TKIR_CACHE_DIR"
for i in 1 2; do
  t0=$(date +%s.%N)
  tkc tune examples/gemm.tk --size M=4096 --size N=4096 --size K=4096 >"$OUT/tune_$i.txt" 2>&1
  rc=$?
  echo "tkc tune call $i: rc=$rc $(python3 -c "print(f'{$(date +%s.%N) - $t0:.1f}')") s" | tee -a "$OUT/tune_times.txt"
done
head -12 "$OUT/tune_1.txt"; grep -E "best|timed again" "$OUT/tune_1.txt" | cut -c1-400
head -4 "$OUT/tune_2.txt"; grep -E "best|cache" "$OUT/tune_2.txt" | head -3
cat "$OUT/tune_times.txt"
true
