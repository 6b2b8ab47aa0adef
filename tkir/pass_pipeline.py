"""The textual pass pipeline: `canonicalize,persistent{group_m=16},stream-k{min_iters=8 max_tail=50}`.

The spelling is MLIR's and xDSL's: passes separated by commas, each optionally followed by its
parameters in braces as `key=value` pairs separated by spaces (commas work too, as in xDSL). This
module only splits the text; tkir.passmanager checks names and parameters against the passes'
typed fields. Every piece keeps the column it started at, so a mistake is reported as
`<passes>:1:COL: error: ...`. Every comma separates two entries: an empty one (`a,,b`, `,a`, `a,`) is an
error, not a pass skipped.

A kernel edits its own pipeline in the same spelling (`@passes(-overlap-mma, plan-occupancy{producer_warps=4},
+stream-k)`, docs/language.md): `parse_pass_edits` splits that text into PassEdits, each located in the
.tk file where it was written (`origin`), so a mistake there is `FILE:LINE:COL: error: ...`;
passes/registry.py applies them to the pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from tkir.diagnostics import CompileError
from tkir.ir import Loc

PIPELINE_FILE = "<passes>"  # the file name diagnostics about a pipeline string carry
_BLANKS = str.maketrans("\t\r\n", "   ")  # in a kernel's @passes text, blanks as the space is


@dataclass(frozen=True)
class PassSpec:
    """One entry of a pipeline: a pass name, its parameters as written, and where they were written."""

    name: str
    params: dict[str, str] = field(default_factory=dict)
    col: int = 1                                                  # 1-based column of the name
    param_cols: dict[str, int] = field(default_factory=dict, compare=False)
    source: str = field(default="", compare=False)                 # the text of `file`, for the caret
    file: str = field(default=PIPELINE_FILE, compare=False)        # a .tk file for its @passes edits
    line: int = field(default=1, compare=False)                    # the line of the name in `file`
    param_lines: dict[str, int] = field(default_factory=dict, compare=False)

    def loc(self, param: str | None = None) -> Loc:
        if param and param in self.param_cols:
            return Loc(self.file, self.param_lines.get(param, self.line), self.param_cols[param])
        return Loc(self.file, self.line, self.col)

    def __str__(self) -> str:
        return self.name + ("{" + " ".join(f"{k}={v}" for k, v in self.params.items()) + "}" if self.params else "")


class PipelineSyntaxError(CompileError):
    pass


@dataclass(frozen=True)
class _Place:
    """Where a pipeline text was written: `<passes>` (a command line), or from `origin` on in a source file
    whose text is `source` (a kernel's @passes, which may span lines)."""

    text: str
    origin: Loc | None = None
    source: str | None = None

    def at(self, col: int) -> tuple[str, int, int]:
        """(file, line, column) of the text's 1-based column `col`."""
        if self.origin is None:
            return PIPELINE_FILE, 1, col
        i = col - 1
        newlines = self.text.count("\n", 0, i)
        if not newlines:
            return self.origin.file, self.origin.line, self.origin.col + i
        return self.origin.file, self.origin.line + newlines, i - self.text.rfind("\n", 0, i)

    def error(self, col: int, message: str, hint: str | None = None) -> PipelineSyntaxError:
        return PipelineSyntaxError(Loc(*self.at(col)), message, source=self.caret_source, hint=hint)

    @property
    def caret_source(self) -> str:
        return self.text if self.origin is None else (self.source or "")


def parse_pipeline(text: str, origin: Loc | None = None, source: str | None = None) -> list[PassSpec]:
    """`a,b{k=v k2=v2},c` -> [PassSpec('a'), PassSpec('b', {'k': 'v', 'k2': 'v2'}), PassSpec('c')].

    With `origin` (where the text starts in a source file whose whole text is `source`) every piece and
    every error is located in that file, and tabs and line breaks separate pieces as blanks do."""
    place = _Place(text, origin, source)
    if origin is not None:
        text = text.translate(_BLANKS)  # same length: columns still index the text as written
    specs: list[PassSpec] = []
    i, n = 0, len(text)
    comma = 0  # the column of the comma that ended the last entry (0: none yet)
    while True:
        while i < n and text[i] == " ":
            i += 1
        if i >= n:
            if comma:  # `a,`: the comma promises a pass that never comes
                raise place.error(comma, "expected a pass name after ','")
            break
        if text[i] == ",":  # `,a` or `a,,b`: an entry with no name
            raise place.error(i + 1, "empty pass name: expected a pass name before ','")
        start = i
        while i < n and text[i] not in ",{} ":
            i += 1
        name = text[start:i]
        if not name:
            raise place.error(i + 1, f"expected a pass name, found '{text[i]}'")
        params: dict[str, str] = {}
        cols: dict[str, int] = {}
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] == "{":
            close = text.find("}", i)
            reopened = text.find("{", i + 1)
            if close < 0 or 0 <= reopened < close:  # `a{k=1,b{k=2}`: a's brace is the one left open
                raise place.error(i + 1, f"'{{' after '{name}' is never closed")
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
                    raise place.error(k0 + 1, f"expected key=value in the parameters of '{name}', found '{item}'")
                if key in params:
                    raise place.error(k0 + 1, f"parameter '{key}' of '{name}' given twice")
                params[key], cols[key] = value, k0 + 1
            i = close + 1
        elif i < n and text[i] == "}":
            raise place.error(i + 1, "'}' without '{'")
        while i < n and text[i] == " ":
            i += 1
        if i < n and text[i] != ",":
            raise place.error(i + 1, f"expected ',' after '{name}', found '{text[i]}'")
        file, line, col = place.at(start + 1)
        located = [place.at(c) for c in cols.values()]
        specs.append(PassSpec(name, params, col, {k: c for k, (_, _, c) in zip(cols, located, strict=True)},
                              place.caret_source, file, line, {k: ln for k, (_, ln, _) in zip(cols, located,
                                                                                                strict=True)}))
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


