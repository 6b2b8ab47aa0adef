"""Reading source text (.tk and .tkir) safely: UTF-8 decoding and a nesting limit, as located errors.

A file that is not UTF-8 is reported at the first bad byte's line and column instead of raising
UnicodeDecodeError. Programs nested deeper than MAX_NESTING levels (brackets and braces, plus runs
of prefix `-` / `!`) are refused before parsing, at the place the limit is passed: the LALR parser
and the tree walkers recurse once per level, and Python's recursion limit (1000 frames) was reached
at about 300 nested `if`s and 1000 nested minus signs.
"""

from __future__ import annotations

from pathlib import Path

from tkir.diagnostics import CompileError
from tkir.ir import Loc

UTF8_BOM = b"\xef\xbb\xbf"  # the byte order mark U+FEFF in UTF-8
MAX_NESTING = 128  # far above real kernels (gemm.tk nests 4 deep), far below the recursion limit
OPENERS, CLOSERS = "([{", ")]}"
PREFIX_OPERATORS = "-!"


def read_source(path: str | Path) -> str:
    """The file's text, decoded as UTF-8; a located CompileError at the first byte that is not."""
    data = Path(path).read_bytes()
    if data.startswith(UTF8_BOM):  # what some editors write first: not text of the program
        data = data[len(UTF8_BOM):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        before = data[:e.start]
        line = before.count(b"\n") + 1
        col = e.start - (before.rfind(b"\n") + 1) + 1
        raise CompileError(Loc(str(path), line, col), f"the file is not UTF-8 text: byte 0x{data[e.start]:02x} "
                                                       "cannot start or continue a character",
                           source=data.decode("utf-8", errors="replace")) from None


def check_nesting(text: str, filename: str, comment: str = "//") -> None:
    """Refuse text nested deeper than MAX_NESTING (comments and "strings" are skipped: a string ends at
    its closing quote or with its line)."""
    depth, run, line, col = 0, 0, 1, 0
    in_comment = in_string = False
    prev = ""
    for ch in text:
        if ch == "\n":
            line, col, in_comment, in_string, run = line + 1, 0, False, False, 0
            prev = ch
            continue
        col += 1
        if in_comment:
            continue
        if in_string or ch == '"':
            in_string = not in_string if ch == '"' else in_string
            prev = ch
            continue
        if ch == comment[-1] and prev == comment[0] and len(comment) == 2:
            in_comment = True
            continue
        prev = ch
        if ch in OPENERS:
            depth += 1
        elif ch in CLOSERS:
            depth = max(depth - 1, 0)
        if ch in PREFIX_OPERATORS:
            run += 1
        elif not ch.isspace():
            run = 0
        if depth + run > MAX_NESTING:
            raise CompileError(Loc(filename, line, col), f"nested too deeply: more than {MAX_NESTING} levels of "
                                                         "brackets, blocks and prefix operators", source=text)
