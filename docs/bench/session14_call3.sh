#!/usr/bin/env bash
# Session 14, call 3: the GPU tests after session 14's codegen changes (4/8-byte vector accesses, edge
# tests left out where they cannot fail, bf16 -> f32 as a shift: the whole GPU suite, as 690 of the
# conformance cases' PTX changed), then an A/B of the starting commit (.base,
# a worktree of 4c375c0, its packages copied to /tmp/basesite) against the head on the kernels whose
# PTX changed (docs/bench/session14_ab.py), and Nsight Compute's instruction count of layernorm's chunk
# loop at 4096 x 16384 against Inductor's (call 2: 59.6M against 43.7M before the edge tests went).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r3; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
mkdir -p /tmp/basesite && cp -r .base/tkir /tmp/basesite/ && for d in backend frontend passes; do cp -r .base/$d /tmp/basesite/tkir/$d; done
t0=$(date +%s)
timeout 230 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
PYTHONPATH=/tmp/basesite:${PYTHONPATH:-} timeout 150 python3 docs/bench/session14_ab.py --examples .base/examples --label base --out "$R" >"$R/ab_base.txt" 2>&1
timeout 150 python3 docs/bench/session14_ab.py --examples examples --label head --out "$R" >"$R/ab_head.txt" 2>&1
PYTHONPATH=/tmp/basesite:${PYTHONPATH:-} timeout 40 python3 docs/bench/session14_ab.py --examples .base/examples --label base2 --out "$R" --only based_4096,ln_4096x16384_c2048 >"$R/ab_base2.txt" 2>&1
t2=$(date +%s)
timeout 45 ncu --clock-control none --profile-from-start off --section InstructionStats --section SpeedOfLight \
  --section Occupancy --section ComputeWorkloadAnalysis \
  python3 docs/bench/session13_ncu_rows.py 4096 16384 1 2048 4 4 >"$R/ncu_c2048.txt" 2>&1
t3=$(date +%s)
tar czf "$OUT/r3.tgz" -C "$R" .
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -hE "^FAILED|^ERROR" "$R"/gpu_*.log | head
echo "== ncu ($((t3 - t2)) s)"; grep -E "^  [a-z_]+.*\(|Executed Instructions  |Duration|DRAM Through|Registers Per|Achieved Occ" "$R/ncu_c2048.txt" | head -14
echo "== A/B ($((t2 - t1)) s)"; cat "$R/ab_base.txt" "$R/ab_head.txt" "$R/ab_base2.txt" | grep -E "^(base|head)"
