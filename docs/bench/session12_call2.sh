#!/usr/bin/env bash
# Session 12, call 2: call 1's rows again after the fix of the sm_80 accumulator store in a role (it
# addressed by the block's thread index, so a consumer role after a producer stored to the wrong rows),
# then Nsight Compute on the 256x128x64 producer variant without persistent (pw4np).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 300 python3 docs/bench/session11_sm80.py --only gemm12 --json "$R/gemm12.json" >"$R/gemm12.log" 2>&1
PW4NP=$(python3 -c "import sys; sys.path.insert(0, 'docs/bench'); import session11_sm80 as s; print(s.PASS_VARIANTS['pw4np']())")
timeout 150 ncu --clock-control none --set full --import-source no -k regex:gemm -c 1 -f -o "$R/pw4np" \
  tkc run examples/gemm.tk --target sm_80 -D BM=256 -D BN=128 -D BK=64 -D STAGES=4 --size M=4096 --size N=4096 \
  --size K=4096 --passes "$PW4NP" >"$R/pw4np.run.txt" 2>&1
ncu -i "$R/pw4np.ncu-rep" --page details --csv >"$R/pw4np.details.csv" 2>&1
ncu -i "$R/pw4np.ncu-rep" --page source --csv --print-source sass >"$R/pw4np.source.csv" 2>&1
python3 docs/bench/ncu_summary.py "$R"/pw4np >"$R/ncu_summary.txt" 2>&1
{ echo "== sm_80 gemm 4096^3, producer warps (row, ok, TFLOP/s, cuBLAS, x wgmma)"
  sed -n '/^row /,$p' "$R/gemm12.log"; grep -E "Error|error" "$R/gemm12.log" | head -5
  echo "== ncu pw4np (head)"; head -60 "$R/ncu_summary.txt"
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
