"""`@blocks_per_sm(B)`: the floor of resident blocks per SM the user asks ptxas for (`.minnctapersm`).

The front end records `min_blocks_per_sm = B` (B a compile-time 1..32; 0 records nothing), the IR
text round-trips it, plan-occupancy raises its blocks_per_sm to at least B or refuses a B that cannot
be resident (threads, shared memory, accumulator registers, warp specialization), the backend emits
it on both targets, the interpreter ignores it, and the tuner's model sees the raised count.
tests/filecheck/backend/blocks-per-sm*.tkir (the PTX), tests/filecheck/backend-blocks-per-sm.tk and
tests/filecheck/passes/plan-occupancy-blocks-per-sm.tkir (the plan) check them as text.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import tkir
from tkir.api import build_module
from tkir.backend.lower_llvm import lower_kernel
from tkir.backend.toolchain import assemble
from tkir.backend.values import LoweringError
from tkir.diagnostics import CompileError
from tkir.facts import MIN_BLOCKS_ATTR, OccupancyPlan
from tkir.frontend.tune import read_space
from tkir.parser import parse_module
from tkir.passes.registry import DEFAULT_PIPELINE
from tkir.printer import print_module
from tkir.target import MAX_BLOCKS_PER_SM
from tkir.tools.examples import check_interpreted, load_companion
from tkir.tools.tune import check_point
from tkir.verifier import verify

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ROW_KERNELS = ROOT / "tests" / "data" / "rows"  # the row kernels with every schedule knob (@blocks_per_sm(OCC) among them)
LAYERNORM = str(ROW_KERNELS / "layernorm.tk")
GEMM = str(EXAMPLES / "gemm.tk")
GEMM_CONSTS = load_companion(GEMM).DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
# layernorm's widest one-read row on 2 warpgroups: plan-occupancy estimates 96 registers a thread
# (2 blocks per SM); ptxas needs 84 at .minnctapersm 2 and fits in 64 at 4, without spills
WIDE = dict(D=8192, DC=8192, ROWS=1, WG=2)

ROW = """\
@blocks_per_sm({ann})
@warpgroups(consumers=2)
kernel center<OCC=4>(X: gl<bf16>[N, 8192], Y: gl<bf16>[N, 8192]) grid(N) {{
    reg x: rt<bf16, 1, 8192> = X[block.x, 0]
    let xf = f32(x)
    Y[block.x, 0] = bf16(xf - row_sum(xf) / 8192)
}}
"""


def _write(tmp_path: Path, text: str, name: str = "k.tk") -> str:
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return str(f)


def _minnctapersm(ptx: str) -> int:
    (n,) = re.findall(r"\.minnctapersm (\d+)", ptx)
    return int(n)


# --- the front end ---------------------------------------------------------------------------------


def test_annotation_records_the_floor_and_zero_records_nothing(tmp_path: Path) -> None:
    assert build_module(LAYERNORM, {"OCC": 4}).kernel.attrs[MIN_BLOCKS_ATTR] == 4
    assert MIN_BLOCKS_ATTR not in build_module(LAYERNORM).kernel.attrs  # the header's OCC = 0
    literal = _write(tmp_path, ROW.format(ann="2"))
    assert build_module(literal).kernel.attrs[MIN_BLOCKS_ATTR] == 2
    assert build_module(literal, {"OCC": 0}).kernel.attrs[MIN_BLOCKS_ATTR] == 2  # a literal, not OCC
    most = _write(tmp_path, ROW.format(ann=f"{MAX_BLOCKS_PER_SM} - OCC + 4"), "most.tk")
    assert build_module(most).kernel.attrs[MIN_BLOCKS_ATTR] == MAX_BLOCKS_PER_SM  # a compile-time expression


def test_occ_zero_gives_the_ptx_of_no_annotation(tmp_path: Path) -> None:
    """OCC = 0 adds nothing: the PTX is that of the kernel without the annotation, on both targets."""
    src = Path(LAYERNORM).read_text(encoding="utf-8")
    assert "@blocks_per_sm(OCC)" in src
    bare = _write(tmp_path, re.sub(r"^@blocks_per_sm\(OCC\).*\n", "", src, flags=re.M), "layernorm.tk")
    for target in ("sm_90a", "sm_80"):
        assert tkir.compile(LAYERNORM, target=target).asm["ptx"] == tkir.compile(bare, target=target).asm["ptx"]


@pytest.mark.parametrize("ann, msg, col", [
    ("N", "bad argument to '@blocks_per_sm': expected a compile-time integer 0..32 (resident blocks per SM; "
          "0: the planner decides), got a value known only at run time", 16),
    ("-1", "bad argument to '@blocks_per_sm': expected a compile-time integer 0..32", 16),
    ("OCC - 5", "got -1", 20),  # a binary expression is located at its operator
    ("33", "bad argument to '@blocks_per_sm': expected a compile-time integer 0..32", 16),
    ("OCC * 8 + 1", "got 33", 24),
    ("2.5", "got 2.5", 16),
    ("", "'@blocks_per_sm' takes one argument", 1),
    ("1, 2", "'@blocks_per_sm' takes one argument", 1),
    ("b=4", "'@blocks_per_sm' takes one argument", 1),
])
def test_bad_arguments_are_located_errors(tmp_path: Path, ann: str, msg: str, col: int) -> None:
    text = ROW.format(ann=ann)
    if not ann:
        text = text.replace("@blocks_per_sm()", "@blocks_per_sm")
    with pytest.raises(CompileError) as e:
        tkir.compile(_write(tmp_path, text))
    assert msg in e.value.message, e.value.format()
    assert (e.value.loc.line, e.value.loc.col) == (1, col)
    first = e.value.format().splitlines()[0]
    assert re.match(r".*k\.tk:1:\d+: error: ", first), first


def test_only_on_the_kernel(tmp_path: Path) -> None:
    text = Path(GEMM).read_text(encoding="utf-8").replace("@stages(STAGES)", "@blocks_per_sm(2)")
    with pytest.raises(CompileError, match="'@blocks_per_sm' applies to the kernel, not here") as e:
        tkir.compile(_write(tmp_path, text))
    assert e.value.loc.line == 13


def test_twice_is_an_error(tmp_path: Path) -> None:
    text = "@blocks_per_sm(2)\n" + ROW.format(ann="4")
    with pytest.raises(CompileError, match="duplicate annotation '@blocks_per_sm'") as e:
        tkir.compile(_write(tmp_path, text))
    assert e.value.loc.line == 2


# --- the IR text -----------------------------------------------------------------------------------


def test_tkc_opt_round_trips_the_attr(tmp_path: Path) -> None:
    """Front-end IR and IR after every pass keep `min_blocks_per_sm`, and `tkc opt` prints them back
    byte for byte."""
    front = subprocess.run([sys.executable, "-m", "tkir.cli", "compile", LAYERNORM, "-D", "OCC=4", "--passes=verify"],
                           capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert "min_blocks_per_sm = 4" in front.splitlines()[0]
    f = tmp_path / "k.tkir"
    f.write_text(front, encoding="utf-8")
    again = subprocess.run([sys.executable, "-m", "tkir.cli", "opt", str(f)], capture_output=True, text=True,
                           check=True, cwd=ROOT).stdout
    assert again == front
    k = tkir.compile(LAYERNORM, OCC=4, **WIDE)
    for name in k.pipeline:
        text = k.ir_after(name)
        assert "min_blocks_per_sm = 4" in text.splitlines()[0], name
        assert print_module(parse_module(text)) == text, name


@pytest.mark.parametrize("value, problem", [("40", "must be 1..32 (resident blocks per SM), not 40"),
                                            ("0", "must be 1..32 (resident blocks per SM), not 0"),
                                            ('"4"', 'must be an integer, not "4"'),
                                            ("true", "must be an integer, not true")])
def test_hand_written_ir_is_verified(value: str, problem: str) -> None:
    text = ('tk.kernel @k {grid = ["1"], min_blocks_per_sm = VALUE} {\n  ^()\n}\n').replace("VALUE", value)
    with pytest.raises(CompileError, match=re.escape(f"'tk.kernel': 'min_blocks_per_sm' {problem}")):
        verify(parse_module(text, "k.tkir"))


# --- plan-occupancy --------------------------------------------------------------------------------


def _plan(path: str, **consts: int) -> OccupancyPlan:
    k = tkir.compile(path, **consts)
    plan = OccupancyPlan.of(k.module.kernel)
    assert plan is not None
    return plan


def test_the_plan_takes_the_floor() -> None:
    """B above the planner's own count replaces it; B below leaves it; the roles keep the estimate."""
    own = _plan(LAYERNORM, **WIDE)
    assert own.blocks_per_sm == 2 and own.role("compute").regs == 88
    four = _plan(LAYERNORM, OCC=4, **WIDE)
    assert four.blocks_per_sm == 4 and four.role("compute").regs == 88
    assert _plan(LAYERNORM, OCC=1, **WIDE).blocks_per_sm == 2
    assert _plan(LAYERNORM, OCC=8, **{**WIDE, "WG": 1}).blocks_per_sm == 8  # 8 x 128 threads


