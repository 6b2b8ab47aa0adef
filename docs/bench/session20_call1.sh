#!/usr/bin/env bash
# Session 20, call 1: the decode-time GEMMs in more configurations (docs/bench/session20_small.py), then
# Nsight Compute (--set full, one launch each, clocks left alone) on gemm M = 64, N = K = 4096 (session 19's
# tuned point, 0.83x cuBLAS) and cuBLAS at that shape, and on layernorm 65536 x 16384 by tkir and by
# torch.compile (0.98x).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r1; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
timeout 300 python3 docs/bench/session20_small.py --out "$R" --reps 30 >"$R/small.txt" 2>&1
prof() {  # name, kernel-name regex, launches to skip, then the command
  local n=$1 k=$2 s=$3; shift 3
  timeout 100 ncu --clock-control none --set full --import-source no -k regex:"$k" -s "$s" -c 1 -f -o "$R/$n" "$@" >"$R/$n.run.txt" 2>&1
  ncu -i "$R/$n.ncu-rep" --page details --csv >"$R/$n.details.csv" 2>&1
  ncu -i "$R/$n.ncu-rep" --page source --csv --print-source sass >"$R/$n.source.csv" 2>&1
  rm -f "$R/$n.ncu-rep"
}
: prof tkir64 "^gemm" 0 tkc run examples/gemm.tk -D BM=64 -D BN=64 -D BK=64 -D STAGES=8 -D SK=1 --size M=64 --size N=4096 --size K=4096
: prof cublas64 "gemm|xmma|cutlass|sm90" 2 python3 -c "
import torch
a = torch.randn(64, 4096, device='cuda').bfloat16(); b = torch.randn(4096, 4096, device='cuda').bfloat16()
for _ in range(5): c = a @ b
torch.cuda.synchronize()"
prof tkirln "^layernorm" 2 python3 docs/bench/session20_ln_once.py tkir
prof inductorln "triton" 2 python3 docs/bench/session20_ln_once.py compiled
python3 docs/bench/ncu_summary.py "$R"/tkir64 "$R"/cublas64 "$R"/tkirln "$R"/inductorln >"$R/summary.txt" 2>&1
(cd /tmp && tar czf "$OUT/r1.tgz" r1)
grep -E "^==|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|dram__bytes" "$R/summary.txt" | head -60
tail -60 "$R/small.txt"
true
