"""Facts about the target hardware (NVIDIA Hopper, sm_90a; H100/H200), each stated once with its source.

Every module that needs one imports it from here; the sm_80 path runs on the same chip and uses the
same limits.
"""

from __future__ import annotations

WARP = 32                      # threads per warp
WARPGROUP = 128                # threads per warpgroup: 4 consecutive warps (HOPPER.md §1.1)
WARPS_PER_WARPGROUP = WARPGROUP // WARP
WGMMA_M = 64                   # every wgmma has M = 64 (HOPPER.md §1.2)
MMA_M, MMA_N, MMA_K = 16, 8, 16  # mma.sync.m16n8k16 (HOPPER.md §6.3)
MMA_A_WORDS = 4                # b32 registers of one m16 x k16 A fragment (HOPPER.md §6.3)
MMA_B_UNIT_WORDS = 4           # b32 registers of one k16 x two n8 B fragment pair (one ldmatrix.x4)
WGMMA_MAX_N = 256              # the largest wgmma N (PTX ISA wgmma.mma_async shapes)
REGS_PER_SM = 65_536           # 32-bit registers per SM (HOPPER.md §7.3)
MAX_REGS_PER_THREAD = 255      # HOPPER.md §7.3
SETMAXNREG_RANGE = (24, 256)   # setmaxnreg's register count: 24..256, a multiple of SETMAXNREG_STEP
SETMAXNREG_STEP = 8            # (PTX ISA §9.7.19.5; HOPPER.md §7.1)
REG_ALLOC_UNIT = 8             # registers per thread are allocated in units of 8 (256 per warp)
SMEM_PER_BLOCK = 232_448       # 227 KB opt-in maximum per block (HOPPER.md §7.3; CUTLASS sm90_smem_capacity_bytes)
SMEM_PER_SM = 233_472          # 228 KB per SM (HOPPER.md §7.3)
# Resident blocks per SM (the bound of @blocks_per_sm): HOPPER.md §7.3; CUDA C Programming Guide, "Technical
# Specifications per Compute Capability" (maximum number of resident blocks per SM: 32 for 8.0 and 9.0)
MAX_BLOCKS_PER_SM = 32
MAX_WARPS_PER_SM = 64          # HOPPER.md §7.3
MAX_THREADS_PER_BLOCK = 1024   # CUDA C Programming Guide, compute capability 9.0 and 8.x
# Blocks per grid dim x, y, z: CUDA C Programming Guide, "Technical Specifications per Compute
# Capability" (maximum x-dimension of a grid 2^31 - 1; maximum y- or z-dimension 65535), CC 5.0-9.0
MAX_GRID = (2**31 - 1, 65_535, 65_535)
NUM_SMS = 132                  # SMs of an H100 SXM / H200 (what persistent grids are planned for)
