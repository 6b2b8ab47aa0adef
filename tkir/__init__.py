"""tkir: a tile-kernel compiler for NVIDIA Hopper GPUs.

    import tkir
    k = tkir.compile("examples/gemm.tk", BM=128)
    print(k.ir)              # the tile IR after the pass pipeline
    tkir.interpret(k, A, B, C)   # numpy reference semantics
    k(A, B, C)               # on the GPU (torch tensors, CUDA array interface, DLPack)
    t = tkir.autotune("examples/gemm.tk"); t(A, B, C)   # the configuration `tkc tune` found best
"""

from tkir.api import CompiledKernel, compile, interpret
from tkir.version import __version__ as __version__  # one home: tkir/version.py


def autotune(path: str, **kw: object):  # -> tkir.tools.tune.TunedKernel (imported on use: keeps `import tkir` light)
    """A kernel that launches, per call, the configuration `tkc tune` cached for the call's shapes."""
    from tkir.tools.tune import autotune as make

    return make(path, **kw)


__all__ = ["CompiledKernel", "autotune", "compile", "interpret"]
