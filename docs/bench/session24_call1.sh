#!/usr/bin/env bash
# Session 24, call 1 (issue 13, the sm_80 gemm bar): CUTLASS 2.x's Ampere GEMMs (cp.async multistage, ldmatrix,
# mma.sync; docs/bench/cutlass_sm80/, built on the CPU machine for sm_90a and carried in .cutlass/) beside tkir's
# sm_80 tiles, Triton's mma.sync GEMM, tkir's wgmma gemm and cuBLAS at 4096^3 (session16_sm80.py --set session24,
# one process, interleaved); then Nsight Compute (--set full, one launch, clocks left alone) on the fastest CUTLASS
# kernel and on tkir's 256 x 128 x 64 S4.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r24; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.limit --format=csv > "$OUT/gpu.txt" 2>&1
cuobjdump -sass .cutlass/libcutlass_sm80.so > "$R/cutlass.sass" 2>&1
echo "cutlass SASS: HMMA.16816 $(grep -c 'HMMA.16816' "$R/cutlass.sass") HGMMA $(grep -c 'HGMMA' "$R/cutlass.sass") LDGSTS $(grep -c 'LDGSTS' "$R/cutlass.sass")" | tee "$OUT/cutlass_sass_counts.txt"
cuobjdump -res-usage .cutlass/libcutlass_sm80.so > "$OUT/cutlass_res_usage.txt" 2>&1
DISABLE_MMA_V3=1 timeout 300 python3 docs/bench/session16_sm80.py --set session24 --rows triton,tkir \
  --cutlass-lib .cutlass/libcutlass_sm80.so --out "$OUT" >"$OUT/sm80_session24.txt" 2>&1
best=$(python3 -c "
import json; rows = json.load(open('$OUT/sm80_peer.json'))['rows']
c = [r for r in rows if r.get('cutlass') and r.get('ok') and 'tflops' in r]
print(max(c, key=lambda r: r['tflops'])['cutlass'] if c else 'cutlass_128x256x64_s3')")
echo "profiling $best"
prof() {  # name, kernel-name regex, then the command
  local n=$1 k=$2; shift 2
  timeout 150 ncu --clock-control none --set full --import-source no -k regex:"$k" -c 1 -f -o "$R/$n" "$@" >"$R/$n.run.txt" 2>&1
  ncu -i "$R/$n.ncu-rep" --page details --csv >"$R/$n.details.csv" 2>&1
  ncu -i "$R/$n.ncu-rep" --page source --csv --print-source sass >"$R/$n.source.csv" 2>&1
}
prof cutlass "^Kernel" python3 docs/bench/session24_cutlass_mm.py "$best"
G="tkc run examples/gemm.tk --target sm_80 -D BM=256 -D BN=128 -D BK=64 -D STAGES=4 --size M=4096 --size N=4096 --size K=4096"
prof tkir gemm $G
python3 docs/bench/ncu_summary.py "$R"/cutlass "$R"/tkir >"$R/summary.txt" 2>&1
rm -f "$R"/*.ncu-rep
gzip -f "$R"/*.source.csv "$R/cutlass.sass"
cp -r "$R" "$OUT/"
cat "$OUT/cutlass_sass_counts.txt"
grep -E "^====|Duration|SM Frequency|Issue Slots|Instructions Executed  |Registers Per|Waves|stall_(wait|selected|math|long_sb|barrier|short_sb|dispatch|not_selected|mio) " "$R/summary.txt"
sed -n '/^== /,$p' "$OUT/sm80_session24.txt"; grep -E "Error|Traceback" "$OUT/sm80_session24.txt" | head -5
true
