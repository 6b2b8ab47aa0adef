"""Random derivations of the .tk grammar (frontend/grammar.lark): programs that parse, with random meaning.

The generator walks the rules Lark compiled from the grammar (optional parts and repetitions are
already expanded into alternatives there). Below MAX_DEPTH, and under TOKEN_BUDGET tokens, it picks
an alternative at random; past either it takes an alternative of least derivation height, so every
walk ends. Regex terminals are drawn from vocabularies chosen by the rule they appear in (a type's
name from type names, a call's from function names, ...), so that a fair share of the programs
get past the parser into the front end's checks.
"""

from __future__ import annotations

import random
from functools import cache

from lark.grammar import Rule
from lark.lexer import PatternStr

from tkir.frontend.parse import _parser

MAX_DEPTH = 11
TOKEN_BUDGET = 150

TYPE_NAMES = ("gl", "st", "sv", "rt", "rv", "bf16", "f16", "f32", "i32", "u32", "e4m3", "i1", "tile")
FUNC_NAMES = ("exp", "exp2", "log", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "erf", "bf16", "f16", "f32", "i32",
              "row_max", "row_sum", "row_min", "row_mean", "row_var", "col_max", "col_sum", "col_min", "row_index",
              "col_index", "max", "min", "cdiv", "mask_causal", "row", "col", "where", "expp")
ATTR_NAMES = ("T", "x", "y", "z", "w")
VAR_NAMES = ("a", "b", "acc", "x", "s", "M", "N", "K", "BM", "BN", "BK", "D", "block", "inf", "k", "i", "A", "B",
             "C", "X", "Y", "eps")
ANNOTATIONS = ("@stages", "@swizzle", "@no_tma", "@warpgroups", "@unroll", "@stream_k", "@tune", "@blocks_per_sm",
               "@persistent", "@cluster", "@warps")
# @passes(...) texts: edits that apply, and each kind of bad edit (tkir.pass_pipeline, passes/registry.py)
PASSES_TEXTS = ("@passes(-overlap-mma)", "@passes(+stream-k{min_iters=4})", "@passes(-bogus)", "@passes()",
                "@passes(plan-occupancy{producer_warps=x})", "@passes(-infer-layouts)", "@passes(persistent,)")
INTS = ("0", "1", "2", "4", "16", "32", "64", "128", "256", "3", "1024", "2147483648", "99999999999999999999")
FLOATS = ("0.0", "1.5", "1e-5", "2.0", "1e400", "0.5", "1.4426950408889634")
STRINGS = ('"D must be a multiple of DC"', '""', '"x // y"', '"{ ( -"')  # static_assert messages
NEWLINE_AFTER = ("{", "}")


@cache
def _tables() -> tuple[dict[str, list[Rule]], dict[str, str], dict[str, int]]:
    p = _parser()
    rules: dict[str, list[Rule]] = {}
    for r in p.rules:
        rules.setdefault(r.origin.name, []).append(r)
    literals = {t.name: t.pattern.value for t in p.terminals if isinstance(t.pattern, PatternStr)}
    return rules, literals, _heights(rules)


def _heights(rules: dict[str, list[Rule]]) -> dict[str, int]:
    """Least derivation height of each nonterminal (a fixpoint over the rules)."""
    inf = 10**9
    h = dict.fromkeys(rules, inf)
    changed = True
    while changed:
        changed = False
        for name, alts in rules.items():
            for r in alts:
                sub = [0 if s.is_term else h.get(s.name, inf) for s in r.expansion]
                v = 1 + max(sub, default=0)
                if v < h[name]:
                    h[name], changed = v, True
    return h


def _rule_height(r: Rule, heights: dict[str, int]) -> int:
    return max((0 if s.is_term else heights[s.name] for s in r.expansion), default=0)


def _terminal(name: str, context: str, position: int, rng: random.Random, literals: dict[str, str]) -> str:
    if name in literals:
        return literals[name]
    if name == "NAME":
        if context == "type" and position == 0:
            return rng.choice(TYPE_NAMES)
        if context == "call":
            return rng.choice(FUNC_NAMES)
        if context == "attr":
            return rng.choice(ATTR_NAMES)
        return rng.choice(VAR_NAMES if rng.random() < 0.9 else TYPE_NAMES + FUNC_NAMES)
    if name == "INT":
        return rng.choice(INTS)
    if name == "FLOAT":
        return rng.choice(FLOATS)
    if name == "ANNOT":
        return rng.choice(ANNOTATIONS)
    if name == "PASSES_ANN":
        return rng.choice(PASSES_TEXTS)
    if name == "MINUS":
        return "-"
    if name == "STRING":
        return rng.choice(STRINGS)
    return "x"


def generate(rng: random.Random) -> str:
    """One program derived from `start`."""
    rules, literals, heights = _tables()
    out: list[str] = []

    def walk(symbol: str, depth: int) -> None:
        alts = rules[symbol]
        if depth > MAX_DEPTH or len(out) > TOKEN_BUDGET:
            least = min(_rule_height(r, heights) for r in alts)
            alts = [r for r in alts if _rule_height(r, heights) == least]
        r = rng.choice(alts)
        context = r.alias or symbol
        for i, s in enumerate(r.expansion):
            if s.is_term:
                tok = _terminal(s.name, context, i, rng, literals)
                out.append(tok + ("\n" if tok in NEWLINE_AFTER else ""))
            else:
                walk(s.name, depth + 1)

    walk("start", 0)
    return " ".join(out).replace("\n ", "\n") + "\n"
