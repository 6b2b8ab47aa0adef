"""Parameter values at and just past the limits of the LLVM type they feed (i32): pass parameters, annotation
arguments, consts (-D), problem sizes (--size) and the removed --group-m.

Each `limit_input` returns the argv tail, the text and whether the value is known to be wrong: a value
outside i32, or outside the domain the language documents for an annotation (ANNOTATION_DOMAINS) or a size
(a positive i32). Such an input must be refused (exit 0 is an `accepted-wrong`); a value inside may compile
or be refused. An error about a command-line option (`tkc tune: error: --size M=0: ...`) is located at the
option (tkir.tools.fuzz.oracle accepts it for the option the input names).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from functools import cache

I32_MIN, I32_MAX = -(2 ** 31), 2 ** 31 - 1  # LLVM i32: every int parameter, const and size becomes one
LIMIT_VALUES = (I32_MAX, I32_MAX + 1, I32_MIN, I32_MIN - 1, 2 ** 32, 2 ** 63, 0, -1, 1)
# what frontend/annotations.py documents each annotation argument takes (by `@name` or `@name.keyword`)
ANNOTATION_DOMAINS: dict[str, Callable[[int], bool]] = {
    "stages": lambda v: v >= 1,
    "warpgroups.consumers": lambda v: v >= 1,
    "warpgroups.producers": lambda v: v in (0, 1),
    "blocks_per_sm": lambda v: 0 <= v <= 32,
    "warps": lambda v: 0 <= v <= 32,
    "cluster": lambda v: v in (1, 2, 4, 8),
    "persistent": lambda v: v in (0, 1),
    "hoist_loads": lambda v: v in (0, 1),
    "fence_loads": lambda v: v in (0, 1),
    "stream_k": lambda v: v in (0, 1),
    "stream_k.min_iters": lambda v: 1 <= v <= 1 << 20,
}
ANNOTATION = re.compile(r"@(\w+)\(([^()]*)\)")
SIZE_COMMANDS = (("run", "--interpret"), ("tune", "--dry-run"))


def in_i32(v: int) -> bool:
    return I32_MIN <= v <= I32_MAX


@cache
def int_params() -> tuple[tuple[str, str], ...]:
    """(pass, parameter) for every int parameter of every registered pass."""
    from tkir.passes.registry import load_registry

    return tuple((name, p.name) for name, cls in sorted(load_registry().items()) for p in cls.params()
                 if p.type is int)


def _pipeline_with(pass_name: str, param: str, value: int) -> str:
    from tkir.passes.registry import DEFAULT_PIPELINE

    entry = f"{pass_name}{{{param}={value}}}"
    out, done = [], False
    for p in DEFAULT_PIPELINE:
        if p.split("{")[0] == pass_name and not done:
            out.append(entry)
            done = True
        else:
            out.append(p)
    if not done:  # a pass outside the default pipeline (longest-first): after persistent
        out.insert(out.index("persistent") + 1, entry)
    return ",".join(out)


def pass_param(rng: random.Random, examples) -> tuple[str, str, list[str], bool, str, str | None]:
    """An example compiled with one int pass parameter at a limit value."""
    pass_name, param = rng.choice(int_params())
    value = rng.choice(LIMIT_VALUES)
    s = rng.choice(examples)
    argv = ["compile", "{path}", "--emit", "ptx", f"--passes={_pipeline_with(pass_name, param, value)}"]
    if rng.random() < 0.3:
        argv.append("--target=sm_80")
    return s.name, s.text, argv, not in_i32(value), f"{pass_name}{{{param}={value}}}", None


def annotation(rng: random.Random, examples) -> tuple[str, str, list[str], bool, str, str | None] | None:
    """An example with one annotation argument replaced by a limit value."""
    sites = [(s, m) for s in examples for m in ANNOTATION.finditer(s.text) if m.group(1) in
             {k.split(".")[0] for k in ANNOTATION_DOMAINS}]
    s, m = rng.choice(sites)
    name, args = m.group(1), m.group(2)
    parts = [a.strip() for a in args.split(",")]
    k = rng.randrange(len(parts))
    key, eq, _ = parts[k].partition("=")
    domain_key = f"{name}.{key.strip()}" if eq else name
    value = rng.choice(LIMIT_VALUES)
    parts[k] = f"{key.strip()}={value}" if eq else str(value)
    text = s.text[:m.start(2)] + ", ".join(parts) + s.text[m.end(2):]
    ok = ANNOTATION_DOMAINS.get(domain_key, lambda v: True)
    wrong = not in_i32(value) or not ok(value)
    return s.name, text, ["compile", "{path}", "--emit", "ptx"], wrong, f"@{name}({', '.join(parts)})", None


def define(rng: random.Random, examples) -> tuple[str, str, list[str], bool, str, str | None]:
    """An example with one const at a limit value (-D); wrong when the const feeds an annotation's argument
    and the value is outside i32 or that argument's domain."""
    from tkir.tools.fuzz.corpus import const_params

    s = rng.choice([e for e in examples if const_params(e.text)])
    name = rng.choice(list(const_params(s.text)))
    value = rng.choice(LIMIT_VALUES)
    wrong = False
    for m in ANNOTATION.finditer(s.text):
        for part in m.group(2).split(","):
            key, eq, arg = part.strip().partition("=")
            arg = arg if eq else key
            if arg.strip() == name:
                domain = ANNOTATION_DOMAINS.get(f"{m.group(1)}.{key.strip()}" if eq else m.group(1))
                if domain is not None and (not in_i32(value) or not domain(value)):
                    wrong = True
    return s.name, s.text, ["compile", "{path}", "--emit", "ptx", "-D", f"{name}={value}"], wrong, \
        f"-D {name}={value}", None


