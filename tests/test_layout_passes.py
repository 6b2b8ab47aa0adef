"""The layout passes on every example: the IR still round-trips and still computes the reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from tkir.api import build_module
from tkir.examples import check_interpreted, load_companion
from tkir.parser import parse_module
from tkir.passes.registry import load_registry
from tkir.passmanager import Options, PassManager
from tkir.printer import print_module

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
LAYOUT_PASSES = ["canonicalize", "infer-layouts", "select-swizzle", "bank-conflicts"]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name", ["gemm", "attention_fwd", "layernorm", "softmax", "rotary"])
def test_layouts_round_trip_and_keep_semantics(name: str, target: str) -> None:
    path = str(EXAMPLES / f"{name}.tk")
    module = build_module(path)
    PassManager(load_registry(), LAYOUT_PASSES).run(module, Options(target=target))
    text = print_module(module)
    assert print_module(parse_module(text)) == text
    assert "layout={kind = " in text and "swizzle=" in text or name not in ("gemm", "attention_fwd")
    companion = load_companion(path)
    results = check_interpreted(module, companion, dict(companion.CHECK_SIZES[0]), {}, seed=0)
    assert results and all(r.ok for r in results), [(r.output, r.rel_err) for r in results]


def test_passes_are_idempotent() -> None:
    module = build_module(str(EXAMPLES / "attention_fwd.tk"))
    pm = PassManager(load_registry(), LAYOUT_PASSES)
    pm.run(module, Options())
    once = print_module(module)
    PassManager(load_registry(), LAYOUT_PASSES[1:]).run(module, Options())
    assert print_module(module).count("tk.convert_layout") == once.count("tk.convert_layout")