def test_too_many_threads_are_refused() -> None:
    with pytest.raises(CompileError) as e:
        tkir.compile(LAYERNORM, OCC=5)  # WG = 4: 512 threads
    assert e.value.message == ("@blocks_per_sm(5) on kernel 'layernorm': 5 blocks x 512 threads = 2560 threads, "
                               "more than the 2048 an SM holds")
    assert "at most 4 blocks" in e.value.hint
    kernel_line = next(i for i, ln in enumerate(Path(LAYERNORM).read_text().splitlines(), 1)
                       if ln.startswith("kernel layernorm"))
    assert e.value.loc is not None and e.value.loc.line == kernel_line  # the kernel's name
    assert _plan(LAYERNORM, OCC=4).blocks_per_sm == 4  # 4 x 512 = 2048 fits


SHARED = """\
@blocks_per_sm(OCC)
kernel staged<OCC=2>(X: gl<bf16>[N, 256], Y: gl<bf16>[N, 256]) grid(N / 256) {
    shared s: st<bf16, 256, 256>
    s = X[block.x, 0]
    Y[block.x, 0] = s
}
"""


def test_too_much_shared_memory_is_refused(tmp_path: Path) -> None:
    """256 x 256 bf16 = 131072 B + the 1024-B alignment pad of its TMA destination + 1 KB reserved:
    one block fits in 228 KB, two do not."""
    path = _write(tmp_path, SHARED)
    with pytest.raises(CompileError) as e:
        tkir.compile(path)
    msg = e.value.message
    assert msg == ("@blocks_per_sm(2) on kernel 'staged': 2 blocks x 133120 B of shared memory (132096 B + 1024 B "
                   "reserved, in 128-B units) = 266240 B, more than the 233472 B of an SM"), msg
    assert e.value.hint.startswith("ask for at most 1 block,")
    assert _plan(path, OCC=1).blocks_per_sm == 1


