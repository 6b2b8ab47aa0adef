"""Counting a call's work, for tests that check how work grows with program size.

A count of the Python lines run does not move with the machine's load, its caches or the other pytest
workers, as CPU time does (from 300 to 1,200 statements, CPU time per IR op grew 1.22x on a quiet 2-core
machine and 1.71-1.80x on CI's, with the same work). It sees a super-linear step written in Python; one
inside C code (a builtin's `list.index`, LLVM's code generator) it does not, and those are timed by
scripts/compile_time.py, a benchmark.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def python_lines(f: Callable[[], object]) -> int:
    """The Python lines, calls and returns executed by f()."""
    count = 0

    def trace(frame, event, arg):  # noqa: ANN001, ANN202 - sys.settrace's protocol
        nonlocal count
        count += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        f()
    finally:
        sys.settrace(previous)
    return count
