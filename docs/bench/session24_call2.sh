#!/usr/bin/env bash
# Session 24, call 2 (issue 13, the sm_80 gemm): where CUTLASS's 12-19% over tkir's sm_80 gemm comes from.
# 1. tkir at CUTLASS's fastest tiles beside CUTLASS (session16_sm80.py --set session24b), with the screen of
#    CUTLASS's L2::128B prefetch hint on tkir's cp.async, at 4096^3 and at K = 16384 (M = N = 4096: a longer main
#    loop; where the gap is the prologue/epilogue it shrinks there);
# 2. Nsight Compute (--set full, one launch, clocks left alone) on CUTLASS and tkir at the same tile, 128 x 256 x 32 S4.
# Everything detailed goes into one tarball (the device returns at most 8 files).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r24b; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
CN=cutlass_128x256x32_s4,cutlass_128x256x64_s3,cutlass_256x128x32_s4,cutlass_256x128x64_s4
for size in 4096,4096,4096 4096,4096,16384; do
  DISABLE_MMA_V3=1 timeout 400 python3 docs/bench/session16_sm80.py --set session24b --rows triton,tkir --size $size \
    --cutlass-lib .cutlass/libcutlass_sm80.so --cutlass-names $CN --out "$R/t_$size" >"$R/table_$size.txt" 2>&1
done
prof() {  # name, kernel-name regex, then the command
  local n=$1 k=$2; shift 2
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:"$k" -c 1 -f -o "$R/$n" "$@" >"$R/$n.run.txt" 2>&1
  ncu -i "$R/$n.ncu-rep" --page details --csv >"$R/$n.details.csv" 2>&1
  ncu -i "$R/$n.ncu-rep" --page source --csv --print-source sass >"$R/$n.source.csv" 2>&1
}
prof cutlass "^Kernel" python3 docs/bench/session24_cutlass_mm.py cutlass_128x256x32_s4
prof tkir gemm tkc run examples/gemm.tk --target sm_80 -D BM=128 -D BN=256 -D BK=32 -D STAGES=4 --size M=4096 --size N=4096 --size K=4096
python3 docs/bench/ncu_summary.py "$R"/cutlass "$R"/tkir >"$R/summary.txt" 2>&1
rm -f "$R"/*.ncu-rep
cp "$R/summary.txt" "$R"/table_*.txt "$OUT/"
tar -czf "$OUT/r24b.tar.gz" -C /tmp r24b
grep -E "^====|Duration|SM Frequency|Issue Slots|Instructions Executed  |Registers Per|stall_(wait|selected|math|long_sb|barrier|short_sb|dispatch|not_selected|mio|lg|drain) " "$R/summary.txt"
for f in "$R"/table_*.txt; do sed -n '/^== /,$p' "$f"; grep -E "Error|Traceback" "$f" | head -5; done
true