def test_warp_specialized_kernels_run_one_block(tmp_path: Path) -> None:
    text = Path(GEMM).read_text(encoding="utf-8").replace("@stream_k(SK, min_iters=SKI)", "@stream_k(SK, min_iters=SKI) @blocks_per_sm(OCC)")
    text = text.replace("SKI=auto>(", "SKI=auto, OCC=2>(")
    path = _write(tmp_path, text, "gemm.tk")
    with pytest.raises(CompileError, match=re.escape("@blocks_per_sm(2) on kernel 'gemm': a warp-specialized "
                                                     "kernel runs one block per SM")):
        tkir.compile(path, **GEMM_CONSTS)
    one = tkir.compile(path, OCC=1)
    assert _minnctapersm(one.asm["ptx"]) == 1
    assert one.asm["ptx"] == tkir.compile(GEMM).asm["ptx"]


def test_accumulators_that_do_not_fit_are_refused(tmp_path: Path) -> None:
    """sm_80 gemm 128 x 128 on 8 warps: 64 accumulator registers + 16 of overhead a thread; 4 blocks
    of 256 threads leave 64."""
    text = Path(GEMM).read_text(encoding="utf-8").replace("@stream_k(SK, min_iters=SKI)", "@blocks_per_sm(OCC)")
    text = text.replace("SKI=auto>(", "SKI=auto, OCC=4>(")
    path = _write(tmp_path, text, "gemm.tk")
    consts = dict(GEMM_CONSTS, BN=128, STAGES=1)
    with pytest.raises(CompileError) as e:
        tkir.compile(path, target="sm_80", **consts)
    assert e.value.message == ("@blocks_per_sm(4) on kernel 'gemm': 4 blocks x 256 threads leave 64 registers per "
                               "thread, fewer than the 80 its accumulators (64) and overhead (16) need")
    k = tkir.compile(path, target="sm_80", OCC=3, **consts)
    assert OccupancyPlan.of(k.module.kernel).blocks_per_sm == 3
    assert _minnctapersm(k.asm["ptx"]) == 3


# --- the backend -----------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_ptx_asks_for_the_floor(target: str) -> None:
    assert _minnctapersm(tkir.compile(LAYERNORM, target=target, **WIDE).asm["ptx"]) == 2
    assert _minnctapersm(tkir.compile(LAYERNORM, target=target, OCC=4, **WIDE).asm["ptx"]) == 4


def test_ptxas_fits_layernorm_in_64_registers_at_four_blocks() -> None:
    """The measurement behind the annotation: at .minnctapersm 4 ptxas (-arch=sm_90a -v) gives
    layernorm's wide row 64 registers (65536 / (4 x 256)) and spills nothing."""
    ptx = tkir.compile(LAYERNORM, OCC=4, **WIDE).asm["ptx"]
    assert ".minnctapersm 4" in ptx
    res = assemble(ptx, "sm_90a")
    assert res.registers <= 64 and res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, res


