#!/usr/bin/env bash
# Session 17, call 1: the GPU suite (tests/test_gpu_sm80.py's split case and fence-loads.tk's GPU case had
# not run on a GPU), issue 15's weakest row points as tuned and with fence-loads beside eager and
# torch.compile (docs/bench/session17_rows.py), and Nsight Compute's memory metrics for tkir's and
# Inductor's layernorm at 4096 x 8192 and 65536 x 16384 (clocks left alone).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r1; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
timeout 220 python3 docs/bench/session17_rows.py --out "$R" --reps 40 >"$R/rows17.txt" 2>&1
t2=$(date +%s)
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct,l1tex__throughput.avg.pct_of_peak_sustained_active,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__block_size,launch__occupancy_limit_registers,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct,smsp__warp_issue_stalled_lg_throttle_per_warp_active.pct,smsp__warp_issue_stalled_drain_per_warp_active.pct,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum
for pt in "4096 8192 1 8192 2 4" "65536 16384 1 16384 2 0"; do
  set -- $pt
  timeout 100 ncu --clock-control none --profile-from-start off --metrics $M \
    python3 docs/bench/session13_ncu_rows.py "$@" >"$R/ncu_$1_$2.txt" 2>&1
done
t3=$(date +%s)
tar czf "$OUT/r1.tgz" -C "$R" .
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -hE "^FAILED|^ERROR" "$R/gpu_tests.log" | head
echo "== ncu ($((t3 - t2)) s)"
for f in "$R"/ncu_*.txt; do echo "-- $(basename $f)"; awk '/, Device [0-9]/{printf "\n%s:", substr($1,1,40)} /^ +(gpu__|dram__|lts__|l1tex__|sm__|launch__|smsp__)/{printf " %s=%s", $1, $NF} END{print ""}' "$f"; done
echo "== rows ($((t2 - t1)) s)"; sed -n '/^== session 17/,$p' "$R/rows17.txt"; grep -hE "Error|Traceback" "$R/rows17.txt" | head -5
true
