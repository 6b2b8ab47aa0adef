# Session 7, H200 call 2 (run as EXTRA of docs/bench/session7_attn.sh): the whole attention bench with
# the new default pipeline (overlap-mma at every head dim) and with pingpong added; gemm guards.
BASE=canonicalize,legalize-mma,fold-scale,infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,pipeline,pipeline-cp-async,early-release,persistent,split-masks
timeout 300 tkc bench examples/attention_fwd.tk --reps 20 --variant default --json $OUT/r/full_default.json > $OUT/r/full_default.txt 2>&1
timeout 300 tkc bench examples/attention_fwd.tk --reps 20 --variant pingpong --passes $BASE,overlap-mma,pingpong,canonicalize --json $OUT/r/full_pp.json > $OUT/r/full_pp.txt 2>&1
for s in 4096 8192; do
  timeout 120 tkc bench examples/gemm.tk --size M=$s --size N=$s --size K=$s > $OUT/r/gemm_$s.txt 2>&1
done
grep -hE "^attention_fwd" $OUT/r/full_default.txt $OUT/r/full_pp.txt | cut -c16- | sed -e 's/ D=\([0-9]*\) BQ=\([0-9]*\) BKV=[0-9]* STAGES=2 CAUSAL=/ D\1 BQ\2 c/'
grep -hE "^gemm" $OUT/r/gemm_*.txt
