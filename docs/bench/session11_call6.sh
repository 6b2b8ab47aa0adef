#!/usr/bin/env bash
# Session 11, call 6: before/after on one machine, back to back. `.old` is the tree at the session's start
# (6bb660e, `git archive 6bb660e | tar -x -C .old`, carried); it runs from source (PYTHONPATH, with the
# package's passes/backend/frontend linked under tkir/ as the install maps them). Alternating old, new, old,
# new: `tkc bench examples/based.tk` (the cp.async change) and sm_80 attention at (8, 16, 4096, 128), BQ = 128,
# BKV = 64 with @warpgroups(consumers=1) (4 warps of 32 rows in both trees: only the cp.async change differs).
# Then the claims table with the new tree. Results under $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/tkir-out}
R="$OUT/r"; mkdir -p "$R"
source docs/bench/device_setup.sh
REPO=$PWD
for d in frontend passes backend; do ln -sfn ../$d .old/tkir/$d; done
for t in old new; do
  src=$([ $t = old ] && echo "$REPO/.old" || echo "$REPO")
  sed 's/^kernel attention_fwd/@warpgroups(consumers=1)\nkernel attention_fwd/' "$src/examples/attention_fwd.tk" >"/tmp/attn_$t.tk"
  sed 's/KERNEL = "attention_fwd.tk"/KERNEL = "attn_'$t'.tk"/' "$src/examples/attention_fwd.py" >"/tmp/attn_$t.py"
done
run() {  # tree, time limit (s), then tkc arguments
  local t=$1 limit=$2; shift 2
  if [ "$t" = old ]; then
    (cd /tmp && PYTHONPATH="$REPO/.old:${PYTHONPATH:-}" timeout "$limit" python3 -m tkir.cli "$@")
  else
    (cd /tmp && timeout "$limit" python3 -m tkir.cli "$@")
  fi
}
for i in 1 2; do
  for t in old new; do
    src=$([ $t = old ] && echo "$REPO/.old" || echo "$REPO")
    run $t 100 bench "$src/examples/based.tk" --reps 20 >"$R/based_${t}$i.txt" 2>&1
    run $t 60 bench "/tmp/attn_$t.tk" --target sm_80 -D BQ=128 -D BKV=64 --size B=8 --size H=16 --size N=4096 \
      --reps 20 >"$R/attn80_${t}$i.txt" 2>&1
  done
done
[ "${CLAIMS:-1}" = 1 ] && timeout 150 python3 docs/bench/claims.py --json "$R/claims.json" --sm80 BM=256,BN=128,BK=64,STAGES=4 \
    --sm80-attn BQ=128,BKV=64 --reps 20 --skip c >"$R/claims.txt" 2>&1
{ for i in 1 2; do for t in old new; do
    echo "== based $t #$i"; grep -E "^based " "$R/based_${t}$i.txt" | awk '{print $4, $5, $6}'; grep -iE "error" "$R/based_${t}$i.txt" | head -2
    echo "== sm_80 attention $t #$i"; grep -E "^attn_" "$R/attn80_${t}$i.txt" | cut -c1-160; grep -iE "error" "$R/attn80_${t}$i.txt" | head -2
  done; done
  echo "== docs/bench/claims.py"; sed -n '/^claim/,$p' "$R/claims.txt"; grep -E "Error" "$R/claims.txt" | head -3
} >"$OUT/summary.txt"
cat "$OUT/summary.txt"
tar czf "$OUT/results.tgz" -C "$R" . && rm -rf "$R"
