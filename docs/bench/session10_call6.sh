#!/usr/bin/env bash
# Session 10, call 6 (issue 13, Based): the warp-specialized default (one producer and one consumer
# warpgroup, one block per SM) against no warp specialization: `--no-tma` loads as cp.async into the ring
# buffers of `pipeline-cp-async{hopper=true}`, one compute warpgroup, two resident blocks per SM
# (ThunderKittens' shape: two one-warpgroup blocks). Each `tkc bench` checks O and the states first.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
DEF=$(tkc passes 2>/dev/null | sed -n 's/^  --passes=//p' | head -1)
H=${DEF/pipeline-cp-async,/pipeline-cp-async\{hopper=true\},}
for n in 1024 4096 16384; do
  timeout 150 tkc bench examples/based.tk --size B=16 --size H=16 --size N=$n --reps 20 2>&1 | grep -E "^based " | cut -c1-160
  timeout 150 tkc bench examples/based.tk --size B=16 --size H=16 --size N=$n --reps 20 --no-tma --passes "$H" \
    --variant two_blocks 2>&1 | grep -E "^based " | cut -c1-160
done | tee "$OUT/summary.txt"
