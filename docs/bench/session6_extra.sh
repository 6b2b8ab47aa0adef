#!/usr/bin/env bash
# Session 6, the benchmarks beside session6_run.sh's sections (run as its EXTRA): issue 15's tuned
# gemm at skinny and square shapes against cuBLAS, and a row kernel against eager torch and
# torch.compile. Writes under $R (session6_run.sh's results folder).
set -uo pipefail
export TKIR_CACHE=1 TKIR_CACHE_DIR=/tmp/tkir-tune-cache   # tune's results live in the cache
for m in 64 256 4096; do
  timeout 120 tkc tune examples/gemm.tk --size M=$m --size N=4096 --size K=4096 --json "$R/tune_m$m.json" \
    >"$R/tune_m$m.txt" 2>&1
  best=$(python3 -c "import json,sys; b=json.load(open('$R/tune_m$m.json'))['best']; print(' '.join(f'-D {k}={v}' for k,v in b.items() if k in ('BM','BN','STAGES')))" 2>/dev/null)
  timeout 100 tkc bench examples/gemm.tk --size M=$m --size N=4096 --size K=4096 $best --variant "tuned" \
    --json "$R/gemm_tuned_m$m.json" >"$R/gemm_tuned_m$m.txt" 2>&1
  timeout 100 tkc bench examples/gemm.tk --size M=$m --size N=4096 --size K=4096 --variant "default" \
    >"$R/gemm_default_m$m.txt" 2>&1
done
timeout 200 tkc bench examples/layernorm.tk --json "$R/layernorm.json" >"$R/layernorm.txt" 2>&1
for f in "$R"/tune_m*.txt; do echo "== $f"; grep -E "points|best|rho|from the cache" "$f"; done
grep -hE "^gemm " "$R"/gemm_*_m*.txt
grep -E "^layernorm" "$R/layernorm.txt"
