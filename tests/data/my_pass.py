"""A researcher's pass, loaded with --load-pass: renames every shared tile's value to smem_<name>."""

from tkir.ir import Module
from tkir.passmanager import Options, Pass


class RenameShared(Pass):
    name = "rename-shared"

    def run(self, module: Module, options: Options) -> None:
        for op in module.walk():
            if op.name == "tk.alloc":
                op.result.name = "smem_" + (op.result.name or "t")
