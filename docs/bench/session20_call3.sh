#!/usr/bin/env bash
# Session 20, call 3: the whole GPU suite at the head, then Nsight Compute on torch.compile's layernorm at
# 65536 x 16384 (the peer tkir trails by 1.4-2%; call 1 profiled tkir's kernel), for its launch shape.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r3; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
timeout 400 python3 -m pytest -q -m gpu -n 16 tests >"$R/gpu20.log" 2>&1
echo "gpu suite: $(( $(date +%s) - t0 )) s" >>"$R/gpu20.log"
timeout 120 ncu --clock-control none --set full --import-source no -k regex:"triton" -c 1 -f -o "$R/inductorln" \
  python3 docs/bench/session20_ln_once.py compiled >"$R/inductorln.run.txt" 2>&1
ncu -i "$R/inductorln.ncu-rep" --page details --csv >"$R/inductorln.details.csv" 2>&1
ncu -i "$R/inductorln.ncu-rep" --page source --csv --print-source sass >"$R/inductorln.source.csv" 2>&1
rm -f "$R/inductorln.ncu-rep"
python3 docs/bench/ncu_summary.py "$R"/inductorln >"$R/summary.txt" 2>&1
(cd /tmp && tar czf "$OUT/r3.tgz" r3)
grep -E "Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|Block Size|Waves" "$R/summary.txt" | head -20
tail -15 "$R/gpu20.log"
true
