#!/usr/bin/env bash
# Session 15, call 3: the GPU tests after cache-policy and contract-fma joined the default pipeline (the
# PTX of every row kernel, rotary, linear, attention and based changed), then the A/B of the session's
# starting commit (35f8c3b) against the head on those kernels, in one process
# (docs/bench/session15_ab.py run; PTX dumped on the CPU machine by each compiler into .ab15/).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r3; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
timeout 300 python3 docs/bench/session15_ab.py run --dir .ab15 --out "$R" >"$R/ab15.txt" 2>&1
t2=$(date +%s)
cp -r "$R" "$OUT/"
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -hE "^FAILED|^ERROR" "$R/gpu_tests.log" | head
echo "== A/B ($((t2 - t1)) s)"; sed -n '/^== A\/B/,$p' "$R/ab15.txt"; grep -E "ERROR|Traceback" "$R/ab15.txt" | head -5
true
