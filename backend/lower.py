"""The backend driver: tile IR (after the pass pipeline) -> LLVM IR -> PTX, plus the launch description.

`compile_module` returns the text of every stage it produced: `llvm`, `ptx`, and `launch` (the JSON
dict of tkir.backend.launch, with `dynamic_smem` set to the shared-memory plan the lowering used).
ptxas (cubin, SASS) runs only when asked for (`assemble_artifacts`), so `--emit ptx` stays fast.
"""

from __future__ import annotations

from tkir.backend.launch import build_launch
from tkir.backend.lower_llvm import lower_kernel
from tkir.backend.ptx import llvm_to_ptx
from tkir.ir import Module
from tkir.passmanager import Options


def compile_module(module: Module, options: Options) -> dict[str, object]:
    launch = build_launch(module, options.target)
    llvm_ir, smem = lower_kernel(module, launch, options.target)
    launch["dynamic_smem"] = smem
    ptx = llvm_to_ptx(llvm_ir, options.target)
    return {"llvm": llvm_ir, "ptx": ptx, "launch": launch}


def assemble_artifacts(ptx: str, target: str) -> dict[str, object]:
    """cubin bytes, SASS text and ptxas's resource report for a PTX module."""
    from tkir.backend.toolchain import assemble, disassemble

    res = assemble(ptx, target)
    return {"cubin": res.cubin, "sass": disassemble(res.cubin), "ptxas": res}
