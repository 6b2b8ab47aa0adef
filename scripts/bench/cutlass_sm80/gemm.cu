// CUTLASS 2.x's Ampere GEMM (cp.async multistage main loop, ldmatrix, mma.sync m16n8k16) for one tile
// configuration, built for sm_90a so that it runs on the H200 beside tkir's sm_80 path: the reference for
// "how fast does the best hand-written mma.sync GEMM go on this GPU" (scripts/bench/sm80_gemm.py --cutlass-lib). bf16 row-major
// A [M, K], B [K, N], C [M, N]; f32 accumulation; C = A @ B.
// The configuration comes from the compiler's -D flags (build.sh): TBM TBN TBK (block tile), WM WN WK
// (warp tile), STAGES, SWZ (GemmIdentityThreadblockSwizzle<SWZ>), NAME (the exported symbol).
#include <cuda_runtime.h>

#include "cutlass/bfloat16.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/epilogue/thread/linear_combination.h"

using Element = cutlass::bfloat16_t;
using Row = cutlass::layout::RowMajor;
using Gemm = cutlass::gemm::device::Gemm<
    Element, Row, Element, Row, Element, Row, float,
    cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
    cutlass::gemm::GemmShape<TBM, TBN, TBK>, cutlass::gemm::GemmShape<WM, WN, WK>,
    cutlass::gemm::GemmShape<16, 8, 16>,
    cutlass::epilogue::thread::LinearCombination<Element, 8, float, float>,
    cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<SWZ>, STAGES, 8, 8>;

// Returns 0 on success, else the cutlass::Status (as int) + 1000 or the CUDA error.
extern "C" int NAME(int M, int N, int K, const void* A, const void* B, void* C, void* stream) {
  Gemm op;
  Gemm::Arguments args({M, N, K}, {static_cast<const Element*>(A), K}, {static_cast<const Element*>(B), N},
                       {static_cast<Element*>(C), N}, {static_cast<Element*>(C), N}, {1.0f, 0.0f});
  cutlass::Status s = op.can_implement(args);
  if (s != cutlass::Status::kSuccess) return 1000 + int(s);
  s = op.initialize(args, nullptr, static_cast<cudaStream_t>(stream));
  if (s != cutlass::Status::kSuccess) return 1000 + int(s);
  s = op(static_cast<cudaStream_t>(stream));
  if (s != cutlass::Status::kSuccess) return 1000 + int(s);
  return int(cudaGetLastError());
}
