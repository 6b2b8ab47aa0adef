#!/usr/bin/env bash
# Session 20, call 2: the skinny stream-K GPU tests (with the new @stream_k(SK, min_iters=SKI) cases), then
# issue 15's GEMM sweep afresh (28 points, each tuned over gemm.tk's space, which now has SKI = 16 / 32).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
python3 -m pytest -q -m gpu -n 8 tests/test_gpu_stream_k_skinny.py tests/test_stream_k.py >/tmp/t2.txt 2>&1
t0=$(date +%s)
bash docs/bench/sweep15.sh --part gemm --budget-s 520 --grace-s 10 >/tmp/gemm20.txt 2>&1
(cd "$OUT" && tar czf gemm20.tgz sweep15 && rm -rf sweep15)
cp /tmp/t2.txt "$OUT/"
echo "== gemm ($(( $(date +%s) - t0 )) s)"; grep -E "^gemm|^sweep15: [0-9]+ of" /tmp/gemm20.txt | tail -32
tail -3 /tmp/t2.txt
true
