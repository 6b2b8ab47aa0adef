"""The backend driver: tile IR (after the pass pipeline) -> LLVM IR -> PTX, plus the launch description.

`compile_module` returns the text of every stage it produced: `llvm`, `ptx`, and `launch` (the
tkir.backend.launch.LaunchDescription, built after the lowering, with the shared memory it used).
ptxas (cubin, SASS) runs only when asked for (`assemble_artifacts`), so `--emit ptx` stays fast.
"""

from __future__ import annotations

from tkir.backend.launch import build_launch, kernel_params
from tkir.backend.lower_llvm import lower_kernel
from tkir.backend.ptx import llvm_to_ptx
from tkir.ir import Module
from tkir.passmanager import Options


def compile_module(module: Module, options: Options) -> dict[str, object]:
    params = kernel_params(module)  # checks the TMA descriptors first, as the launch passes them
    llvm_ir, smem = lower_kernel(module, params, options.target)
    launch = build_launch(module, options.target, dynamic_smem=smem, params=params)
    ptx = llvm_to_ptx(llvm_ir, options.target)
    return {"llvm": llvm_ir, "ptx": ptx, "launch": launch}


def assemble_artifacts(ptx: str, target: str) -> dict[str, object]:
    """cubin bytes, SASS text and ptxas's resource report for a PTX module."""
    from tkir.backend.toolchain import assemble, disassemble

    res = assemble(ptx, target)
    return {"cubin": res.cubin, "sass": disassemble(res.cubin), "ptxas": res}