# --- a kernel's edits: @passes(...) ------------------------------------------------------------------

EDIT_ACTIONS = {"-": "remove", "+": "add", "": "set"}  # the sign before a name -> what the edit does


@dataclass(frozen=True)
class PassEdit:
    """One edit a kernel makes to the pipeline it is compiled with: `-name` removes every entry of the pass,
    `+name{k=v}` switches on a pass the pipeline leaves out or runs opt-in only, `name{k=v}` sets parameters
    of the pass where the pipeline runs it (passes/registry.py apply_pass_edits)."""

    action: str  # a value of EDIT_ACTIONS
    spec: PassSpec  # the pass's name (without the sign) and parameters, located where they were written

    def __str__(self) -> str:
        sign = next(k for k, v in EDIT_ACTIONS.items() if v == self.action)
        return sign + str(self.spec)


def parse_pass_edits(text: str, origin: Loc | None = None, source: str | None = None) -> list[PassEdit]:
    """`-overlap-mma, plan-occupancy{producer_warps=4}` -> [PassEdit('remove', ...), PassEdit('set', ...)],
    checked for their form here (a sign and a name; parameters where they mean something); the names
    and parameter values are checked against the passes by apply_pass_edits."""
    place = _Place(text, origin, source)
    edits: list[PassEdit] = []
    for s in parse_pipeline(text, origin, source):
        sign = s.name[0] if s.name[0] in "+-" else ""
        spec = replace(s, name=s.name[len(sign):], col=s.col + len(sign))
        if not spec.name:
            raise PipelineSyntaxError(s.loc(), f"expected a pass name after '{sign}'", source=s.source or None)
        if sign == "-" and spec.params:
            first = next(iter(spec.params))
            raise PipelineSyntaxError(spec.loc(first), f"'-{spec.name}' removes the pass: it takes no parameters",
                                      source=s.source or None,
                                      hint=f"write {spec.name}{{...}} to set the parameters of the pass instead")
        if not sign and not spec.params:
            raise PipelineSyntaxError(spec.loc(), f"'{spec.name}' alone changes nothing",
                                      source=s.source or None,
                                      hint=f"write -{spec.name} to remove the pass, +{spec.name} to switch it on, "
                                           f"or {spec.name}{{key=value}} to set its parameters")
        edits.append(PassEdit(EDIT_ACTIONS[sign], spec))
    if not edits:
        raise place.error(1, "no pass edits: write @passes(-NAME), @passes(+NAME) or @passes(NAME{key=value})",
                          hint="`tkc passes` lists the passes and the default pipeline")
    return edits


def edits_text(edits: list[PassEdit]) -> str:
    """The edits as one line of text (the kernel's `passes` attribute), which parse_pass_edits reads back."""
    return ",".join(str(e) for e in edits)
