#!/usr/bin/env bash
# Session 9, call 1 (an x2 machine): why the two-GPU runtime tests fail (full tracebacks, with and
# without CUDA_LAUNCH_BLOCKING, and compute-sanitizer on the first one), and an ncu look at the row
# kernels at N = 4096, D = 8192 (layernorm one-read and chunked, softmax and rmsnorm for contrast).
set -uo pipefail
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
D=$OUT/diag; mkdir -p $D
nvidia-smi -L > $D/gpus.txt 2>&1
timeout 200 python3 -m pytest -m gpu tests/test_runtime_gpu.py -v --tb=long -p no:cacheprovider > $D/runtime_gpu.log 2>&1
CUDA_LAUNCH_BLOCKING=1 timeout 200 python3 -m pytest -m gpu tests/test_runtime_gpu.py -v --tb=long -p no:cacheprovider -k "two_gpus or device_1 or cuda_1" > $D/runtime_gpu_blocking.log 2>&1
timeout 200 compute-sanitizer --tool memcheck --print-limit 20 python3 -m pytest -x -m gpu tests/test_runtime_gpu.py -p no:cacheprovider -k "test_launch_on_device_1_runs_on_gpu_1" > $D/sanitizer.log 2>&1
M="gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__occupancy_limit_registers,launch__occupancy_limit_shared_mem,launch__occupancy_limit_warps,launch__waves_per_multiprocessor,sm__maximum_warps_per_active_cycle_pct,dram__bytes_read.sum,dram__bytes_write.sum,smsp__average_warp_latency_issue_stalled_long_scoreboard.ratio,launch__shared_mem_per_block_dynamic,launch__block_size,launch__grid_size"
for v in "layernorm DC=8192 WG=1" "layernorm DC=4096 WG=1" "layernorm DC=8192 WG=2" "softmax DC=8192 WG=1" "rmsnorm DC=8192 WG=2"; do
  set -- $v; k=$1; dc=$2; wg=$3
  timeout 120 ncu --metrics $M -k regex:$k -c 1 tkc run examples/$k.tk --size N=4096 -D D=8192 -D ROWS=1 -D $dc -D $wg > "$D/ncu_${k}_${dc}_${wg}.txt" 2>&1
  echo "== $k $dc $wg"; grep -E "duration|throughput|warps_active|registers_per|limit_reg|limit_warps|waves|maximum_warps|bytes_read|bytes_write|long_scoreboard|block_size|grid_size" "$D/ncu_${k}_${dc}_${wg}.txt" | awk '{print $1, $(NF-1), $NF}'
done
echo "== runtime tests"; grep -E "PASSED|FAILED|ERROR|passed|failed" $D/runtime_gpu.log | tail -25
echo "== blocking"; grep -E "^E |FAILED|passed|failed" $D/runtime_gpu_blocking.log | head -30
echo "== sanitizer"; grep -E "Invalid|ERROR SUMMARY|passed|failed|=========" $D/sanitizer.log | head -20
