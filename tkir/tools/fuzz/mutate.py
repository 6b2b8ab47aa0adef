"""Token- and line-level mutations of source text (.tk or IR): what a typo, an editor or a bad tool does.

`mutate(text, rng, donors)` applies one to three mutations chosen from MUTATIONS: delete, duplicate,
swap or insert tokens; replace a number by a boundary value (0, -1, 2**31, 2**63, 1e400, nan, ...) or
a nearby one; replace a name by another name of the same text, a keyword, or a very long name;
change punctuation; delete, duplicate or swap lines, splice in a line of another text (`donors`);
truncate; insert a stray character. The tokenizer fits both languages well enough for mutation.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence

TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*)
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
  | (?P<value>%[A-Za-z0-9_.]+)
  | (?P<at>@[A-Za-z_][A-Za-z0-9_.]*)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>\.\.|[-+*/=!<>]=|\^\(|.)
""", re.VERBOSE | re.DOTALL)

BOUNDARY_NUMBERS = ("0", "-1", "1", "2", "3", "15", "17", "255", "65536", "2147483647", "2147483648",
                    "-2147483648", "4294967296", "9223372036854775808", "18446744073709551616",
                    "1" + "0" * 40, "0.0", "-0.0", "1e400", "-1e400", "1e-400", "nan", "inf", "-inf",
                    "0.5", "1e10")
KEYWORDS = ("kernel", "grid", "shared", "reg", "let", "for", "in", "if", "else", "step", "block", "inf",
            "gl", "st", "sv", "rt", "rv", "bf16", "f16", "f32", "i32", "u32", "i1", "e4m3", "T", "x", "y", "z",
            "true", "false", "scf.for", "scf.yield", "tk.kernel", "tk.mma", "tk.load", "tk.store", "pipe.stage",
            "static_assert")
PUNCTUATION = ("(", ")", "[", "]", "{", "}", "<", ">", ",", ":", "=", "+", "-", "*", "/", "%", "@", ".", "..",
               "+=", "==", "^(", "!", "\"", ";", "$")
STRAY = ("\x00", "\t", "\r", "\u00e9", "\u00a0", "\u200b", "\ufeff", "\\", "#", "'", "`", "\U0001f600")
LONG_NAME_LENGTHS = (64, 300, 5000)
MAX_MUTATIONS = 3


