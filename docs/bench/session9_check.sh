#!/usr/bin/env bash
# Session 9, issue 14 (and 15's tune check), one device call on the two-GPU machine:
#  1. the whole GPU suite (-m gpu; with two GPUs the cuda:1 runtime tests run instead of skipping);
#  2. the mutation runner's GPU stage on the CPU survivors of the auto sample recorded in
#     docs/bench/latest/session9/auto_cpu.json (scripts/mutate.py --gpu-after: their CPU tests are not rerun);
#  3. `tkc tune examples/gemm.tk` at one size, twice (the second must be a cache hit: no timing).
# Run from the repository root; results in $OUT/check.tgz (the device returns at most 8 files) and
# $OUT/summary.txt, which is also printed last.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R=/tmp/check; mkdir -p "$R"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi -L >"$R/gpus.txt" 2>&1
t0=$(date +%s)
[ -n "${SKIP_SUITE:-}" ] || timeout 200 python3 -m pytest -q -m gpu --timeout 150 -p no:cacheprovider -n ${WORKERS:-16} -rfE tests \
  >"$R/gpu_tests.log" 2>&1
t1=$(date +%s)
if [ -f docs/bench/latest/session9/auto_cpu.json ]; then
  # the CPU survivors whose PTX differs from the unmutated compiler's (auto_cpu.json: ptx_unchanged false) and
  # the launch-description one; the other 18 leave every example's PTX and launch as they were
  ONLY=${ONLY:-"backend/context.py:140:91:2->3,backend/fragments.py:259:36:&->|,backend/rules_wgmma.py:234:36:+->-,backend/launch.py:107:35:0->1"}
  G1="-n 16 tests/test_mutation_gpu.py tests/test_gpu_pass_kernels.py tests/test_gpu_examples.py tests/test_runtime_gpu.py"
  G2="-n 16 tests/conformance/test_conformance_gpu.py -k 'row_ or mask'"
  timeout ${MUTATE_TIMEOUT:-250} python3 scripts/mutate.py --auto passes backend --max 40 --seed 1 --gpu \
    --gpu-after docs/bench/latest/session9/auto_cpu.json --only "$ONLY" --gpu-tests "$G1" --gpu-tests "$G2" \
    --json "$R/auto_gpu.json" >"$R/auto_gpu.txt" 2>&1
fi
t2=$(date +%s)
export TKIR_CACHE=1 TKIR_CACHE_DIR=/tmp/tune-cache
for i in ${TUNE_CALLS:-1 2}; do
  s=$(date +%s.%N)
  timeout 100 tkc tune examples/gemm.tk --size M=4096 --size N=4096 --size K=4096 --json "$R/tune$i.json" \
    >"$R/tune$i.txt" 2>&1
  rc=$?
  echo "tune call $i: $(python3 -c "import time; print(round(time.time() - $s, 1))") s wall, rc $rc" >>"$R/tune_times.txt"
done
{
  echo "== GPU suite ($((t1 - t0)) s)"; grep -E "passed|failed|FAILED|ERROR" "$R/gpu_tests.log" | tail -15
  echo "== mutation GPU stage ($((t2 - t1)) s)"; grep -E "baseline|^\[|survived|killed" "$R/auto_gpu.txt" 2>/dev/null | tail -15
  echo "== tune"; cat "$R/tune_times.txt"; grep -iE "cache|points|best" "$R/tune2.txt" | head -5
  head -4 "$R/tune1.txt"
} | tee "$R/summary.txt"
cp "$R/summary.txt" "$OUT/summary.txt"
tar -C /tmp -czf "$OUT/check.tgz" check
