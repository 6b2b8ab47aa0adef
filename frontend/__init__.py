"""The .tk front end: source text -> checked syntax tree -> tk-level tile IR (a verified Module).

    from tkir.frontend import compile_file, compile_source
    module = compile_file("examples/gemm.tk", consts={"BM": 64})

Every user error is a `tkir.diagnostics.CompileError` located in the source (file:line:col, the
line, a caret). The language is described in docs/language.md.
"""

from __future__ import annotations

from tkir.frontend.annotations import pass_edits
from tkir.frontend.lower import lower_kernel
from tkir.frontend.parse import parse_source
from tkir.ir import Module
from tkir.pass_pipeline import PassEdit
from tkir.source_text import check_nesting, read_source

__all__ = ["compile_file", "compile_source", "read_pass_edits"]


def compile_source(text: str, filename: str = "<string>",
                   consts: dict[str, int | float] | None = None) -> Module:
    """Compile .tk source text; `consts` override the kernel's compile-time parameters."""
    check_nesting(text, filename)
    kernel = parse_source(text, filename)
    return lower_kernel(kernel, text, consts)


def compile_file(path: str, consts: dict[str, int | float] | None = None) -> Module:
    """Compile a .tk file (see compile_source)."""
    return compile_source(read_source(path), str(path), consts)


def read_pass_edits(path: str) -> list[PassEdit]:
    """The edits of the kernel's `@passes(...)` in a .tk file, each located in it ([] without one): read
    from the syntax tree alone, so no const needs a value (`tkc passes --kernel FILE`)."""
    text = read_source(path)
    check_nesting(text, str(path))
    kernel = parse_source(text, str(path))
    found = [a for a in kernel.annotations if a.name == "passes"]
    return pass_edits(found[0], text) if found else []
