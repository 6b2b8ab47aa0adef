#!/usr/bin/env bash
# Session 16, call 5 (after the cp.async changes): Nsight Compute (--set full, one launch each, clocks left alone) on the same GEMM shape
# built by tkir and by Triton's mma.sync path (128 x 128 x 32 blocks of 4 warps, 4 stages, two blocks per SM;
# call 2: tkir 374, Triton 422 TFLOP/s), to see where tkir's warps stall that Triton's do not; per kernel the
# headline metrics, the stall breakdown and the SASS lines with the most samples (docs/bench/ncu_summary.py).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r5; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
PASSES=$(python3 -c "import tkir; print(','.join('plan-occupancy{producer_warps=0}' if p == 'plan-occupancy' else p for p in tkir.api.default_pipeline()))")
prof() {  # name, kernel-name regex, then the command
  local n=$1 k=$2; shift 2
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:"$k" -c 1 -f -o "$R/$n" "$@" >"$R/$n.run.txt" 2>&1
  ncu -i "$R/$n.ncu-rep" --page details --csv >"$R/$n.details.csv" 2>&1
  ncu -i "$R/$n.ncu-rep" --page source --csv --print-source sass >"$R/$n.source.csv" 2>&1
}
prof tkir4w gemm_wg tkc run docs/bench/variants/gemm_warps/gemm_wg_occ.tk --target sm_80 -D BM=128 -D BN=128 -D BK=32 -D STAGES=4 -D WG=1 --passes "$PASSES" --size M=4096 --size N=4096 --size K=4096
export DISABLE_MMA_V3=1
prof triton4w "^mm$" python3 docs/bench/session16_triton_mm.py 128 128 32 4 4
python3 docs/bench/ncu_summary.py "$R"/tkir4w "$R"/triton4w >"$R/summary.txt" 2>&1
rm -f "$R"/*.ncu-rep "$R"/triton4w.source.csv
cp -r "$R" "$OUT/"   # what is done so far comes back even if the bench below does not finish
timeout 300 python3 docs/bench/session16_sm80.py --set call5 --out "$R" >"$R/sm80_call5.txt" 2>&1
cp -r "$R" "$OUT/"
grep -E "^====|Duration|Issue Slots|Warp Cycles Per Issued|Instructions Executed  |stall_(wait|selected|math|long_sb|barrier|short_sb|dispatch|not_selected|mio) " "$R/summary.txt"
sed -n '/^== 4096/,$p' "$R/sm80_call5.txt"; grep -E "Error|Traceback" "$R/sm80_call5.txt" | head -5
true
