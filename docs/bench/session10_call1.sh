#!/usr/bin/env bash
# Session 10, call 1 (issue 12 and 15 experiments), one device call; results under $OUT (summary.txt,
# results.tgz):
# - attention at the short sequences: the default pipeline (descriptor prefetch on), create-tma's
#   prefetch off, and persistent{linear_grids=true} (non-causal), each `tkc bench` against cuDNN and FA2;
# - row kernels at the launch-bound sizes (N = 1, 128; D = 768): the examples against variants that load
#   W (and Bias) before the reductions (docs/bench/variants/rows_wfirst/*_wfirst.tk), each against eager torch and
#   torch.compile in its own `tkc bench`.
set -uo pipefail
DEF=canonicalize,legalize-mma,fold-scale,infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,pipeline,pipeline-cp-async,early-release,persistent,stream-k{opt_in=true},split-masks,overlap-mma,pingpong,canonicalize
NOPF=${DEF/create-tma,/create-tma\{prefetch=false\},}
LIN=${DEF/persistent,/persistent\{linear_grids=true\},}
S="-D D=128 -D BQ=128 -D BKV=128 -D STAGES=2 --size B=16 --size H=16"
export VARIANTS="n768_default|$S --size N=768|
n768_noprefetch|$S --size N=768|--passes $NOPF
n3072_default|$S --size N=3072|
n3072_noprefetch|$S --size N=3072|--passes $NOPF"
export EXTRA='
for n in 768 3072; do
  timeout 200 tkc bench examples/attention_fwd.tk -D D=128 -D BQ=128 -D BKV=128 -D STAGES=2 --size B=16 --size H=16 --size N=$n -D CAUSAL=0 --reps 20 --variant linear --passes "'"$LIN"'" 2>&1 | grep -E "^attention_fwd" | cut -c16-
done
R="-D D=768 -D DC=1024 -D ROWS=1 -D WG=2"
for k in rmsnorm layernorm; do
  for n in 1 128; do
    timeout 120 tkc bench examples/$k.tk $R --size N=$n --reps 50 2>&1 | grep -E "^$k " | cut -c1-200
    timeout 120 tkc bench docs/bench/variants/rows_wfirst/${k}_wfirst.tk $R --size N=$n --reps 50 --variant wfirst 2>&1 | grep -E "^${k}_wfirst " | cut -c1-200
  done
done'
export TAIL=20
bash docs/bench/session7_attn.sh
