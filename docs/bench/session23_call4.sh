#!/usr/bin/env bash
# Session 23, call 4 (issue 13): after plan-occupancy's automatic choice became one role at equal mma warps per SM
# (gemm.tk and linear.tk on sm_80 now compile to the rotated one-role loop), the whole GPU suite, the 4096^3
# table of the changed defaults against the producer warps they had (session16_sm80.py --set session23d), and
# linear.tk on sm_80 with tkc bench, default against producer_warps=4.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
timeout 230 python3 -m pytest -q -m gpu -n 16 tests -p no:cacheprovider >"$OUT/gpu_suite.txt" 2>&1
echo "gpu suite: $(tail -1 "$OUT/gpu_suite.txt") ($(( $(date +%s) - t0 )) s)"
DISABLE_MMA_V3=1 timeout 200 python3 docs/bench/session16_sm80.py --set session23d --out "$OUT" >"$OUT/sm80_session23d.txt" 2>&1
L="tkc bench examples/linear.tk --target sm_80 --size M=4096 --size N=4096 --size K=4096 --reps 30"
timeout 60 $L --variant default >"$OUT/linear_default.txt" 2>&1
timeout 60 $L --variant producer_warps=4 --passes 'canonicalize,legalize-mma,fold-scale,contract-fma,fuse-row-stats,hoist-loads,fence-loads{opt_in=true},infer-layouts,select-swizzle,bank-conflicts,create-tma,cache-policy,readonly-loads,cluster-rows,plan-occupancy{producer_warps=4},pipeline,pipeline-cp-async,early-release,persistent,stream-k{opt_in=true},split-masks,overlap-mma,pingpong,canonicalize' >"$OUT/linear_pw4.txt" 2>&1
grep -E "^FAILED|^ERROR" "$OUT/gpu_suite.txt" | head -10
sed -n '/^== 4096/,$p' "$OUT/sm80_session23d.txt"; grep -E "Error|Traceback" "$OUT/sm80_session23d.txt" | head -5
tail -4 "$OUT/linear_default.txt"; tail -4 "$OUT/linear_pw4.txt"
true
