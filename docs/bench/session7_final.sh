# Session 7's last H200 call (run as EXTRA of docs/bench/session7_attn.sh after its GPU tests): the sm_80
# gemm with the 2-D warp grid against the wgmma gemm and the 1-D layout (issue 13), then the whole
# attention bench at the session's last code (issue 12; tiles BQ/BKV auto).
P1D='canonicalize,legalize-mma,fold-scale,infer-layouts{mma_warps_n=1},select-swizzle,bank-conflicts,create-tma,plan-occupancy,pipeline,pipeline-cp-async,early-release,persistent,split-masks,overlap-mma,pingpong,canonicalize'
S="--size M=4096 --size N=4096 --size K=4096"
{
timeout 60 tkc bench examples/gemm.tk $S --variant wgmma
timeout 60 tkc bench examples/gemm.tk --target sm_80 -D BM=256 -D BN=128 -D BK=64 -D STAGES=4 $S --variant grid-256x128
timeout 60 tkc bench examples/gemm.tk --target sm_80 -D BM=128 -D BN=256 -D BK=64 -D STAGES=4 $S --variant grid-128x256
timeout 60 tkc bench examples/gemm.tk --target sm_80 -D BM=256 -D BN=128 -D BK=64 -D STAGES=4 $S --variant one-d --passes "$P1D"
} > "$OUT/r/sm80.txt" 2>&1
timeout 150 tkc bench examples/attention_fwd.tk --reps 20 --json "$OUT/r/attention_fwd.json" --plot "$OUT/r/attention_fwd.png" \
  > "$OUT/r/attention_fwd.txt" 2>&1
grep -hE "^gemm" "$OUT/r/sm80.txt"
grep -hE "^attention_fwd" "$OUT/r/attention_fwd.txt" | cut -c16- | sed -e 's/ STAGES=2 CAUSAL=/ c/'
