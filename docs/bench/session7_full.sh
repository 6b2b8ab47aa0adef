# Session 7 (issue 12): the whole attention bench (examples/attention_fwd.py's BENCH_SIZES and CONSTS:
# tkir, cuDNN and FA2 interleaved, correctness first) once per pipeline named in PIPELINES
# ("label=--passes text" words; "default=" is the default pipeline), and the gemm guards.
# Run as EXTRA of docs/bench/session7_attn.sh (which sets up the device and $OUT/r).
BASE=canonicalize,legalize-mma,fold-scale,infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,pipeline,pipeline-cp-async,early-release,persistent,split-masks
PIPELINES=${PIPELINES:-"default="}
for entry in $PIPELINES; do
  label=${entry%%=*}; passes=${entry#*=}
  passes=${passes//BASE/$BASE}
  timeout 300 tkc bench examples/attention_fwd.tk --reps ${REPS:-20} --variant "$label" ${passes:+--passes "$passes"} \
    --json "$OUT/r/full_$label.json" --plot "$OUT/r/full_$label.png" > "$OUT/r/full_$label.txt" 2>&1
done
if [ -n "${GEMM:-}" ]; then
  for s in 4096 8192; do
    timeout 120 tkc bench examples/gemm.tk --size M=$s --size N=$s --size K=$s > $OUT/r/gemm_$s.txt 2>&1
  done
fi
for entry in $PIPELINES; do
  grep -hE "^attention_fwd" "$OUT/r/full_${entry%%=*}.txt" | cut -c16- \
    | sed -e 's/ D=\([0-9]*\) BQ=\([0-9]*\) BKV=[0-9]* STAGES=2 CAUSAL=/ D\1 BQ\2 c/'
done
grep -hE "^gemm" $OUT/r/gemm_*.txt 2>/dev/null
