#!/usr/bin/env bash
# Session 23, call 3 (issue 13): the 4096^3 table with a_ahead as the backend's rule where registers allow
# (gemm.tk's default sm_80 plan with 4 producer warps against the one-role rotated loop; session16_sm80.py --set
# session23c), then Nsight Compute (--set full, one launch each, clocks left alone) on the one-role sm_80 gemm
# 256 x 128 x 64 S4 (rotated, A ahead) beside Triton's best mma.sync GEMM (128 x 128 x 32 S4 W4): where the
# warps stall now (docs/bench/ncu_summary.py).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r23; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
pp() { python3 -c "import tkir; print(','.join({'plan-occupancy': 'plan-occupancy{producer_warps=0}', 'pipeline-cp-async': 'pipeline-cp-async{rotate=$1}'}.get(p, p) for p in tkir.api.default_pipeline()))"; }
prof() {  # name, kernel-name regex, then the command
  local n=$1 k=$2; shift 2
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:"$k" -c 1 -f -o "$R/$n" "$@" >"$R/$n.run.txt" 2>&1
  ncu -i "$R/$n.ncu-rep" --page details --csv >"$R/$n.details.csv" 2>&1
  ncu -i "$R/$n.ncu-rep" --page source --csv --print-source sass >"$R/$n.source.csv" 2>&1
}
DISABLE_MMA_V3=1 timeout 200 python3 docs/bench/session16_sm80.py --set session23c --out "$OUT" >"$OUT/sm80_session23c.txt" 2>&1
G="tkc run examples/gemm.tk --target sm_80 -D BM=256 -D BN=128 -D BK=64 -D STAGES=4 --size M=4096 --size N=4096 --size K=4096"
prof rot1 gemm $G --passes "$(pp 1)"
export DISABLE_MMA_V3=1
prof triton4w "^mm$" python3 docs/bench/session16_triton_mm.py 128 128 32 4 4
python3 docs/bench/ncu_summary.py "$R"/rot1 "$R"/triton4w >"$R/summary.txt" 2>&1
rm -f "$R"/*.ncu-rep "$R"/triton4w.source.csv
cp -r "$R" "$OUT/"
grep -E "^====|Duration|Issue Slots|Warp Cycles Per Issued|Instructions Executed  |stall_(wait|selected|math|long_sb|barrier|short_sb|dispatch|not_selected|mio|lg_throttle|mio_throttle) " "$R/summary.txt"
sed -n '/^== 4096/,$p' "$OUT/sm80_session23c.txt"; grep -E "Error|Traceback" "$OUT/sm80_session23c.txt" | head -5
true