def size(rng: random.Random, examples) -> tuple[str, str, list[str], bool, str, str | None]:
    """`tkc run --interpret` or `tkc tune --dry-run` with one problem size that is not a positive i32 (the
    others small): always wrong (a size is a positive i32)."""
    cmd, flag = rng.choice(SIZE_COMMANDS)
    s = rng.choice([e for e in examples if re.search(r"gl<\w+>\[", e.text) and (cmd != "tune" or "@tune(" in e.text)])
    names = sorted(set(re.findall(r"\b([A-Z][A-Z0-9_]*)\b", " ".join(re.findall(r"gl<\w+>\[([^\]]*)\]", s.text)))))
    names = [n for n in names if n not in _consts(s.text)] or ["N"]
    value = rng.choice([v for v in LIMIT_VALUES if not (1 <= v <= I32_MAX)])
    bad = rng.choice(names)
    argv = [cmd, "{path}", flag]
    for n in names:
        argv += ["--size", f"{n}={value if n == bad else 64}"]
    return s.name, s.text, argv, True, f"{cmd} --size {bad}={value}", "--size"


def group_m(rng: random.Random, examples) -> tuple[str, str, list[str], bool, str, str | None]:
    """The removed `--group-m G` (always an error: the parameter is persistent{group_m=G})."""
    s = next(e for e in examples if e.name == "gemm.tk")
    value = rng.choice(LIMIT_VALUES)
    return s.name, s.text, ["compile", "{path}", "--emit", "ptx", "--group-m", str(value)], True, \
        f"--group-m {value}", "--group-m"


def _consts(text: str) -> set[str]:
    from tkir.tools.fuzz.corpus import const_params

    return set(const_params(text))


MAKERS = ((pass_param, 35), (annotation, 25), (define, 25), (size, 10), (group_m, 5))


def limit_input(rng: random.Random, examples) -> tuple[str, str, list[str], bool, str, str | None]:
    """(seed name, text, argv with "{path}", known wrong, what was set, the option an error may name)."""
    maker = rng.choices([m for m, _ in MAKERS], [w for _, w in MAKERS])[0]
    return maker(rng, examples)
