"""A kernel's own pipeline: `@passes(-overlap-mma, plan-occupancy{producer_warps=4}, +stream-k)`.

The edits are written in the pipeline's spelling (tkir.pass_pipeline.parse_pass_edits), applied to the
default pipeline (passes/registry.py apply_pass_edits), recorded on the kernel (`passes`: the edits,
`pass_pipeline`: what runs) and printed by `tkc passes --kernel FILE`. An explicit pipeline
(`--passes`, `passes=`) wins: the edits are checked, not applied, and a KernelPassesWarning says so.
Every mistake is located where it is written in the .tk file.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

import tkir
from tkir.api import PIPELINE_ATTR, KernelPassesWarning, kernel_pipeline
from tkir.cli import main
from tkir.diagnostics import CompileError
from tkir.ir import Loc
from tkir.pass_pipeline import PassEdit, edits_text, parse_pass_edits, parse_pipeline
from tkir.passes.registry import DEFAULT_PIPELINE, apply_pass_edits, load_registry
from tkir.passmanager import PassManager

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = parse_pipeline(",".join(DEFAULT_PIPELINE))
NAMES = [s.name for s in DEFAULT]

# attention's loop (overlap-mma's test kernel, tests/filecheck/passes/overlap-mma.tk): overlap-mma rotates
# it in the default pipeline, which marks the rotated mmas `defer_wait = true`
ATTENTION = """\
kernel att<BQ=64, BKV=64, D=64>(Q: gl<bf16>[N, D], K: gl<bf16>[N, D], V: gl<bf16>[N, D], O: gl<bf16>[N, D])
    grid(N / BQ)
{
    shared q: st<bf16, BQ, D>
    shared k: st<bf16, BKV, D>
    shared v: st<bf16, BKV, D>
    reg o: rt<f32, BQ, D> = 0
    reg m: rv<f32, BQ> = -inf
    reg l: rv<f32, BQ> = 0
    reg s: rt<f32, BQ, BKV>
    q = Q[block.x, 0]
    @stages(2)
    for j in 0 .. N / BKV {
        k = K[j, 0]
        v = V[j, 0]
        s = q @ k.T
        let m_new = max(m, row_max(s))
        let p = exp2(s - m_new)
        let alpha = exp2(m - m_new)
        l = l * alpha + row_sum(p)
        o *= alpha
        o += bf16(p) @ v
        m = m_new
    }
    o /= l
    O[block.x, 0] = bf16(o)
}
"""
COPY = """\
kernel copy(X: gl<bf16>[N, 64], Y: gl<bf16>[N, 64]) grid(N / 16) {
    reg x: rt<bf16, 16, 64> = X[block.x, 0]
    Y[block.x, 0] = x
}
"""


def _write(tmp_path: Path, annotation: str, body: str = COPY, name: str = "k.tk") -> Path:
    path = tmp_path / name
    path.write_text(annotation + "\n" + body if annotation else body)
    return path


def _edits(text: str) -> list[PassEdit]:
    return parse_pass_edits(text)


def _names(specs: list) -> list[str]:
    return [s.name for s in specs]


# --- the text: parse_pass_edits ------------------------------------------------------------------------

def test_edits_parse_in_the_pipeline_spelling_and_print_back() -> None:
    edits = _edits("-overlap-mma, plan-occupancy{producer_warps=4 stages=2}, +stream-k{min_iters=4}")
    assert [(e.action, e.spec.name, e.spec.params) for e in edits] == [
        ("remove", "overlap-mma", {}), ("set", "plan-occupancy", {"producer_warps": "4", "stages": "2"}),
        ("add", "stream-k", {"min_iters": "4"})]
    text = edits_text(edits)
    assert text == "-overlap-mma,plan-occupancy{producer_warps=4 stages=2},+stream-k{min_iters=4}"
    assert [(e.action, e.spec.name, e.spec.params) for e in parse_pass_edits(text)] == \
        [(e.action, e.spec.name, e.spec.params) for e in edits]


def test_edits_are_located_in_the_source_across_lines() -> None:
    source = "// a kernel\n@passes(-overlap-mma,\n        plan-occupancy{producer_warps=4})\n"
    edits = parse_pass_edits("-overlap-mma,\n        plan-occupancy{producer_warps=4}", Loc("k.tk", 2, 9), source)
    assert edits[0].spec.loc() == Loc("k.tk", 2, 10)  # the name, after its sign
    assert edits[1].spec.loc() == Loc("k.tk", 3, 9)
    assert edits[1].spec.loc("producer_warps") == Loc("k.tk", 3, 24)


@pytest.mark.parametrize("text, col, message", [
    ("", 9, "no pass edits"),
    ("overlap-mma", 9, "'overlap-mma' alone changes nothing"),
    ("-overlap-mma{x=1}", 22, "removes the pass: it takes no parameters"),
    ("+", 9, "expected a pass name after '+'"),
    ("-a,,b", 12, "empty pass name"),
    ("-a{x=1", 11, "never closed"),
])
def test_a_malformed_edit_is_a_located_error(text: str, col: int, message: str) -> None:
    source = f"@passes({text})\n"
    with pytest.raises(CompileError) as e:
        parse_pass_edits(text, Loc("k.tk", 1, 9), source)
    assert (e.value.loc.file, e.value.loc.line, e.value.loc.col) == ("k.tk", 1, col)
    assert message in e.value.message
    assert e.value.format().startswith(f"k.tk:1:{col}: error: ")


# --- applying them: apply_pass_edits -------------------------------------------------------------------

def test_remove_set_and_add() -> None:
    registry = load_registry()
    out = apply_pass_edits(DEFAULT, _edits("-overlap-mma,persistent{group_m=4},+longest-first"), registry)
    assert "overlap-mma" not in _names(out)
    assert _names(out) == [n for n in NAMES if n != "overlap-mma"][:NAMES.index("persistent") + 1] + \
        ["longest-first"] + [n for n in NAMES if n != "overlap-mma"][NAMES.index("persistent") + 1:]
    assert next(s for s in out if s.name == "persistent").params == {"group_m": "4"}
    # the pipeline is otherwise untouched: same entries, same parameters
    assert [str(s) for s in out if s.name not in ("persistent", "longest-first")] == \
        [str(s) for s in DEFAULT if s.name not in ("persistent", "overlap-mma")]


def test_plus_switches_on_an_opt_in_entry_in_its_place() -> None:
    registry = load_registry()
    out = apply_pass_edits(DEFAULT, _edits("+stream-k{min_iters=4}"), registry)
    assert _names(out) == NAMES
    assert next(s for s in out if s.name == "stream-k").params == {"min_iters": "4"}  # opt_in dropped
    kept = apply_pass_edits(DEFAULT, _edits("stream-k{min_iters=4}"), registry)  # set: still opt-in
    assert next(s for s in kept if s.name == "stream-k").params == {"opt_in": "true", "min_iters": "4"}
    assert NAMES.count("canonicalize") == 2  # a pass the pipeline runs twice is removed from both places
    assert "canonicalize" not in _names(apply_pass_edits(DEFAULT, _edits("-canonicalize"), registry))


@pytest.mark.parametrize("text, message, hint", [
    ("-overlap-mmma", "unknown pass 'overlap-mmma'", "known passes: bank-conflicts, cache-policy"),
    ("plan-occupancy{producer_warps=x}", "parameter 'producer_warps' of pass 'plan-occupancy' is an int, not 'x'",
     "producer_warps (int"),
    ("plan-occupancy{warps=4}", "unknown parameter 'warps' of pass 'plan-occupancy'", "known parameters"),
    ("-infer-layouts", "'-infer-layouts' removes a pass that the backend needs", "passes a kernel may remove:"),
    ("-plan-occupancy", "removes a pass that pipeline and pipeline-cp-async need", "passes a kernel may remove:"),
    ("-longest-first", "the pipeline does not run longest-first", "the pipeline: canonicalize"),
    ("longest-first{move_last=true}", "the pipeline does not run longest-first", "+longest-first{move_last=true}"),
    ("+canonicalize", "the pipeline runs canonicalize already", "canonicalize{key=value}"),
    ("+verify", "'+verify': it has no place in the default pipeline", "+longest-first, +multicast and the opt-in"),
    ("-overlap-mma,-overlap-mma", "the pipeline does not run overlap-mma", "the pipeline:"),
])
def test_a_bad_edit_is_located_and_names_what_could_be_named(tmp_path: Path, text: str, message: str,
                                                              hint: str) -> None:
    path = _write(tmp_path, f"@passes({text})")
    with pytest.raises(CompileError) as e:
        tkir.compile(str(path))
    err = e.value
    assert err.loc is not None and err.loc.file == str(path) and err.loc.line == 1
    assert message in err.message and hint in (err.hint or "")
    shown = err.format().splitlines()
    assert shown[0].startswith(f"{path}:1:{err.loc.col}: error: ") and shown[1] == f"@passes({text})"
    assert shown[2].index("^") == err.loc.col - 1 and 9 <= err.loc.col <= 8 + len(text)


def test_the_pipeline_runs_after_the_removal_that_leaves_a_required_pass_with_its_user_gone() -> None:
    """Removing the user first frees what it needed: -pipeline,-pipeline-cp-async,-plan-occupancy."""
    out = apply_pass_edits(DEFAULT, _edits("-pipeline,-pipeline-cp-async,-plan-occupancy"), load_registry())
    assert not {"pipeline", "pipeline-cp-async", "plan-occupancy"} & set(_names(out))


# --- the kernel: tkir.compile, the IR, the CLI ---------------------------------------------------------

def test_the_kernel_runs_its_pipeline_and_says_so_in_the_ir(tmp_path: Path) -> None:
    plain = tkir.compile(str(_write(tmp_path, "", ATTENTION, "plain.tk")))
    edited = tkir.compile(str(_write(tmp_path, "@passes(-overlap-mma)", ATTENTION, "edited.tk")))
    assert "overlap-mma" in plain.pipeline and "overlap-mma" not in edited.pipeline
    assert "defer_wait = true" in plain.ir and "defer_wait = true" not in edited.ir
    with pytest.raises(KeyError, match="pass 'overlap-mma' did not run"):
        edited.ir_after("overlap-mma")
    kernel = edited.module.kernel
    assert kernel.attrs["passes"] == "-overlap-mma"
    assert kernel.attrs[PIPELINE_ATTR] == edited.pipeline_spec == ",".join(
        e for e in DEFAULT_PIPELINE if e != "overlap-mma")
    assert "passes" not in plain.module.kernel.attrs and PIPELINE_ATTR not in plain.module.kernel.attrs
    # the attribute is in the IR from the first pass on
    assert f'{PIPELINE_ATTR} = "' in edited.ir_after("canonicalize")


def test_edits_may_span_lines_with_comments(tmp_path: Path) -> None:
    path = _write(tmp_path, "@passes(-overlap-mma,        // its rotation measured slower here\n"
                            "        persistent{group_m=x})  // a bad value, located on its line")
    with pytest.raises(CompileError) as e:
        tkir.compile(str(path))
    assert (e.value.loc.line, e.value.loc.col) == (2, 20) and "'group_m' of pass 'persistent' is an int" in e.value.message
    path.write_text(path.read_text().replace("group_m=x", "group_m=4"))
    assert tkir.compile(str(path)).module.kernel.attrs["passes"] == "-overlap-mma,persistent{group_m=4}"


def test_parameters_reach_the_pass(tmp_path: Path) -> None:
    k = tkir.compile(str(_write(tmp_path, "@passes(persistent{group_m=1}, infer-layouts{max_vec_bytes=4})")))
    assert "persistent{group_m=1}" in k.pipeline_spec and "infer-layouts{max_vec_bytes=4}" in k.pipeline_spec
    assert "vec = 2}" in k.ir and "vec = 8" not in k.ir  # bf16 rows in 4-byte pieces, not 16-byte ones
    assert "vec = 8}" in tkir.compile(str(_write(tmp_path, "", COPY, "plain.tk"))).ir


def test_an_explicit_pipeline_wins_with_a_warning(tmp_path: Path) -> None:
    path = _write(tmp_path, "@passes(-overlap-mma)", ATTENTION)
    explicit = ",".join(DEFAULT_PIPELINE)
    with pytest.warns(KernelPassesWarning, match=rf"{path}:1:10: the kernel's @passes\(-overlap-mma\) is not "
                                                 "applied: an explicit pipeline"):
        k = tkir.compile(str(path), passes=explicit)
    assert "overlap-mma" in k.pipeline and "defer_wait = true" in k.ir
    assert k.module.kernel.attrs[PIPELINE_ATTR] == explicit  # what ran, in the IR
    bad = _write(tmp_path, "@passes(-bogus)", COPY, "bad.tk")  # checked even when not applied
    with pytest.raises(CompileError, match="unknown pass 'bogus'"):
        tkir.compile(str(bad), passes=explicit)
    with warnings.catch_warnings():  # no edits, no warning
        warnings.simplefilter("error")
        tkir.compile(str(_write(tmp_path, "", COPY, "plain.tk")), passes=explicit)


def test_options_still_apply_with_the_edits(tmp_path: Path) -> None:
    """--target, --no-tma and --swizzle are not pipeline: they combine with the kernel's edits."""
    path = _write(tmp_path, "@passes(-readonly-loads)")
    k = tkir.compile(str(path), target="sm_80", no_tma=True)
    assert k.options.target == "sm_80" and "readonly-loads" not in k.pipeline
    plain = tkir.compile(str(_write(tmp_path, "", COPY, "plain.tk")), target="sm_80", no_tma=True)
    assert "readonly = true" not in k.ir and "readonly = true" in plain.ir


