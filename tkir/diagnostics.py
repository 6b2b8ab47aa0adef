"""Located compile errors: `path:line:col: error: message`, the source line and a caret.

Every error a user can cause (in a .tk file, in IR text, in a pass's decision) is a
`CompileError`; the CLI prints `format()` and exits with status 1, never a traceback.
"""

from __future__ import annotations

from tkir.ir import Loc


class TkirError(Exception):
    """The base of every error tkir reports to a user (a bad kernel, bad arguments, a missing tool,
    a failing driver call): the CLI prints it and exits with status 1; anything else is a bug."""


class TkirWarning(UserWarning):
    """The base of tkir's own warnings (e.g. the disk cache's); the CLI prints them as one line,
    `tkc: warning: ...`."""


class CompileError(TkirError):
    def __init__(self, loc: Loc | None, message: str, source: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.loc = loc
        self.message = message
        self.source = source
        self.hint = hint

    def format(self) -> str:
        where = f"{self.loc}: " if self.loc else ""
        out = [f"{where}error: {self.message}"]
        line = self._source_line()
        if line is not None and self.loc is not None:
            out.append(line)
            out.append(" " * (max(self.loc.col, 1) - 1) + "^")
        if self.hint:
            out.append(f"note: {self.hint}")
        return "\n".join(out)

    def _source_line(self) -> str | None:
        text = self.source
        if text is None and self.loc is not None:
            try:
                with open(self.loc.file, encoding="utf-8", errors="replace") as f:
                    text = f.read()
            except OSError:
                return None
        if text is None or self.loc is None:
            return None
        lines = text.splitlines()
        if 1 <= self.loc.line <= len(lines):
            return lines[self.loc.line - 1].expandtabs(1)
        return None

    def __str__(self) -> str:
        return self.format()
