#!/usr/bin/env bash
# Session 10, call 2 (issue 12): key blocks of 160 rows against 128 at D = 128 (FA3 uses 128 x 176 tiles
# at D = 128; 176 does not fit in shared memory beside the O staging tile, 160 does: 230 KB), causal
# and not, N = 768, 3072, 12288, each `tkc bench` against cuDNN and FA2. Results under $OUT.
set -uo pipefail
S="-D D=128 -D BQ=128 -D STAGES=2 --size B=16 --size H=16"
export VARIANTS="n768_bkv128|$S -D BKV=128 --size N=768|
n768_bkv160|$S -D BKV=160 --size N=768|
n3072_bkv128|$S -D BKV=128 --size N=3072|
n3072_bkv160|$S -D BKV=160 --size N=3072|
n12288_bkv128|$S -D BKV=128 --size N=12288|
n12288_bkv160|$S -D BKV=160 --size N=12288|"
bash docs/bench/session7_attn.sh