def test_the_ir_round_trips_and_recompiles_with_its_edits(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "@passes(-overlap-mma, persistent{group_m=4})")
    tkir_file = tmp_path / "k.tkir"
    assert main(["compile", str(path), "-o", str(tkir_file)]) == 0
    text = tkir_file.read_text()
    assert 'passes = "-overlap-mma,persistent{group_m=4}"' in text and f'{PIPELINE_ATTR} = "' in text
    assert main(["opt", str(tkir_file)]) == 0  # tkc opt: text in, the same text out
    assert capsys.readouterr().out == text
    again = tkir.compile(str(tkir_file))  # the .tkir's kernel: the default pipeline with its edits
    assert "overlap-mma" not in again.pipeline and "persistent{group_m=4}" in again.pipeline_spec
    assert kernel_pipeline(str(tkir_file)) == kernel_pipeline(str(path))


def test_tkc_passes_kernel_prints_the_kernels_pipeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "@passes(-overlap-mma)")
    assert main(["passes", "--kernel", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [f"kernel {path}:", "  @passes(-overlap-mma)",
                   "  --passes=" + ",".join(e for e in DEFAULT_PIPELINE if e != "overlap-mma")]
    assert main(["passes", "--kernel", str(ROOT / "examples" / "gemm.tk")]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == ["  no @passes: the default pipeline",
                                                        "  --passes=" + ",".join(DEFAULT_PIPELINE)]
    # the spec it prints is the one the pass manager builds, and what compile runs
    spec = kernel_pipeline(str(path))[1]
    assert spec == PassManager(load_registry(), spec).spec() == tkir.compile(str(path)).pipeline_spec


def test_tkc_reports_a_bad_edit_with_its_place(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, "@passes(-overlap-mma, plan-occupancy{producer_warps=x})")
    for argv in (["compile", str(path)], ["passes", "--kernel", str(path)]):
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"{path}:1:38: error: parameter 'producer_warps' of pass 'plan-occupancy' is an int")


def test_passes_applies_to_the_kernel_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "k.tk"
    path.write_text("kernel copy(X: gl<bf16>[N, 64], Y: gl<bf16>[N, 64]) grid(N / 16) {\n"
                    "    @passes(-overlap-mma)\n    reg x: rt<bf16, 16, 64> = X[block.x, 0]\n    Y[block.x, 0] = x\n}\n")
    with pytest.raises(CompileError, match="'@passes' applies to the kernel, not here"):
        tkir.compile(str(path))
    _write(tmp_path, "@passes")
    with pytest.raises(CompileError, match="'@passes' takes pass edits in parentheses"):
        tkir.compile(str(tmp_path / "k.tk"))


# --- what sees it: the compile cache key, the tuner ----------------------------------------------------

def test_the_compile_cache_and_the_tuner_see_the_edits(tmp_path: Path) -> None:
    from tkir.api import _cache_key
    from tkir.tools import tune

    space = "@tune(ROWS=[16, 32])\n"
    body = COPY.replace("kernel copy(", "kernel copy<ROWS=16>(").replace("16, 64>", "ROWS, 64>") \
        .replace("N / 16", "N / ROWS")
    plain = _write(tmp_path, space.strip(), body, "plain.tk")
    edited = _write(tmp_path, space + "@passes(-readonly-loads)", body, "edited.tk")
    kp, ke = tkir.compile(str(plain)), tkir.compile(str(edited))
    assert _cache_key(kp) != _cache_key(ke)  # the key reads the IR, which holds the edits and what ran
    assert tune.cache_key(str(plain), {"N": 64}, fixed=None, target="sm_90a", passes=None, device="x") != \
        tune.cache_key(str(edited), {"N": 64}, fixed=None, target="sm_90a", passes=None, device="x")
    tuned = tune.TunedKernel(str(edited))
    assert "readonly-loads" not in tuned.compiled({"ROWS": 32}).pipeline  # tkir.autotune's compiles
    # the tuner's own compile of a point (PTX and launch hashed): ld.global without readonly-loads' .nc
    points = [tune.check_point(str(p), {"ROWS": 32}, {"N": 64}, "sm_90a", None) for p in (plain, edited)]
    assert points[0]["code"] != points[1]["code"]
    assert ".nc" not in tkir.compile(str(edited), ROWS=32).asm["ptx"]


def test_auto_consts_are_chosen_under_the_kernels_pipeline(tmp_path: Path) -> None:
    """`auto` consts are chosen by the pipeline up to plan-occupancy (tkir/tools/auto_consts.py): the
    kernel's edited one, whose trial compiles carry the edits too."""
    source = (ROOT / "examples" / "attention_fwd.tk").read_text()
    path = _write(tmp_path, "@passes(-overlap-mma, persistent{group_m=4})", source)
    k = tkir.compile(str(path), D=64, CAUSAL=0, BQ="auto", BKV="auto")
    assert k.module.kernel.attrs["auto"] == {"BQ": 192, "BKV": 128}  # as tests/tools/test_auto_consts.py
    assert "overlap-mma" not in k.pipeline and "persistent{group_m=4}" in k.pipeline_spec


# --- the caller's edits: tkir.compile(pass_edits=), tkc --pass-edits ------------------------------------

def test_callers_edits_apply_after_the_kernels(tmp_path: Path) -> None:
    """An ablation names what it changes: the caller's edits go on top of the kernel's own, and the
    banner command line says so."""
    path = str(_write(tmp_path, "@passes(-overlap-mma)", ATTENTION))
    k = tkir.compile(path, pass_edits="-split-masks, persistent{group_m=4}")
    assert "overlap-mma" not in k.pipeline and "split-masks" not in k.pipeline  # the kernel's and the caller's
    assert "persistent{group_m=4}" in k.pipeline_spec
    assert k.pass_edits == "-split-masks,persistent{group_m=4}"
    assert "--pass-edits='-split-masks,persistent{group_m=4}'" in k._provenance()
    plain = tkir.compile(path)
    assert "split-masks" in plain.pipeline and plain.pass_edits == "" and "--pass-edits" not in plain._provenance()


def test_callers_edits_on_a_kernel_without_its_own(tmp_path: Path) -> None:
    path = str(ROOT / "examples" / "user" / "layernorm_bwd.tk")
    on, off = tkir.compile(path), tkir.compile(path, pass_edits="-coarsen-rows")
    assert on.module.kernel.attrs["grid"] != ["N"] and off.module.kernel.attrs["grid"] == ["N"]
    assert "coarsen-rows" in on.pipeline and "coarsen-rows" not in off.pipeline


@pytest.mark.parametrize("edits, message", [
    ("-bogus", "<passes>:1:2: error: @passes: unknown pass 'bogus'"),
    ("split-masks", "<passes>:1:1: error: 'split-masks' alone changes nothing"),
    ("-plan-occupancy{x=1}", "'-plan-occupancy' removes the pass: it takes no parameters"),
])
def test_a_bad_callers_edit_is_an_error_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                         edits: str, message: str) -> None:
    out = tmp_path / "k.ptx"
    assert main(["compile", str(_write(tmp_path, "", COPY)), f"--pass-edits={edits}", "--emit", "ptx",
                 "-o", str(out)]) != 0
    assert message in capsys.readouterr().err and not out.exists()


def test_tkc_pass_edits_reaches_the_compile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "k.tkir"
    src = str(ROOT / "examples" / "user" / "layernorm_bwd.tk")
    assert main(["compile", src, "--pass-edits=coarsen-rows{blocks_per_sm=4}", "--emit", "tkir", "-o", str(out)]) == 0
    assert 'grid = ["min(N, NUM_SMS * 4)"]' in out.read_text()
    assert main(["opt", str(out), "--pass-edits=-coarsen-rows"]) != 0
    assert "tkc opt does not run" in capsys.readouterr().err