def test_backend_refuses_more_than_one_block_for_roles() -> None:
    """IR past plan-occupancy's check (edited by hand): a warp-specialized kernel asking for 2."""
    k = tkir.compile(GEMM)
    params = k.launch.params
    k.module.kernel.attrs[MIN_BLOCKS_ATTR] = 2
    with pytest.raises(LoweringError, match="min_blocks_per_sm = 2 on a warp-specialized kernel"):
        lower_kernel(k.module, params, "sm_90a")


# --- the interpreter and the tuner -----------------------------------------------------------------


def test_interpreter_ignores_it() -> None:
    comp = load_companion(LAYERNORM)
    k = tkir.compile(LAYERNORM, OCC=4)
    assert k.module.kernel.attrs[MIN_BLOCKS_ATTR] == 4
    (res,) = check_interpreted(k.module, comp, dict(comp.CHECK_SIZES[0]), {"OCC": 4}, seed=0)
    assert res.ok, res


@pytest.mark.parametrize("name", ["layernorm", "softmax", "rmsnorm"])
def test_row_examples_tune_occ(name: str) -> None:
    """OCC = [0, 4, 8] in each row kernel's space (8 added later; layernorm also 3);
    the where-clause keeps OCC x WG x 128 <= 2048 (8 blocks of 4 warpgroups are dropped, of 2 kept)."""
    path = ROW_KERNELS / f"{name}.tk"
    space = read_space(path.read_text(encoding="utf-8"), str(path))
    want = [0, 3, 4, 8] if name == "layernorm" else [0, 4, 8]
    assert space.values["OCC"] == want and space.defaults["OCC"] == 0
    pts = space.points({"D": 1024})
    assert {p.consts["OCC"] for p in pts if p.dropped is None} == set(want)
    pin = {"D": 1024, "DC": 1024, "ROWS": 16, "REREAD": 0, "FENCE": 0}  # the other switches: one value each
    occ8 = {p.consts["WG"]: p.dropped for p in space.points(pin) if p.consts["OCC"] == 8}
    assert occ8[4] == "where OCC * WG * 128 <= 2048 is false" and occ8[2] is None and occ8[1] is None
    wider = path.read_text(encoding="utf-8").replace("WG=[1, 2, 4]", "WG=[1, 2, 4, 8]")
    space = read_space(wider, str(path))
    dropped = {(p.consts["WG"], p.consts["OCC"]): p.dropped for p in space.points(pin)}
    assert dropped[(8, 4)] == "where OCC * WG * 128 <= 2048 is false"
    assert dropped[(4, 4)] is None and dropped[(8, 0)] is None


# The chunk loop's 1 x 1024 tiles keep whole rows per warp, as when this test was written: with
# split_idle_warps they split over the 8 warps and the planner fits 6 blocks, past the 4 asked.
NO_IDLE_SPLIT = ",".join(p if p != "infer-layouts" else "infer-layouts{split_idle_warps=false}"
                         for p in DEFAULT_PIPELINE)


def test_tuner_model_sees_the_floor() -> None:
    """tkir.tools.tune.check_point predicts with the plan's blocks per SM: the requested 4, not the planner's
    count. On the chunked path (a loop over DC-wide chunks) more resident blocks are more bytes in
    flight per SM, which the model's Little's-law limit rewards; on the one-read path (no loop) the
    model counts no bytes in flight and predicts both alike (fewer, fuller waves, same time). The chunk
    is 512 wide: without the idle-warp split every warp holds a whole chunk, and layernorm's per-position
    accumulators of a 1024 chunk need 64 registers, more than 4 blocks leave."""
    sizes = {"N": 8192}
    pred = {}
    for dc in (8192, 512):
        for occ in (0, 4):
            r = check_point(LAYERNORM, {**WIDE, "DC": dc, "OCC": occ}, sizes, "sm_90a", NO_IDLE_SPLIT)
            assert r["reason"] is None, r
            pred[dc, occ] = r["prediction"]
    assert pred[8192, 0]["blocks_per_sm"] == 2 and pred[8192, 4]["blocks_per_sm"] == 4
    assert pred[8192, 4]["ms"] == pytest.approx(pred[8192, 0]["ms"])
    assert pred[512, 0]["blocks_per_sm"] == 3 and pred[512, 4]["blocks_per_sm"] == 4
    assert pred[512, 4]["inflight_bytes_per_sm"] > pred[512, 0]["inflight_bytes_per_sm"]
    assert pred[512, 4]["ms"] < pred[512, 0]["ms"]
