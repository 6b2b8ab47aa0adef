#!/usr/bin/env bash
# Session 18, call 3: layernorm's statistics as one Welford pass (row_mean / row_var, fuse-row-stats)
# against session 17's kernel at eleven configurations (docs/bench/session18_ln.py); the GPU tests of
# row_mean / row_var, of tkc tune's choice by the second round and of the C launcher (the whole GPU
# suite); then issue 15's layernorm misses tuned again with the new kernel.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/r3; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind TRITON_CACHE_DIR=/tmp/tri
t0=$(date +%s)
timeout 180 python3 -m pytest -q -m gpu -p no:cacheprovider -n 16 -rfE tests >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
timeout 150 python3 docs/bench/session18_ln.py --out "$R" --reps 40 >"$R/ln18.txt" 2>&1
t2=$(date +%s)
S="$R/miss"
for sel in "--rows 1 --d 768" "--rows 4096,65536 --d 16384"; do
  timeout 150 python3 docs/bench/sweep15.py --part rows --kernel layernorm $sel --out "$S" --cache-dir /tmp/c18 >>"$R/miss.txt" 2>&1
done
t3=$(date +%s)
tar czf "$OUT/r3.tgz" -C "$R" .
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 "$R/gpu_tests.log"; grep -hE "^FAILED|^ERROR" "$R/gpu_tests.log" | head -20
echo "== layernorm misses, tuned with the Welford kernel ($((t3 - t2)) s)"
python3 - "$S/sweep.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    print(f"-- {r['id']}: {r.get('status')} pass={r.get('pass')} x_eager={r.get('ratio_eager', 0):.3f} "
          f"x_compiled={r.get('ratio_compiled', 0):.3f} copy={r.get('pct_copy', 0):.1f}% "
          f"ms={1e3 * r.get('ms', 0):.2f}us compiled={1e3 * r.get('compiled_ms', 0):.2f}us consts={r.get('consts')}")
    print("\n".join(r.get("tune", {}).get("table", "").splitlines()[3:7]))
PY
grep -hE "Error|Traceback" "$R/miss.txt" | head -5
echo "== layernorm A/B ($((t2 - t1)) s)"; sed -n '/^== session 18/,$p' "$R/ln18.txt"; grep -hE "Error|Traceback" "$R/ln18.txt" | head -5
true
