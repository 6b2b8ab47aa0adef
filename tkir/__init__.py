"""tkir: a tile-kernel compiler for NVIDIA Hopper GPUs.

    import tkir
    k = tkir.compile("examples/gemm.tk", BM=128)
    print(k.ir)              # the tile IR after the pass pipeline
    tkir.interpret(k, A, B, C)   # numpy reference semantics
    k(A, B, C)               # on the GPU (torch tensors, CUDA array interface, DLPack)
"""

from tkir.api import CompiledKernel, compile, interpret

__all__ = ["CompiledKernel", "compile", "interpret"]
__version__ = "0.1.0"
