"""verify: run the IR verifier (the pass manager also runs it after every pass)."""

from __future__ import annotations

from tkir.ir import Module
from tkir.passmanager import Options, Pass
from tkir.verifier import verify


class Verify(Pass):
    name = "verify"

    def run(self, module: Module, options: Options) -> None:
        verify(module)
