"""Facts about the target hardware (NVIDIA Hopper, sm_90a; H100/H200), each stated once with its source.

Every module that needs one imports it from here; the sm_80 path runs on the same chip and uses the
same limits.
"""

from __future__ import annotations

TARGETS = ("sm_90a", "sm_80")  # what the backend lowers to: Hopper's wgmma/TMA path and the mma.sync path
WARP = 32                      # threads per warp
WARPGROUP = 128                # threads per warpgroup: 4 consecutive warps (HOPPER.md §1.1)
WARPS_PER_WARPGROUP = WARPGROUP // WARP
WGMMA_M = 64                   # every wgmma has M = 64 (HOPPER.md §1.2)
MMA_M, MMA_N, MMA_K = 16, 8, 16  # mma.sync.m16n8k16 (HOPPER.md §6.3)
MMA_A_WORDS = 4                # b32 registers of one m16 x k16 A fragment (HOPPER.md §6.3)
MMA_B_UNIT_WORDS = 4           # b32 registers of one k16 x two n8 B fragment pair (one ldmatrix.x4)
MBARRIER_BYTES = 8             # an mbarrier object: one .b64 in shared memory (HOPPER.md §5.1; PTX ISA mbarrier)
QUAD = 4                       # lanes sharing one mma accumulator row: g = lane / 4 (HOPPER.md §1.5)
DEFAULT_WARPS = WARPS_PER_WARPGROUP  # register tiles of a kernel without tk.mma: one warpgroup of warps
CP_ASYNC_BYTES = 16            # cp.async.cg copies 16-byte chunks from 16-byte aligned sources (PTX ISA §9.7.9.25)
VECTOR_BYTES = 16              # the widest ld/st (.v4.b32): one ldmatrix row, one 16-byte shared or global access
PLAIN_SMEM_ALIGN = VECTOR_BYTES  # shared tiles without TMA or swizzle: aligned for 16-byte vector ld/st.shared
REG_BYTES = 4                  # one 32-bit register (a b32 word)
WGMMA_MAX_N = 256              # the largest wgmma N (PTX ISA wgmma.mma_async shapes)
REGS_PER_SM = 65_536           # 32-bit registers per SM (HOPPER.md §7.3)
REGISTER_FILE_BYTES = REGS_PER_SM * REG_BYTES  # the largest register tile or vector a block could hold
MAX_REGS_PER_THREAD = 255      # HOPPER.md §7.3
SETMAXNREG_RANGE = (24, 256)   # setmaxnreg's register count: 24..256, a multiple of SETMAXNREG_STEP
SETMAXNREG_STEP = 8            # (PTX ISA §9.7.19.5; HOPPER.md §7.1)
REG_ALLOC_UNIT = 8             # registers per thread are allocated in units of 8 (256 per warp)
SMEM_PER_BLOCK = 232_448       # 227 KB opt-in maximum per block (HOPPER.md §7.3; CUTLASS sm90_smem_capacity_bytes)
SMEM_PER_SM = 233_472          # 228 KB per SM (HOPPER.md §7.3)
SMEM_RESERVED_PER_BLOCK = 1024  # 1 KB per block reserved for the system (HOPPER.md §7.3; CUDA occupancy calculator)
SMEM_ALLOC_UNIT = 128          # shared memory is allocated per block in 128-byte units (CUDA occupancy calculator)
# Resident blocks per SM (the bound of @blocks_per_sm): HOPPER.md §7.3; CUDA C Programming Guide, "Technical
# Specifications per Compute Capability" (maximum number of resident blocks per SM: 32 for 8.0 and 9.0)
MAX_BLOCKS_PER_SM = 32
MAX_WARPS_PER_SM = 64          # HOPPER.md §7.3
MAX_THREADS_PER_BLOCK = 1024   # CUDA C Programming Guide, compute capability 9.0 and 8.x
# Blocks per grid dim x, y, z: CUDA C Programming Guide, "Technical Specifications per Compute
# Capability" (maximum x-dimension of a grid 2^31 - 1; maximum y- or z-dimension 65535), CC 5.0-9.0
MAX_GRID = (2**31 - 1, 65_535, 65_535)
NUM_SMS = 132                  # SMs of an H100 SXM / H200 (what persistent grids are planned for)
# Rates the cost models rank by (tkir/tools/tune_model.py; passes/multicast.py's decision):
PEAK_TENSOR_FLOPS = 989.4e12   # H200 SXM dense bf16/f16 tensor FLOP/s (NVIDIA H200 datasheet; 1,979 with sparsity)
FP8_TENSOR_SPEEDUP = 2.0       # dense fp8 tensor FLOP/s over bf16's (H200 datasheet: 1,979 against 989.4 TFLOP/s)
FEED_BYTES_PER_S = 10e12       # estimate: L2 -> SM tile traffic of all SMs together (about 2.3x the 4.26 TB/s
#                               HBM copy rate measured here); not published by NVIDIA, not measured

# cuTensorMapEncodeTiled limits (HOPPER.md §4.1; CUDA Driver API §6.30, cuTensorMapEncodeTiled)
TMA_MAX_RANK = 5
TMA_MAX_BOX = 256              # boxDim[i] in [1, 256]
TMA_MAX_ELEM_STRIDE = 8        # elementStrides[i] in [1, 8]
TMA_STRIDE_ALIGN = 16          # globalAddress and globalStrides[i]: multiples of 16 bytes
TMA_MAX_STRIDE = 1 << 40       # globalStrides[i] < 2^40
TMA_MAX_DIM = 1 << 32          # globalDim[i] <= 2^32
TMA_INNER_BYTES_ALIGN = 16     # boxDim[0] * element size: a multiple of 16 bytes (INTERLEAVE_NONE)
