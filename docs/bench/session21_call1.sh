#!/usr/bin/env bash
# Session 21, call 1: one- and two-warp blocks at the narrow-row points (docs/bench/session21_warps.py),
# then the Triton source and PTX of torch.compile's layernorm kernels (what the peer runs).
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
source docs/bench/device_setup.sh
timeout 400 python3 docs/bench/session21_warps.py --out "$OUT" --reps 40 >"$OUT/warps21.txt" 2>&1
mkdir -p /tmp/ind && find /tmp/torchinductor_* ~/.triton/cache -name '*.ptx' -newer docs/bench/device_setup.sh 2>/dev/null \
  | xargs -r grep -l "layer_norm" | head -20 | xargs -r -I{} cp {} /tmp/ind/ 2>/dev/null
find /tmp/torchinductor_* -name '*.py' 2>/dev/null | xargs -r grep -l "layer_norm" | head -20 | xargs -r -I{} cp {} /tmp/ind/
tar czf "$OUT/inductor.tgz" -C /tmp ind 2>/dev/null
tail -60 "$OUT/warps21.txt"
true
