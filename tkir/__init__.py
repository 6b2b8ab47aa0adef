"""tkir: a tile-kernel compiler for NVIDIA Hopper GPUs.

    import tkir
    k = tkir.compile("examples/gemm.tk", BM=128)
    print(k.ir)              # the tile IR after the pass pipeline
    tkir.interpret(k, A, B, C)   # numpy reference semantics
    k(A, B, C)               # on the GPU (torch tensors, CUDA array interface, DLPack)
    t = tkir.autotune("examples/gemm.tk"); t(A, B, C)   # the configuration `tkc tune` found best
"""

from tkir.api import CompiledKernel, compile, interpret


def autotune(path: str, **kw: object):  # -> tkir.tune.TunedKernel (imported on use: keeps `import tkir` light)
    """A kernel that launches, per call, the configuration `tkc tune` cached for the call's shapes."""
    from tkir.tune import autotune as make

    return make(path, **kw)


__all__ = ["CompiledKernel", "autotune", "compile", "interpret"]
__version__ = "0.1.0"
