#!/usr/bin/env bash
# After the runtime change of issue 14 (argument checks first, torch's current stream): every GPU
# test, then the stream test with the old behaviour (legacy stream) to show that it fails there.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}; mkdir -p "$OUT"
source docs/bench/device_setup.sh
timeout 300 python3 -m pytest -q -m gpu -p no:cacheprovider -n ${WORKERS:-16} -rfE tests/ >"$OUT/gpu_tests.log" 2>&1
python3 - >"$OUT/legacy_stream.txt" 2>&1 <<'PY'
import pytest
import tkir.backend.runtime as rt
import tests.test_runtime_gpu as t
rt._torch_current_stream = lambda args: None   # the old behaviour: the legacy default stream
try:
    t.test_a_launch_is_ordered_with_torch_work_on_the_current_stream()
    print("legacy stream: the test PASSED (it cannot tell the difference)")
except AssertionError as e:
    print("legacy stream: the test FAILS as it should:", str(e).splitlines()[0])
PY
timeout 120 tkc bench examples/gemm.tk --size M=4096 --size N=4096 --size K=4096 >"$OUT/gemm.txt" 2>&1
{ grep -E "passed|failed" "$OUT/gpu_tests.log" | tail -3; cat "$OUT/legacy_stream.txt"; grep -E "^gemm" "$OUT/gemm.txt"; } | tee "$OUT/summary.txt"
