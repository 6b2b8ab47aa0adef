#!/usr/bin/env bash
# Session 16, call 7: the whole GPU suite after the session's code changes (cp.async copies, the producer
# rule, fence-loads), then fence-loads' A/B on the row kernels large and small (.ab16f: d35ddf0 against the
# head), Based's A/B across the cp.async change (.ab16b: 07649a1 against the head), and sm_80 attention
# against SDPA's FA2 backend (issue 13's bar).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r7; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
cp "$R/gpu_tests.log" "$OUT/" 2>/dev/null
timeout 200 python3 docs/bench/session16_ab.py run --set fence --dir .ab16f --out "$R/fence" --reps 30 >"$R/ab_fence.txt" 2>&1
timeout 60 python3 docs/bench/session16_ab.py run --set based --dir .ab16b --out "$R/based" --reps 20 >"$R/ab_based.txt" 2>&1
timeout 60 tkc bench examples/attention_fwd.tk --target sm_80 -D BQ=128 -D BKV=64 --size B=8 --size H=16 --size N=4096 >"$R/attn80.txt" 2>&1
t2=$(date +%s)
cp -r "$R" "$OUT/"
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -hE "^FAILED|^ERROR" "$R/gpu_tests.log" | head
echo "== A/B fence, based; sm_80 attention ($((t2 - t1)) s)"; sed -n '/^== A\/B/,$p' "$R/ab_fence.txt"; sed -n '/^== A\/B/,$p' "$R/ab_based.txt"; tail -4 "$R/attn80.txt"
grep -hE "ERROR|Traceback" "$R"/ab_*.txt | head -5
true
