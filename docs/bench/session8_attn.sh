#!/usr/bin/env bash
# Session 8, issue 12: persistent attention (non-causal), one device call: the whole GPU suite, the
# persistent ablation at the short sequences (tkir with and without `persistent`, each against cuDNN
# and FA2 in its own interleaved run), then the full `tkc bench examples/attention_fwd.tk`.
# Run from the repository root: bash docs/bench/session8_attn.sh (results under $OUT).
set -uo pipefail
source docs/bench/device_setup.sh
DEF=$(tkc passes 2>/dev/null | sed -n 's/^  --passes=//p' | head -1)
NOPERS=${DEF/persistent,/}
S="-D D=128 -D BQ=128 -D BKV=128 -D STAGES=2 --size B=16 --size H=16"
export CAUSALS=${CAUSALS:-0}
export VARIANTS=${VARIANTS:-"n768_persistent|$S --size N=768|
n768_no_persistent|$S --size N=768|--passes $NOPERS
n3072_persistent|$S --size N=3072|
n3072_no_persistent|$S --size N=3072|--passes $NOPERS"}
export EXTRA=${EXTRA:-"timeout 240 tkc bench examples/attention_fwd.tk --reps 20 --json \$OUT/r/attention_fwd.json --plot \$OUT/r/attention_fwd.png > \$OUT/r/attention_fwd.txt 2>&1; grep -hE '^attention_fwd' \$OUT/r/attention_fwd.txt | cut -c16- | sed -e 's/ STAGES=2 CAUSAL=/ c/'"}
export TAIL=${TAIL:-24}
bash docs/bench/session7_attn.sh
