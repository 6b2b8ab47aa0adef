"""The facts passes record (tkir/facts.py, tkir/layout.py's RegisterLayout): attribute round trips,
clear errors on malformed attributes, and byte-identical IR text through parse -> print."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tkir
from tkir.backend.launch import kernel_params
from tkir.backend.lower_llvm import lower_kernel
from tkir.diagnostics import CompileError
from tkir.facts import FactError, OccupancyPlan, RegisterBudget, RolePlan, SharedBreakdown
from tkir.layout import COL_VEC_OF, RegisterLayout, layout_of, make_layout
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.types import Ident, TileType, VectorType, format_attr_value

QUICK = settings(max_examples=60, deadline=None)
LAYOUT_KEYS = ["kind", "of", "wg", "warps", "vec", "parts", "warps_n"]  # the order infer-layouts has always printed
PLAN_KEYS = ["stages", "blocks_per_sm", "smem_bytes", "threads", "roles", "budget", "smem"]

# --- strategies: every layout / plan the passes can record -----------------------------------------

counts = st.integers(min_value=1, max_value=16)


@st.composite
def register_layouts(draw: st.DrawFn) -> RegisterLayout:
    kind = draw(st.sampled_from(["wgmma_acc", "wgmma_a", "mma_a", "mma_b", "mma_c", "row", "acc_row_vec",
                                 "row_vec", "col_vec"]))
    if kind in ("wgmma_acc", "wgmma_a"):
        return make_layout(kind, wg=draw(counts))
    if kind == "mma_c":  # whole rows per warp, or a (W/N) x N grid of warps
        warps = draw(counts)
        return make_layout(kind, warps=warps, warps_n=draw(st.sampled_from([n for n in range(1, warps + 1)
                                                                            if warps % n == 0])))
    if kind in ("mma_a", "mma_b", "row_vec"):
        return make_layout(kind, warps=draw(counts))
    if kind == "row":
        return make_layout(kind, warps=draw(counts), vec=draw(counts))
    of = draw(st.sampled_from(COL_VEC_OF)) if kind == "col_vec" else None
    if of == "row":
        return make_layout(kind, of=of, warps=draw(counts), vec=draw(counts))
    split = draw(st.sampled_from(["wg", "warps"]))
    return make_layout(kind, of=of, **{split: draw(counts)})


@st.composite
def occupancy_plans(draw: st.DrawFn) -> OccupancyPlan:
    shape = draw(st.sampled_from(["ws", "compute_wg", "compute_warps"]))
    regs = st.integers(min_value=0, max_value=255)
    if shape == "ws":
        roles = (("producer", RolePlan(draw(regs), warpgroups=1)),
                 ("consumer", RolePlan(draw(regs), warpgroups=draw(counts))))
    elif shape == "compute_wg":
        roles = (("compute", RolePlan(draw(regs), warpgroups=draw(counts))),)
    else:
        roles = (("compute", RolePlan(draw(regs), warps=draw(counts))),)
    small = st.integers(min_value=0, max_value=1 << 18)
    budget = draw(st.none() | st.builds(RegisterBudget, small, small, small, small))
    smem = draw(st.none() | st.builds(SharedBreakdown, small, small, small, small))
    threads = st.none() | st.integers(min_value=1, max_value=32).map(lambda w: 32 * w)  # whole warps, <= 1024
    return OccupancyPlan(stages=draw(counts), roles=roles,
                         blocks_per_sm=draw(st.none() | st.integers(min_value=0, max_value=32)),
                         smem_bytes=draw(st.none() | st.integers(min_value=0, max_value=232_448)),
                         threads=draw(threads), budget=budget, smem=smem)


def _kernel_text(attrs: str, body: str = "") -> str:
    return f'tk.kernel @k {{grid = ["1"]{attrs}}} {{\n{body}}}\n'


# --- register layouts ----------------------------------------------------------------------------


@QUICK
@given(register_layouts())
def test_layout_attr_round_trip(lay: RegisterLayout) -> None:
    attr = lay.to_attr()
    assert RegisterLayout.from_attr(attr) == lay
    keys = list(attr)
    assert keys == [k for k in LAYOUT_KEYS if k in keys]  # printed in the order it always was
    assert isinstance(attr["kind"], Ident)


@QUICK
@given(register_layouts())
def test_layout_survives_ir_text(lay: RegisterLayout) -> None:
    """Printed in a type and parsed back: the same layout, and the same text."""
    text = _kernel_text("", f"  %a = tk.fill {{value = 0.0}} : rt<f32, 64, 64, layout={format_attr_value(lay.to_attr())}>\n")
    module = parse_module(text)
    assert print_module(module) == text
    assert layout_of(module.kernel.body.ops[0].result.type) == lay


def test_layout_attr_is_the_dict_infer_layouts_always_wrote() -> None:
    assert make_layout("wgmma_acc", wg=2).to_attr() == {"kind": Ident("wgmma_acc"), "wg": 2}
    assert list(make_layout("col_vec", of="row", warps=4, vec=8).to_attr().items()) == [
        ("kind", Ident("col_vec")), ("of", Ident("row")), ("warps", 4), ("vec", 8)]


def test_layout_of_types() -> None:
    assert layout_of(TileType("st", "bf16", 64, 64)) is None  # shared tiles have no register layout
    assert layout_of(TileType("rt", "f32", 64, 64)) is None   # before infer-layouts
    t = VectorType("rv", "f32", 64, (("layout", make_layout("acc_row_vec", warps=4).to_attr()),))
    assert layout_of(t) == RegisterLayout("acc_row_vec", warps=4)
    assert layout_of(t).threads == 128 and make_layout("wgmma_acc", wg=2).threads == 256


BAD_LAYOUTS = [
    ("5", "not a {key = value, ...} dict"),
    ("{wg = 1}", "'kind' is missing"),
    ("{kind = 3, wg = 1}", "'kind' must be a layout name"),
    ("{kind = swirl, wg = 1}", "unknown kind 'swirl'"),
    ("{kind = row, warps = 4}", "row needs 'vec'"),
    ("{kind = wgmma_acc, warps = 2}", "wgmma_acc takes 'wg', exactly one"),
    ("{kind = acc_row_vec, wg = 1, warps = 4}", "acc_row_vec takes 'wg' or 'warps', exactly one"),
    ("{kind = wgmma_acc, wg = 0}", "'wg' must be at least 1, not 0"),
    ("{kind = wgmma_acc, wg = true}", "'wg' must be an integer, not true"),
    ("{kind = row_vec, warps = 4, lanes = 2}", "unknown key 'lanes'"),
    ("{kind = col_vec, wg = 1}", "col_vec needs 'of'"),
    ("{kind = col_vec, of = mma_b, warps = 1}", "col_vec of 'mma_b' is not a layout"),
    ("{kind = mma_c, warps = 4, vec = 8}", "'vec' belongs to row"),
    ("{kind = mma_c, warps = 8, warps_n = 3}", "'warps_n' must be 2 or more and divide warps = 8, not 3"),
    ("{kind = mma_c, warps = 8, warps_n = 1}", "'warps_n' must be 2 or more"),
    ("{kind = mma_a, warps = 8, warps_n = 2}", "'warps_n' belongs to mma_c, acc_row_vec and col_vec of mma_c"),
    ("{kind = acc_row_vec, wg = 2, warps_n = 2}", "'warps_n' belongs to mma_c, acc_row_vec and col_vec of mma_c "
                                                  "layouts over warps, not acc_row_vec over warpgroups"),
    ("{kind = col_vec, of = row, warps = 4, vec = 8, warps_n = 2}", "'warps_n' belongs to mma_c"),
]


@pytest.mark.parametrize(("text", "problem"), BAD_LAYOUTS, ids=[t for t, _ in BAD_LAYOUTS])
def test_malformed_layout_is_a_clear_error(text: str, problem: str) -> None:
    module = parse_module(_kernel_text("", f"  %a = tk.fill {{value = 0.0}} : rt<f32, 64, 64, layout={text}>\n"))
    t = module.kernel.body.ops[0].result.type
    with pytest.raises(FactError) as e:
        layout_of(t, module.kernel.loc)
    assert e.value.message.startswith(f"malformed layout {text}: {problem}")
    assert e.value.loc == module.kernel.loc
    assert isinstance(e.value, ValueError)  # callers that count by shape when a layout is unreadable


def test_malformed_layout_in_ir_is_located_by_the_backend(tmp_path: Path) -> None:
    k = tkir.compile("examples/gemm.tk")
    text = k.ir_after(k.pipeline[-1]).replace("layout={kind = wgmma_acc, wg = 2}", "layout={kind = wgmma_acc, warps = 2}")
    assert "warps = 2}" in text
    f = tmp_path / "bad.tkir"
    f.write_text(text)
    module = parse_module(text, str(f))
    with pytest.raises(CompileError) as e:
        lower_kernel(module, kernel_params(module), "sm_90a")
    err = e.value
    assert err.loc is not None and err.loc.file == str(f)
    assert "malformed layout {kind = wgmma_acc, warps = 2}: wgmma_acc takes 'wg'" in err.message
    # the op whose type holds it, or the first op that reads such a value (the staged store's box
    # is computed from its operand's layout, since the verifier's TMA rules)
    line = text.splitlines()[err.loc.line - 1]
    bad = {ln.split("=")[0].strip() for ln in text.splitlines() if "warps = 2}" in ln and " = " in ln}
    assert "warps = 2" in line or any(re.search(re.escape(v) + r"\b", line) for v in bad)


# --- the occupancy plan --------------------------------------------------------------------------


@QUICK
@given(occupancy_plans())
def test_plan_attr_round_trip(plan: OccupancyPlan) -> None:
    attr = plan.to_attr()
    assert OccupancyPlan.from_attr(attr) == plan
    keys = list(attr)
    assert keys == [k for k in PLAN_KEYS if k in keys]


@QUICK
@given(occupancy_plans())
def test_plan_survives_ir_text(plan: OccupancyPlan) -> None:
    text = _kernel_text(f", occupancy = {format_attr_value(plan.to_attr())}")
    module = parse_module(text)
    assert print_module(module) == text
    assert OccupancyPlan.of(module.kernel) == plan


def test_plan_of_a_kernel_without_one_is_none() -> None:
    assert OccupancyPlan.of(parse_module(_kernel_text("")).kernel) is None


def test_role_threads_and_lookup() -> None:
    plan = OccupancyPlan(stages=4, roles=(("producer", RolePlan(40, warpgroups=1)),
                                          ("consumer", RolePlan(232, warpgroups=2))))
    assert plan.role("consumer") == RolePlan(232, warpgroups=2) and plan.role("compute") is None
    assert plan.role("consumer").threads == 256 and RolePlan(64, warps=8).threads == 256
    assert RegisterBudget(128, 0, 14, 16).total == 158


ROLES = "roles = {compute = {warpgroups = 1, regs = 64}}"
BAD_PLANS = [
    ("4", "not a {key = value, ...} dict"),
    (f"{{{ROLES}}}", "'stages' is missing"),
    ("{stages = 2}", "'roles' is missing"),
    (f'{{stages = "4", {ROLES}}}', "'stages' must be an integer, not \"4\""),
    (f"{{stages = 0, {ROLES}}}", "'stages' must be at least 1, not 0"),
    (f"{{stages = 1, {ROLES}, waves = 2}}", "unknown key 'waves'"),
    ("{stages = 1, roles = {}}", "'roles' is empty"),
    ("{stages = 1, roles = {worker = {warpgroups = 1, regs = 8}}}", "unknown role 'worker'"),
    ("{stages = 1, roles = {compute = {regs = 8}}}", "role 'compute': a role has 'warpgroups' or 'warps'"),
    ("{stages = 1, roles = {compute = {warpgroups = 1}}}", "role 'compute': 'regs' is missing"),
    (f"{{stages = 1, {ROLES}, budget = {{acc_regs = 1}}}}", "'live_tile_regs' is missing"),
    (f"{{stages = 1, {ROLES}, smem = 5}}", "'smem' is not a {key = value, ...} dict"),
    ("{stages = 1, roles = {compute = 8}}", "role 'compute': not a {key = value, ...} dict"),
]


@pytest.mark.parametrize(("text", "problem"), BAD_PLANS, ids=[t for t, _ in BAD_PLANS])
def test_malformed_plan_is_a_located_error(text: str, problem: str) -> None:
    module = parse_module(_kernel_text(f", occupancy = {text}"), "k.tkir")
    with pytest.raises(FactError) as e:
        OccupancyPlan.of(module.kernel)
    assert e.value.message.startswith(f"malformed occupancy attribute {text}: {problem}")
    assert e.value.loc == module.kernel.loc


def test_malformed_plan_through_the_cli(tmp_path: Path) -> None:
    """A pass that reads the plan (pipeline) stops with the located error, not a KeyError."""
    f = tmp_path / "k.tkir"
    f.write_text(_kernel_text(", occupancy = {stages = 2, roles = {producer = {warpgroups = 1}}}"))
    r = subprocess.run([sys.executable, "-m", "tkir.cli", "opt", str(f), "--passes=pipeline"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert r.stderr.startswith(f"{f}:1:1: error: malformed occupancy attribute")
    assert "role 'producer': 'regs' is missing" in r.stderr


# --- the IR after plan-occupancy -------------------------------------------------------------------


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_ir_after_plan_occupancy_round_trips(tmp_path: Path, target: str) -> None:
    """tkc compile --stop-after plan-occupancy, then tkc opt with no passes: byte for byte; and the
    facts read back from that text print exactly as written."""
    ir = subprocess.run([sys.executable, "-m", "tkir.cli", "compile", "examples/gemm.tk", f"--target={target}",
                         "--stop-after", "plan-occupancy"], capture_output=True, text=True, check=True).stdout
    f = tmp_path / "gemm.tkir"
    f.write_text(ir)
    again = subprocess.run([sys.executable, "-m", "tkir.cli", "opt", str(f), "--passes="],
                           capture_output=True, text=True, check=True).stdout
    assert again == ir
    module = parse_module(ir)
    attr = module.kernel.attrs["occupancy"]
    assert format_attr_value(OccupancyPlan.of(module.kernel).to_attr()) == format_attr_value(attr)
    laid_out = [v.type for op in module.kernel.walk() for v in op.results if layout_of(v.type) is not None]
    assert laid_out
    for t in laid_out:
        assert format_attr_value(layout_of(t).to_attr()) == format_attr_value(t.get("layout"))


def test_row_parts_are_checked() -> None:
    """`parts` (rows split over warps) belongs to row layouts and their vectors, and divides warps."""
    from tkir.facts import FactError
    from tkir.layout import RegisterLayout, make_layout

    lay = make_layout("row", warps=8, vec=8, parts=4)
    assert (lay.groups, lay.nparts) == (2, 4)
    assert RegisterLayout.from_attr(lay.to_attr()) == lay
    assert "parts" not in make_layout("row", warps=8, vec=8, parts=1).to_attr()  # 1 is the default
    for bad in ({"kind": "wgmma_acc", "wg": 1, "parts": 2}, {"kind": "row", "warps": 6, "vec": 8, "parts": 4}):
        with pytest.raises(FactError, match="parts"):
            RegisterLayout.from_attr(bad)
