"""One fuzz input per (seed, index): a text, the file suffix it is saved with, and the `tkc` command line.

The input depends only on (seed, index), never on the worker that makes it, so a run is reproducible
with any number of workers and one failing input is rebuilt with `scripts/fuzz.py --only INDEX`.

Kinds (KINDS gives their weights):
  tk-mutant   a seed .tk (example, bad input, generated kernel) after 1-3 mutations (tkir.tools.fuzz.mutate);
  tk-splice   an example with lines of other examples spliced in;
  tk-grammar  a random derivation of the grammar (tkir.tools.fuzz.grammar_gen);
  tk-kernel   a typed random kernel (tkir.tools.fuzz.kernel_gen), compiled as is;
  tk-defines  an example with 1-2 `-D` constants set to boundary, nearby or unknown values;
  ir-mutant   the IR of an example after some pass, mutated, through the passes that follow (tkc opt, or
              tkc compile FILE.tkir --emit ptx);
  ir-dump     the same without mutation (the control: these must all compile);
  ir-protocol a pipelined IR dump with one protocol edit (tkir.tools.fuzz.protocol): known wrong, must be refused;
  param-limits a pass parameter, annotation argument, const, size or --group-m at the limits of i32
              (tkir.tools.fuzz.limits): known wrong when outside i32 or the documented domain.
A known-wrong input (meta["wrong"]) that exits 0 is an `accepted-wrong` (tkir.tools.fuzz.oracle).
Stages: .tk inputs are compiled with `--emit ptx` mostly (parse, front end, passes, LLVM, PTX), some with
`--emit tkir`/`llvm`/`launch`; one input in PTXAS_SHARE of those that ask for PTX asks for `--emit cubin`
instead, so a fixed share of the PTX tkir accepts goes through ptxas; some use `--target sm_80`,
`--swizzle=none`, `--no-tma`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tkir.tools.fuzz import corpus, grammar_gen, kernel_gen, limits, mutate, protocol

KINDS = (("tk-mutant", 24), ("tk-splice", 5), ("tk-grammar", 7), ("tk-kernel", 16), ("tk-defines", 8),
         ("ir-mutant", 24), ("ir-dump", 3), ("ir-protocol", 7), ("param-limits", 6))
TK_EMITS = (("ptx", 70), ("tkir", 18), ("llvm", 6), ("launch", 6))
PTXAS_SHARE = 5  # one input in this many of those that ask for PTX asks for a cubin (ptxas: ~0.1-1 s an input)
DEFINE_VALUES = ("0", "1", "-1", "2", "3", "7", "8", "16", "24", "32", "48", "64", "96", "128", "192", "256", "512",
                 "1024", "4096", "65536", "2147483648", "9223372036854775808", "0x40", "1.5", "1e400", "-1e400",
                 "1e-5", "nan", "inf")
PATH = "{path}"  # replaced by the input file's path in the command line


@dataclass
class FuzzInput:
    index: int
    kind: str
    text: str
    suffix: str
    argv: list[str]  # tkc's arguments, PATH where the file goes
    note: str = ""   # how it was made (seed name, mutations), for the failure report
    meta: dict = field(default_factory=dict)

    def command(self, path: str) -> list[str]:
        return [path if a == PATH else a for a in self.argv]


def _rng(seed: int, index: int) -> random.Random:
    return random.Random(f"tkir-fuzz:{seed}:{index}")


def _pick(rng: random.Random, table: tuple[tuple[str, int], ...]) -> str:
    return rng.choices([k for k, _ in table], [w for _, w in table])[0]


def _ptx_or_cubin(index: int) -> str:
    """`ptx`, or `cubin` for one index in PTXAS_SHARE: the PTX then goes through ptxas too."""
    return "cubin" if index % PTXAS_SHARE == PTXAS_SHARE - 1 else "ptx"


def _tk_flags(rng: random.Random, index: int) -> list[str]:
    emit = _pick(rng, TK_EMITS)
    flags = ["--emit", _ptx_or_cubin(index) if emit == "ptx" else emit]
    r = rng.random()
    if r < 0.10:
        flags.append("--target=sm_80")
    elif r < 0.15:
        flags.append("--swizzle=none")
    elif r < 0.20:
        flags.append("--no-tma")
    return flags


def make_input(seed: int, index: int) -> FuzzInput:
    rng = _rng(seed, index)
    kind = _pick(rng, KINDS)
    return BUILDERS[kind](rng, seed, index)


def _donors() -> list[str]:
    return [s.text for s in corpus.examples()]


def _tk(index: int, kind: str, text: str, rng: random.Random, note: str, defines: list[str] = ()) -> FuzzInput:
    argv = ["compile", PATH, *_tk_flags(rng, index)]
    for d in defines:
        argv += ["-D", d]
    return FuzzInput(index, kind, text, ".tk", argv, note)


def _tk_mutant(rng: random.Random, seed: int, index: int) -> FuzzInput:
    r = rng.random()
    if r < 0.55:
        s = rng.choice(corpus.examples())
        name, text = s.name, s.text
    elif r < 0.75:
        s = rng.choice(corpus.bad_inputs())
        name, text = s.name, s.text
    else:
        name, text = "kernel_gen", kernel_gen.generate(rng)
    text, applied = mutate.mutate(text, rng, _donors())
    return _tk(index, "tk-mutant", text, rng, f"{name} + {', '.join(applied)}")


def _tk_splice(rng: random.Random, seed: int, index: int) -> FuzzInput:
    s = rng.choice(corpus.examples())
    text, applied = s.text, []
    for _ in range(rng.randint(1, 3)):
        text = mutate.splice_line(text, rng, _donors()) or text
        applied.append("splice_line")
    return _tk(index, "tk-splice", text, rng, f"{s.name} + {', '.join(applied)}")


def _tk_grammar(rng: random.Random, seed: int, index: int) -> FuzzInput:
    return _tk(index, "tk-grammar", grammar_gen.generate(rng), rng, "grammar_gen")


def _tk_kernel(rng: random.Random, seed: int, index: int) -> FuzzInput:
    return _tk(index, "tk-kernel", kernel_gen.generate(rng), rng, "kernel_gen")


def _tk_defines(rng: random.Random, seed: int, index: int) -> FuzzInput:
    s = rng.choice(corpus.examples())
    names = list(corpus.const_params(s.text)) or ["X"]
    defines, chosen = [], set()
    for _ in range(rng.randint(1, 2)):
        name = rng.choice(names) if rng.random() < 0.95 else rng.choice(("UNKNOWN", "M", "block"))
        if name in chosen:  # a const given twice is a usage error of its own (tkc: "-D NAME is given twice")
            continue
        chosen.add(name)
        defines.append(f"{name}={rng.choice(DEFINE_VALUES)}")
    return _tk(index, "tk-defines", s.text, rng, f"{s.name} -D {' -D '.join(defines)}", defines)


def _ir(rng: random.Random, index: int, kind: str, mutated: bool) -> FuzzInput:
    d = rng.choice(corpus.dumps())
    text, applied = d.text, []
    if mutated:
        donors = [x.text for x in corpus.dumps() if x.name.split("@")[0] == d.name.split("@")[0]]
        text, applied = mutate.mutate(text, rng, donors)
    flags = [f"--target={d.target}", *d.switches]
    if rng.random() < 0.5:
        argv = ["opt", PATH, *flags] + ([f"--passes={','.join(d.rest)}"] if d.rest else [])
    else:
        argv = ["compile", PATH, *flags, f"--passes={','.join(d.rest) or 'verify'}", "--emit", _ptx_or_cubin(index)]
    note = d.name + (f" + {', '.join(applied)}" if applied else "")
    return FuzzInput(index, kind, text, ".tkir", argv, note)


def _ir_mutant(rng: random.Random, seed: int, index: int) -> FuzzInput:
    return _ir(rng, index, "ir-mutant", True)


def _ir_dump(rng: random.Random, seed: int, index: int) -> FuzzInput:
    return _ir(rng, index, "ir-dump", False)


def _ir_protocol(rng: random.Random, seed: int, index: int) -> FuzzInput:
    pipelined = [d for d in corpus.dumps() if protocol.has_pipeline(d.text)]
    for _ in range(20):
        d = rng.choice(pipelined)
        edited = protocol.edit(d.text, rng)
        if edited is not None:
            break
    else:  # no dump took an edit (cannot happen with the corpus's pipelines): a plain mutant
        return _ir(rng, index, "ir-protocol", True)
    text, name = edited
    flags = [f"--target={d.target}", *d.switches]
    if rng.random() < 0.5:
        argv = ["opt", PATH, *flags] + ([f"--passes={','.join(d.rest)}"] if d.rest else [])
    else:
        argv = ["compile", PATH, *flags, f"--passes={','.join(d.rest) or 'verify'}", "--emit", _ptx_or_cubin(index)]
    return FuzzInput(index, "ir-protocol", text, ".tkir", argv, f"{d.name} + {name}", {"wrong": True})


def _param_limits(rng: random.Random, seed: int, index: int) -> FuzzInput:
    name, text, argv, wrong, what, option = limits.limit_input(rng, corpus.examples())
    argv = [PATH if a == "{path}" else a for a in argv]
    if argv[0] == "compile" and "--emit" in argv and argv[argv.index("--emit") + 1] == "ptx":
        argv[argv.index("--emit") + 1] = _ptx_or_cubin(index)
    meta = {"wrong": wrong, **({"option": option} if option else {})}
    return FuzzInput(index, "param-limits", text, ".tk", argv, f"{name} {what}" + (" (wrong)" if wrong else ""),
                     meta)


BUILDERS = {"tk-mutant": _tk_mutant, "tk-splice": _tk_splice, "tk-grammar": _tk_grammar, "tk-kernel": _tk_kernel,
            "tk-defines": _tk_defines, "ir-mutant": _ir_mutant, "ir-dump": _ir_dump,
            "ir-protocol": _ir_protocol, "param-limits": _param_limits}
