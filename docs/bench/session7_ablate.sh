# Session 7 (issue 12): the attention schedule's ablation at (B, H, N, D) = (8, 16, 4096, 128), causal
# and not, each pass left out alone from the default pipeline, one process per row (tkir, cuDNN and
# FA2 interleaved). Run as EXTRA of docs/bench/session7_attn.sh. Rows: $OUT/r/ablate_*.txt.
DEFAULT=$(tkc passes | sed -n 's/^  --passes=//p' | head -1)
drop() { echo "$DEFAULT" | tr ',' '\n' | grep -vx "$1" | paste -sd, -; }
ROWS="default=$DEFAULT"
for p in fold-scale early-release split-masks overlap-mma pingpong longest-first; do ROWS="$ROWS without-$p=$(drop $p)"; done
ROWS="$ROWS without-all-six=$(echo "$DEFAULT" | tr ',' '\n' | grep -vxE 'fold-scale|early-release|split-masks|overlap-mma|pingpong|longest-first' | paste -sd, -)"
for row in $ROWS; do
  label=${row%%=*}; passes=${row#*=}
  for c in 0 1; do
    timeout 120 tkc bench examples/attention_fwd.tk --size B=8 --size H=16 --size N=4096 -D D=128 -D BQ=128 -D BKV=128 \
      -D STAGES=2 -D CAUSAL=$c --reps ${REPS:-20} --variant "$label" --passes "$passes" > "$OUT/r/ablate_${label}_c$c.txt" 2>&1
  done
done
echo "$DEFAULT" > "$OUT/r/ablate_default_pipeline.txt"
for row in $ROWS; do for c in 0 1; do grep -hE "^attention_fwd" "$OUT/r/ablate_${row%%=*}_c$c.txt" | cut -c16- | sed -e 's/ B=8 H=16 N=4096 D=128 BQ=128 BKV=128 STAGES=2//'; done; done