def tokenize(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs covering the whole text."""
    return [(m.lastgroup or "punct", m.group()) for m in TOKEN.finditer(text)]


def _solid(tokens: list[tuple[str, str]]) -> list[int]:
    return [i for i, (k, _) in enumerate(tokens) if k not in ("ws", "comment")]


def _of_kind(tokens: list[tuple[str, str]], *kinds: str) -> list[int]:
    return [i for i, (k, _) in enumerate(tokens) if k in kinds]


def _nearby_number(tok: str, rng: random.Random) -> str:
    try:
        v = int(tok)
    except ValueError:
        return rng.choice(BOUNDARY_NUMBERS)
    return str(rng.choice([v + 1, v - 1, v * 2, v // 2, max(v - 16, 0), v + 16, 16, 8, 1]))


def _tokens_op(fn: Callable[[list[tuple[str, str]], random.Random, Sequence[str]], bool]):
    """A mutation on the token list (returns False when it does not apply)."""
    def apply(text: str, rng: random.Random, donors: Sequence[str]) -> str | None:
        toks = tokenize(text)
        if not fn(toks, rng, donors):
            return None
        return "".join(t for _, t in toks)
    apply.__name__ = fn.__name__
    return apply


@_tokens_op
def delete_token(toks, rng, donors) -> bool:
    solid = _solid(toks)
    if not solid:
        return False
    toks[rng.choice(solid)] = ("ws", " ")
    return True


@_tokens_op
def duplicate_token(toks, rng, donors) -> bool:
    solid = _solid(toks)
    if not solid:
        return False
    i = rng.choice(solid)
    toks.insert(i, (toks[i][0], toks[i][1] + " "))
    return True


@_tokens_op
def swap_tokens(toks, rng, donors) -> bool:
    solid = _solid(toks)
    if len(solid) < 2:
        return False
    k = rng.randrange(len(solid) - 1)
    i, j = (solid[k], solid[k + 1]) if rng.random() < 0.6 else rng.sample(solid, 2)
    toks[i], toks[j] = toks[j], toks[i]
    return True


@_tokens_op
def insert_token(toks, rng, donors) -> bool:
    solid = _solid(toks)
    if not solid:
        return False
    pool = [toks[i][1] for i in solid] + list(KEYWORDS) + list(PUNCTUATION)
    toks.insert(rng.choice(solid), ("name", rng.choice(pool) + " "))
    return True


@_tokens_op
def replace_number(toks, rng, donors) -> bool:
    nums = _of_kind(toks, "number")
    if not nums:
        return False
    i = rng.choice(nums)
    new = rng.choice(BOUNDARY_NUMBERS) if rng.random() < 0.5 else _nearby_number(toks[i][1], rng)
    toks[i] = ("number", new)
    return True


@_tokens_op
def replace_name(toks, rng, donors) -> bool:
    names = _of_kind(toks, "name", "value", "at")
    if not names:
        return False
    i = rng.choice(names)
    kind, old = toks[i]
    same = [toks[j][1] for j in names if toks[j][0] == kind and toks[j][1] != old]
    r = rng.random()
    if r < 0.55 and same:
        new = rng.choice(same)
    elif r < 0.85:
        new = rng.choice(KEYWORDS)
    else:
        new = old[:1] + "v" * rng.choice(LONG_NAME_LENGTHS)
    if kind == "value" and not new.startswith("%"):
        new = "%" + new.replace(".", "_")
    toks[i] = (kind, new)
    return True


@_tokens_op
def replace_punctuation(toks, rng, donors) -> bool:
    puncts = _of_kind(toks, "punct")
    if not puncts:
        return False
    toks[rng.choice(puncts)] = ("punct", rng.choice(PUNCTUATION))
    return True


@_tokens_op
def replace_string(toks, rng, donors) -> bool:
    strings = _of_kind(toks, "string")
    if not strings:
        return False
    pool = [toks[j][1] for j in strings] + ['""', '"M / 0"', '"M *"', '"' + "N" * 300 + '"', '"-1"', '"x y"']
    toks[rng.choice(strings)] = ("string", rng.choice(pool))
    return True


def _lines_op(fn: Callable[[list[str], random.Random, Sequence[str]], bool]):
    def apply(text: str, rng: random.Random, donors: Sequence[str]) -> str | None:
        lines = text.split("\n")
        if not fn(lines, rng, donors):
            return None
        return "\n".join(lines)
    apply.__name__ = fn.__name__
    return apply


@_lines_op
def delete_line(lines, rng, donors) -> bool:
    if len(lines) < 2:
        return False
    del lines[rng.randrange(len(lines))]
    return True


@_lines_op
def duplicate_line(lines, rng, donors) -> bool:
    i = rng.randrange(len(lines))
    lines.insert(rng.randrange(len(lines) + 1), lines[i])
    return True


@_lines_op
def swap_lines(lines, rng, donors) -> bool:
    if len(lines) < 2:
        return False
    i, j = rng.sample(range(len(lines)), 2)
    lines[i], lines[j] = lines[j], lines[i]
    return True


@_lines_op
def splice_line(lines, rng, donors) -> bool:
    if not donors:
        return False
    other = rng.choice(donors).split("\n")
    k = rng.randint(1, 3)
    start = rng.randrange(len(other))
    lines[rng.randrange(len(lines) + 1):0] = other[start:start + k]
    return True


def truncate(text: str, rng: random.Random, donors: Sequence[str]) -> str | None:
    return text[:rng.randrange(len(text))] if text else None


def stray_character(text: str, rng: random.Random, donors: Sequence[str]) -> str | None:
    i = rng.randrange(len(text) + 1)
    return text[:i] + rng.choice(STRAY) + text[i:]


# (mutation, weight)
MUTATIONS: tuple[tuple[Callable[[str, random.Random, Sequence[str]], str | None], int], ...] = (
    (delete_token, 10), (duplicate_token, 6), (swap_tokens, 8), (insert_token, 6), (replace_number, 16),
    (replace_name, 14), (replace_punctuation, 5), (replace_string, 4), (delete_line, 6), (duplicate_line, 5),
    (swap_lines, 4), (splice_line, 6), (truncate, 2), (stray_character, 2),
)


def mutate(text: str, rng: random.Random, donors: Sequence[str] = (),
           count: int | None = None) -> tuple[str, list[str]]:
    """The mutated text and the names of the mutations applied (1 to MAX_MUTATIONS, or `count`)."""
    funcs = [f for f, _ in MUTATIONS]
    weights = [w for _, w in MUTATIONS]
    applied: list[str] = []
    n = count if count is not None else rng.randint(1, MAX_MUTATIONS)
    tries = 0
    while len(applied) < n and tries < 4 * n:
        tries += 1
        f = rng.choices(funcs, weights)[0]
        out = f(text, rng, donors)
        if out is not None:
            text = out
            applied.append(f.__name__)
    return text, applied
