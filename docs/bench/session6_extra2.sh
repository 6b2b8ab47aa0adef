#!/usr/bin/env bash
# Session 6, last call: issue 15's decode-time GEMMs (M = 1, 16, 64; N = K = 4096) tuned with the
# space that has STAGES = 8, and wide rows (D = 16384) tuned, each against torch (and torch.compile
# for the row kernels) in the same run. Writes under $R.
set -uo pipefail
export TKIR_CACHE=1 TKIR_CACHE_DIR=/tmp/tkir-tune-cache2
for m in 1 16 64; do
  timeout 100 tkc tune examples/gemm.tk --size M=$m --size N=4096 --size K=4096 --json "$R/tune_m$m.json" >"$R/tune_m$m.txt" 2>&1
  best=$(python3 -c "import json; b=json.load(open('$R/tune_m$m.json'))['best']; print(' '.join(f'-D {k}={v}' for k,v in b.items() if k in ('BM','BN','STAGES')))" 2>/dev/null)
  timeout 80 tkc bench examples/gemm.tk --size M=$m --size N=4096 --size K=4096 $best --variant tuned --reps 30 \
    >"$R/gemm_tuned_m$m.txt" 2>&1
done
for k in layernorm rmsnorm softmax; do
  timeout 100 tkc tune examples/$k.tk -D D=16384 --size N=4096 --json "$R/tune_${k}_d16384.json" >"$R/tune_${k}_d16384.txt" 2>&1
  best=$(python3 -c "import json; b=json.load(open('$R/tune_${k}_d16384.json'))['best']; print(' '.join(f'-D {k}={v}' for k,v in b.items()))" 2>/dev/null)
  timeout 120 tkc bench examples/$k.tk --size N=4096 $best --variant tuned >"$R/${k}_d16384.txt" 2>&1
done
for f in "$R"/tune_*.txt; do echo "== $(basename $f)"; grep -E "points|best:|rho" "$f"; done
grep -hE "^gemm " "$R"/gemm_tuned_m*.txt
for k in layernorm rmsnorm softmax; do grep -E "^$k " "$R/${k}_d16384.txt" || tail -3 "$R/${k}_d16384.txt"; done
