#!/usr/bin/env bash
# Session 11, call 2 (issue 13 item 4): where the sm_80 gemm loses against its own ceiling. Nsight Compute
# (--set full, one launch each) on gemm.tk sm_80 256x128x64 STAGES=4 at 4096^3, on mma_smem_ceiling.tk (the
# same k-tile with no copies, waits or barriers) and on attention_fwd.tk sm_80 BQ=128 BKV=64 at
# (8, 16, 4096, 128); per kernel the headline metrics, the warp stall breakdown and the SASS lines with the
# most stall samples. Results under $OUT. (Call 2 ran without --clock-control none: ncu then locked the SM clock
# to base while profiling; the flag is there so a re-run leaves the clocks alone.)
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
prof() {  # name, then the tkc run arguments
  local n=$1; shift
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:"$KNAME" -c 1 -f -o "$R/$n" tkc run "$@" >"$R/$n.run.txt" 2>&1
  ncu -i "$R/$n.ncu-rep" --page details --csv >"$R/$n.details.csv" 2>&1
  ncu -i "$R/$n.ncu-rep" --page source --csv --print-source sass >"$R/$n.source.csv" 2>&1
}
KNAME=gemm prof gemm80 examples/gemm.tk --target sm_80 -D BM=256 -D BN=128 -D BK=64 -D STAGES=4 --size M=4096 --size N=4096 --size K=4096
KNAME=mma_smem prof smem80 docs/bench/claims/mma_smem_ceiling.tk --target sm_80 --size M=33792 --size N=128
KNAME=attention prof attn80 examples/attention_fwd.tk --target sm_80 -D BQ=128 -D BKV=64 --size B=8 --size H=16 --size N=4096
python3 docs/bench/ncu_summary.py "$R"/gemm80 "$R"/smem80 "$R"/attn80 >"$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
