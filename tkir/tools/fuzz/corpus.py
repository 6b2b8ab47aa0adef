"""The fuzzer's seeds: the example kernels, the bad inputs of tests/frontend/bad, and the IR of every example
after every pass of the default pipeline (for a few targets and switches), each with the passes that
follow it.

IR dumps come from the real pipeline (`tkir.compile` with `--print-after-all`'s config), so every
dump is text that `tkc opt` accepts; mutated, it tests the IR parser, the verifier, the passes and the
backend on IR that nearly makes sense.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]  # tkir/tools/fuzz/ -> the repository
EXAMPLES = ROOT / "examples"
BAD = ROOT / "tests" / "frontend" / "bad"
# extra compiles of the examples whose dumps are seeds too: (-D constants, target, switches)
DUMP_CONFIGS: tuple[tuple[dict[str, int], str, tuple[str, ...]], ...] = (
    ({}, "sm_90a", ()),
    ({}, "sm_80", ()),
    ({}, "sm_90a", ("--no-tma",)),
)
# (a name with a `/` is a path from the repository: rmsnorm's one-row split needs the schedule knobs of its
# pass-test copy, tests/data/rows/rmsnorm.tk)
EXTRA_DUMPS = (("attention_fwd.tk", {"D": 64, "CAUSAL": 1}),
               ("tests/data/rows/rmsnorm.tk", {"ROWS": 1, "WG": 2, "D": 8192, "DC": 8192}),
               ("transpose.tk", {"SHARED_T": 0}), ("linear.tk", {"ACT": 1}),
               # the stream-K and persistent pipelines: their rings seed the protocol edits too (SKI = 16, the
               # split that verify_pipeline's stream-K sizes reach: at the auto choice's 32 they split no tile)
               ("gemm.tk", {"SK": 1, "SKI": 16}), ("attention_fwd.tk", {"PERSIST": 1}))
# sm_80 dumps beyond the defaults: attention with 32-row warps and a held stage, so the IR of
# the rotated mma.sync loop (`cp_hold = 1`, overlap-mma on sm_80) seeds the mutants too
EXTRA_SM80_DUMPS = (("attention_fwd.tk", {"BQ": 128, "BKV": 32, "STAGES": 3}),)
CONST_PARAM = re.compile(r"([A-Za-z_]\w*)\s*=\s*(-?[\d.eE+-]+)")
HEADER_SPLIT = re.compile(r"^// -----// IR Dump After (\S+) //----- //\n", re.MULTILINE)


@dataclass(frozen=True)
class Seed:
    name: str
    text: str


@dataclass(frozen=True)
class Dump:
    """The IR after pass number `index` of `pipeline` for one compile of an example."""

    name: str
    text: str
    pipeline: tuple[str, ...]
    index: int
    target: str
    switches: tuple[str, ...]

    @property
    def rest(self) -> tuple[str, ...]:
        return self.pipeline[self.index + 1:]


@cache
def examples() -> tuple[Seed, ...]:
    return tuple(Seed(p.name, p.read_text()) for p in sorted(EXAMPLES.glob("*.tk")))


@cache
def bad_inputs() -> tuple[Seed, ...]:
    return tuple(Seed(p.name, p.read_text()) for p in sorted(BAD.glob("*.tk")))


def const_params(text: str) -> dict[str, str]:
    """The `<NAME=value, ...>` of a kernel header, as written."""
    m = re.search(r"kernel\s+\w+\s*<([^>]*)>", text)
    return dict(CONST_PARAM.findall(m.group(1))) if m else {}


@cache
def dumps() -> tuple[Dump, ...]:
    """Every example's IR after every pass, for each of DUMP_CONFIGS, EXTRA_DUMPS and EXTRA_SM80_DUMPS."""
    jobs = [(p.name, {}, target, sw) for p in sorted(EXAMPLES.glob("*.tk")) for _, target, sw in DUMP_CONFIGS]
    jobs += [(name, consts, "sm_90a", ()) for name, consts in EXTRA_DUMPS]
    jobs += [(name, consts, "sm_80", ()) for name, consts in EXTRA_SM80_DUMPS]
    out: list[Dump] = []
    for name, consts, target, switches in jobs:
        out += _dumps_of(name, consts, target, switches)
    return tuple(out)


def _dumps_of(name: str, consts: dict[str, int], target: str, switches: tuple[str, ...]) -> list[Dump]:
    from tkir import api
    from tkir.diagnostics import TkirError
    from tkir.passes.registry import DEFAULT_PIPELINE
    from tkir.passmanager import PipelineConfig

    buf = io.StringIO()
    path = ROOT / name if "/" in name else EXAMPLES / name
    try:
        api.compile(str(path), target=target, no_tma="--no-tma" in switches,
                     config=PipelineConfig(print_after_all=True), out=buf, **consts)
    except TkirError:
        return []  # an example a target does not support: no seeds from it
    parts = HEADER_SPLIT.split(buf.getvalue())[1:]
    tag = ",".join([target, *switches, *(f"{k}={v}" for k, v in consts.items())])
    pipeline = tuple(DEFAULT_PIPELINE)
    return [Dump(f"{name}[{tag}]@{i}:{parts[2 * i]}", parts[2 * i + 1], pipeline, i, target, switches)
            for i in range(len(parts) // 2)]
