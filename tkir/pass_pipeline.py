"""The textual pass pipeline: `canonicalize,persistent{group_m=16},stream-k{min_iters=8 max_tail=50}`.

The spelling is MLIR's and xDSL's: passes separated by commas, each optionally followed by its
parameters in braces as `key=value` pairs separated by spaces (commas work too, as in xDSL). This
module only splits the text; tkir.passmanager checks names and parameters against the passes'
typed fields. Every piece keeps the column it started at, so a mistake is reported as
`<passes>:1:COL: error: ...`. Every comma separates two entries: an empty one (`a,,b`, `,a`, `a,`) is an
error, not a pass skipped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tkir.diagnostics import CompileError
from tkir.ir import Loc

PIPELINE_FILE = "<passes>"  # the file name diagnostics about a pipeline string carry


@dataclass(frozen=True)
class PassSpec:
    """One entry of a pipeline: a pass name, its parameters as written, and where they were written."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    col: int = 1                                                  # 1-based column of the name
    param_cols: dict[str, int] = field(default_factory=dict, compare=False)
    source: str = field(default="", compare=False)                 # the pipeline text, for the caret

    def loc(self, param: str | None = None) -> Loc:
        return Loc(PIPELINE_FILE, 1, self.param_cols.get(param, self.col) if param else self.col)

    def __str__(self) -> str:
        return self.name + ("{" + " ".join(f"{k}={v}" for k, v in self.params.items()) + "}" if self.params else "")


class PipelineSyntaxError(CompileError):
    pass


def _error(text: str, col: int, message: str) -> PipelineSyntaxError:
    return PipelineSyntaxError(Loc(PIPELINE_FILE, 1, col), message, source=text)


def parse_pipeline(text: str) -> list[PassSpec]:
    """`a,b{k=v k2=v2},c` -> [PassSpec('a'), PassSpec('b', {'k': 'v', 'k2': 'v2'}), PassSpec('c')]."""
    specs: list[PassSpec] = []
    i, n = 0, len(text)
    comma = 0  # the column of the comma that ended the last entry (0: none yet)
    while True:
        while i < n and text[i] == " ":
            i += 1
        if i >= n:
            if comma:  # `a,`: the comma promises a pass that never comes
                raise _error(text, comma, "expected a pass name after ','")
            break
        if text[i] == ",":  # `,a` or `a,,b`: an entry with no name
            raise _error(text, i + 1, "empty pass name: expected a pass name before ','")
        start = i
        while i < n and text[i] not in ",{} ":
            i += 1
        name = text[start:i]
        if not name:
            raise _error(text, i + 1, f"expected a pass name, found '{text[i]}'")
        params: dict[str, str] = {}
        cols: dict[str, int] = {}
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] == "{":
            close = text.find("}", i)
            reopened = text.find("{", i + 1)
            if close < 0 or 0 <= reopened < close:  # `a{k=1,b{k=2}`: a's brace is the one left open
                raise _error(text, i + 1, f"'{{' after '{name}' is never closed")
            j = i + 1
            while j < close:
                while j < close and text[j] in " ,":
                    j += 1
                if j >= close:
                    break
                k0 = j
                while j < close and text[j] not in " ,":
                    j += 1
                item = text[k0:j]
                key, eq, value = item.partition("=")
                if not eq or not key or not value:
                    raise _error(text, k0 + 1, f"expected key=value in the parameters of '{name}', found '{item}'")
                if key in params:
                    raise _error(text, k0 + 1, f"parameter '{key}' of '{name}' given twice")
                params[key], cols[key] = value, k0 + 1
            i = close + 1
        elif i < n and text[i] == "}":
            raise _error(text, i + 1, "'}' without '{'")
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] != ",":
            raise _error(text, i + 1, f"expected ',' after '{name}', found '{text[i]}'")
        specs.append(PassSpec(name, params, start + 1, cols, text))
        comma = i + 1 if i < n else 0
        i += 1
    return specs


def as_specs(pipeline: str | list[str] | list[PassSpec]) -> list[PassSpec]:
    """A pipeline given as one string, or as a list of entries (`"persistent{group_m=16}"` or specs)."""
    if isinstance(pipeline, str):
        return parse_pipeline(pipeline)
    if not isinstance(pipeline, (list, tuple)):
        raise TypeError(f"a pipeline is a string or a list of entries, not {type(pipeline).__name__}")
    out: list[PassSpec] = []
    for entry in pipeline:
        if not isinstance(entry, (str, PassSpec)):
            raise TypeError(f"a pipeline entry is a string such as 'persistent{{group_m=16}}', not "
                            f"{type(entry).__name__} {entry!r}")
        out += [entry] if isinstance(entry, PassSpec) else parse_pipeline(entry)
    return out
