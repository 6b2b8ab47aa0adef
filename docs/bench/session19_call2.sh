#!/usr/bin/env bash
# Session 19, call 2: cluster-rows on the GPU: the cluster GPU tests (correctness at ragged N on both paths),
# then docs/bench/session19_cluster.py (each wide-row point's tuned configurations with and without @cluster(2)).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
mkdir -p "$OUT"
source docs/bench/device_setup.sh
export PATH=/usr/local/cuda/bin:$PATH
t0=$(date +%s)
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 -rfE tests/test_cluster_rows.py tests/test_gpu_examples.py \
  >/tmp/gpu19b.log 2>&1
t1=$(date +%s)
timeout 300 python3 docs/bench/session19_cluster.py --out "$OUT" --reps 30 >/tmp/cluster19.txt 2>&1
t2=$(date +%s)
cp /tmp/cluster19.txt /tmp/gpu19b.log "$OUT/" 2>/dev/null
echo "== GPU tests ($((t1 - t0)) s)"; tail -1 /tmp/gpu19b.log; grep -hE "^FAILED|^ERROR|Error" /tmp/gpu19b.log | head -20
echo "== cluster A/B ($((t2 - t1)) s)"; tail -55 /tmp/cluster19.txt
