#!/usr/bin/env bash
# Session 18, call 2: the readonly-loads pass (ld.global.nc). The row misses' configurations with and
# without it beside eager torch and torch.compile, and rotary and linear with and without it
# (docs/bench/session18_rows.py); issue 15's six missed row points tuned again with it (their own sweep
# directory); then the GPU suite.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r2; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
t0=$(date +%s)
timeout 240 python3 docs/bench/session18_rows.py --out "$R" --reps 30 >"$R/rows18.txt" 2>&1
t1=$(date +%s)
S="$R/miss"
for sel in "--kernel layernorm --rows 1 --d 768" "--kernel layernorm --rows 4096,65536 --d 8192,16384" \
           "--kernel rmsnorm --rows 4096,65536 --d 8192"; do
  timeout 170 python3 docs/bench/sweep15.py --part rows $sel --out "$S" --cache-dir /tmp/c18 >>"$R/miss.txt" 2>&1
done
t2=$(date +%s)
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t3=$(date +%s)
tar czf "$OUT/r2.tgz" -C "$R" .
echo "== GPU tests ($((t3 - t2)) s)"; tail -1 "$R/gpu_tests.log"; grep -hE "^FAILED|^ERROR" "$R/gpu_tests.log" | head -20
echo "== missed points, tuned with readonly-loads ($((t2 - t1)) s)"
python3 - "$S/sweep.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"-- {r['id']}: {r.get('status')} pass={r.get('pass')} x_eager={r.get('ratio_eager', 0):.3f} "
          f"x_compiled={r.get('ratio_compiled', 0):.3f} copy={r.get('pct_copy', 0):.1f}% "
          f"ms={1e3 * r.get('ms', 0):.2f}us compiled={1e3 * r.get('compiled_ms', 0):.2f}us consts={r.get('consts')}")
    print("\n".join(r.get("tune", {}).get("table", "").splitlines()[3:9]))
PY
grep -hE "Error|Traceback" "$R/miss.txt" | head -5
echo "== rows A/B ($((t1 - t0)) s)"; sed -n '/^== session 18/,$p' "$R/rows18.txt"; grep -hE "Error|Traceback" "$R/rows18.txt" | head -5
true
