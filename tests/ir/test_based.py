"""Based linear attention (examples/based.tk) and the construct it added, tk.outer (row_outer /
col_outer), on the CPU: the op's checks, text form and interpreter meaning; the example in the
interpreter at issue 13's small sizes (front-end IR and the IR after the whole pipeline, both
targets) against the numpy reference, itself checked against the 273-feature definition; the
backend's lowering of tk.outer, whose emitted LLVM is evaluated here for every thread (an evaluator
of the instructions the rule emits, shfl.sync.idx included); PTX that ptxas assembles, SASS without
local memory; plan-occupancy's count of a sliced product; the FLOP count."""

from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import tkir
from tkir.backend.fragments import gather_plan, numeric_slots
from tkir.backend.llvm_text import LLVMWriter
from tkir.backend.rules_registers import outer_product
from tkir.backend.toolchain import local_memory_ops
from tkir.backend.values import Frag
from tkir.diagnostics import CompileError
from tkir.facts import OccupancyPlan
from tkir.frontend import compile_file, compile_source
from tkir.layout import layout_of, make_layout, outer_operand_layout
from tkir.parser import parse_module
from tkir.printer import print_module
from tkir.tools.examples import check_interpreted, load_companion, relative_error
from tkir.verifier import verify

ROOT = Path(__file__).resolve().parents[2]
BASED = str(ROOT / "examples" / "based.tk")
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def comp():
    return load_companion(BASED)


# --- the reference ---------------------------------------------------------------------------------


def test_reference_is_the_273_feature_definition(comp) -> None:
    """O[t] = sum_{u <= t} phi(q_t).phi(k_u) v_u with phi = [1, x / 2, phi2(x)] (273 features), and the
    states are phi's sums: what the closed forms in reference() must equal."""
    rng = np.random.default_rng(3)
    sizes = dict(B=1, H=2, N=70)
    inputs = comp.make_inputs(rng, sizes, {})
    ref = comp.reference(inputs, sizes, {})
    q, k, v = (a.astype(np.float64) for a in inputs[:3])

    def phi(x):
        return np.concatenate([np.ones(x.shape[:-1] + (1,)), x * comp.PHI1, comp.phi2(x)], axis=-1)

    fq, fk = phi(q), phi(k)
    assert fq.shape[-1] == comp.FEATURES == 273
    att = np.tril(fq @ np.swapaxes(fk, -1, -2))
    assert relative_error(ref["O"], att @ v) < 1e-12
    state = np.swapaxes(fk, -1, -2) @ v  # (B, H, 273, DV)
    assert relative_error(ref["A0"], state[:, :, 0]) < 1e-12
    assert relative_error(ref["A1"], state[:, :, 1:17]) < 1e-12
    assert relative_error(ref["A2"], state[:, :, 17:]) < 1e-12
    # the last token's output is phi(q_last) times the final state (what a decoder continues from)
    assert relative_error(ref["O"][:, :, -1], np.einsum("bhf,bhfd->bhd", fq[:, :, -1], state)) < 1e-12


def test_flops_are_thunderkittens_count(comp) -> None:
    one = comp.flops(dict(B=1, H=1, N=1), {})
    assert one == 2 * 273 + 4 * 64 * 273 == 70_434
    assert comp.flops(dict(B=16, H=16, N=4096), {}) == 16 * 16 * 4096 * 70_434
    # what the kernel issues per 64-token chunk: qk 64x64x16, tril.v 64x64x64, q.A1 64x64x16,
    # phi2(q).A2 64x64x256, v^T k 64x16x64, phi2(k)^T v 256x64x64
    assert comp.issued_flops(dict(B=1, H=1, N=64), {}) == 2 * 64 * (64 * 16 + 64 * 64 + 64 * 16 + 64 * 256
                                                                  + 16 * 64 + 256 * 64)


# --- the example in the interpreter ------------------------------------------------------------------

SMALL = [dict(B=1, H=1, N=64), dict(B=2, H=4, N=1000)]  # issue 13's interpreter sizes (N = 1000: ragged)


@pytest.mark.parametrize("sizes", SMALL, ids=["1x1x64", "2x4x1000"])
def test_frontend_ir_matches_reference(comp, sizes: dict) -> None:
    for r in check_interpreted(compile_file(BASED, {}), comp, sizes, {}, seed=0):
        assert r.ok, str(r)
        assert r.rel_err < 1e-2


def _warp_specialized_based(tmp_path: Path) -> str:
    """based.tk with a producer warpgroup (the source's `producers=0` taken out): TMA ring buffers, roles,
    one block per SM, a persistent grid: the schedule before `producers=0`, still a valid program."""
    src = Path(BASED).read_text()
    assert "@warpgroups(consumers=1, producers=0)" in src
    out = tmp_path / "based.tk"
    out.write_text(src.replace("@warpgroups(consumers=1, producers=0)", "@warpgroups(consumers=1)"))
    (tmp_path / "based.py").write_text((ROOT / "examples" / "based.py").read_text())
    return str(out)


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("sizes", SMALL, ids=["1x1x64", "2x4x1000"])
def test_pipelined_ir_matches_reference(comp, sizes: dict, target: str) -> None:
    k = tkir.compile(BASED, target=target)
    if target == "sm_90a":  # no producer: one compute warpgroup, cp.async ring buffers, two blocks per SM
        assert "tk.role" not in k.ir and "pipe.async_wait" in k.ir
        assert k.module.kernel.attrs["occupancy"]["blocks_per_sm"] == 2
    for r in check_interpreted(k.module, comp, sizes, {}, seed=1):
        assert r.ok, str(r)


def test_warp_specialized_based_matches_reference(comp, tmp_path: Path) -> None:
    k = tkir.compile(_warp_specialized_based(tmp_path))
    assert "tk.role" in k.ir and "pipe.wait" in k.ir  # the warp-specialized level really runs
    for r in check_interpreted(k.module, comp, dict(B=2, H=4, N=1000), {}, seed=1):
        assert r.ok, str(r)


def test_persistent_blocks_reset_the_states(comp, tmp_path: Path) -> None:
    """The persistent grid (of the warp-specialized variant) gives a block several (batch, head) pairs in
    turn (NUM_SMS = 2 here: three each): the states must start from zero for every pair."""
    k = tkir.compile(_warp_specialized_based(tmp_path))
    assert "NUM_SMS" in k.launch.grid[0]
    for r in check_interpreted(k.module, comp, dict(B=2, H=3, N=200), {}, seed=2, num_sms=2):
        assert r.ok, str(r)


def test_wrong_state_scaling_fails(comp) -> None:
    """The check can fail: a kernel that forgets the 1/32 on the A2 state is off by far more than 1e-2."""
    text = Path(BASED).read_text().replace("let PHI2 = 0.03125", "let PHI2 = 0.0625")
    module = compile_source(text, "based_wrong.tk")
    res = {r.output: r for r in check_interpreted(module, comp, dict(B=1, H=1, N=200), {}, seed=0)}
    assert not res["O"].ok and res["A0"].ok


# --- tk.outer: checks, text form, meaning --------------------------------------------------------------

OUTER_SRC = """
kernel k<R=64>(X: gl<bf16>[R, 16], Y: gl<bf16>[R, 256], Z: gl<bf16>[256, R]) grid(1) {
    reg x: rt<bf16, R, 16> = X[0, 0]
    Y[0, 0] = row_outer(x, x)
    let xt = x.T
    Z[0, 0] = col_outer(xt, xt)
}
"""


def test_outer_interpreter_meaning() -> None:
    module = compile_source(OUTER_SRC, "outer.tk")
    assert "tk.outer %x, %x {axis = row} : rt<bf16, 64, 256>" in print_module(module)
    assert "{axis = col} : rt<bf16, 256, 64>" in print_module(module)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 16)).astype(BF16)
    y, z = np.full((64, 256), np.nan, BF16), np.full((256, 64), np.nan, BF16)
    tkir.interpret(module, x, y, z)
    xf = x.astype(np.float32)
    want = np.einsum("ri,rj->rij", xf, xf).reshape(64, 256).astype(BF16)  # one rounding of an exact product
    assert np.array_equal(y.view(np.uint16), want.view(np.uint16))
    assert np.array_equal(z.view(np.uint16), np.ascontiguousarray(want.T).view(np.uint16))  # col_outer of x^T


def test_outer_round_trips_and_verifier_rules() -> None:
    module = compile_source(OUTER_SRC, "outer.tk")
    text = print_module(module)
    assert print_module(parse_module(text)) == text
    bad = {
        "rt<bf16, 64, 255>": "yields rt<bf16, 64, 256>",
        "{axis = diag}": "axis must be row or col",
    }
    for wrong, msg in bad.items():
        t = text.replace("rt<bf16, 64, 256>", wrong, 1) if "rt<" in wrong else text.replace("{axis = row}", wrong, 1)
        with pytest.raises(CompileError, match=re.escape(msg)):
            verify(parse_module(t))


@pytest.mark.parametrize("body, message", [
    ("reg y: rt<bf16, 64, 16> = X[0, 0]\n reg z: rt<bf16, 32, 16> = Y[0, 0]\n let p = row_outer(y, z)",
     "shape mismatch in 'row_outer'"),
    ("reg y: rt<bf16, 64, 16> = X[0, 0]\n reg z: rt<f32, 64, 16> = 0\n let p = col_outer(y, z)",
     "dtype mismatch in 'col_outer'"),
    ("shared s: st<bf16, 64, 16>\n s = X[0, 0]\n reg y: rt<bf16, 64, 16> = s\n let p = row_outer(s, y)",
     "'row_outer' multiplies register tiles; 's' is shared"),
    ("reg y: rt<bf16, 64, 64> = 0\n let p = row_outer(y, y)\n let r = row_outer(p, y)", "register file"),
    ("let p = row_outer(1.0, 2.0)", "'row_outer' multiplies register tiles, not"),
])
def test_outer_front_end_errors(body: str, message: str) -> None:
    src = f"kernel k(X: gl<bf16>[64, 16], Y: gl<bf16>[32, 16]) grid(1) {{\n {body}\n}}\n"
    with pytest.raises(CompileError, match=re.escape(message)):
        compile_source(src, "bad.tk")


# --- infer-layouts' choice and the backend's shuffles --------------------------------------------------


def test_outer_operand_layouts() -> None:
    wa = make_layout("wgmma_a", wg=1)
    assert outer_operand_layout(wa, "row", (64, 16), "bf16") == wa           # mul_slice_row: the quad
    assert outer_operand_layout(wa, "col", (16, 64), "bf16") == make_layout("mma_a", warps=1)  # replicated
    assert outer_operand_layout(wa, "col", (32, 64), "bf16") is None          # not one m16 block
    assert outer_operand_layout(make_layout("row", warps=4, vec=8), "row", (64, 16), "bf16") is None
    k = tkir.compile(BASED)
    outers = [op for op in k.module.kernel.walk() if op.name == "tk.outer"]
    got = [(str(op.attrs["axis"]), layout_of(op.operands[0].type).kind, layout_of(op.result.type).kind)
           for op in outers]
    assert got == [("row", "wgmma_a", "wgmma_a"), ("col", "mma_a", "wgmma_a")]
    assert all(op.name != "tk.convert_layout" or "outer" not in str(op.result.name)
               for op in k.module.kernel.walk())


def _based_outers(target: str) -> list:
    k = tkir.compile(BASED, target=target)
    return [op for op in k.module.kernel.walk() if op.name == "tk.outer"]


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_gather_plans_are_in_warp(target: str) -> None:
    """Every factor of based's two products is the thread's own or one shuffle away (no shared
    memory), with the shuffle patterns of ThunderKittens' mul_slice_row / mul_slice_col."""
    for op in _based_outers(target):
        rt = op.result.type
        res = numeric_slots(layout_of(rt), rt.shape)
        tb = op.operands[1].type
        row = str(op.attrs["axis"]) == "row"
        for idx, x in enumerate(op.operands):
            need = [((r, c // tb.cols) if row else (r // tb.rows, c)) if idx == 0 else
                    ((r, c % tb.cols) if row else (r % tb.rows, c)) for r, c in res]
            plan = gather_plan(layout_of(x.type), x.type.shape, need, 128)
            assert all(p is not None for p in plan)
            masks = {p[1] for p in plan if p[0] == "shuffle"}
            if idx == 1:  # b's factor: always the thread's own slot
                assert {p[0] for p in plan} == {"local"}
            else:
                assert masks == ({0b11100} if row else {0b00011})


class _Eval:
    """Evaluates, for every thread of a role at once (numpy arrays over threads), the LLVM lines the
    tk.outer rule emits: i32 arithmetic, icmp/select, bf16 pairs packed into i32, float products and
    roundings, and llvm.nvvm.shfl.sync.idx.i32 (lane l of the warp reads lane src's value)."""

    def __init__(self, threads: int, env: dict[str, object]):
        self.t = np.arange(threads)
        self.env = dict(env)

    def val(self, tok: str) -> object:
        tok = tok.strip()
        if tok.startswith("%"):
            return self.env[tok]
        if tok == "poison":
            return (None, None)
        return np.full(self.t.shape, int(tok))

    def run(self, lines: list[str]) -> None:
        for line in lines:
            m = re.match(r"\s*(%\S+) = (.*)$", line)
            assert m, line
            name, text = m.groups()
            self.env[name] = self.eval(text)

    def eval(self, text: str) -> object:
        if m := re.match(r"(and|or|add|mul|lshr|shl) i32 (\S+), (\S+)$", text):
            op, a, b = m.groups()
            x, y = self.val(a.rstrip(",")), self.val(b)
            return {"and": np.bitwise_and, "or": np.bitwise_or, "add": np.add, "mul": np.multiply,
                    "lshr": np.right_shift, "shl": np.left_shift}[op](x, y)
        # bf16 -> f32 as bits (backend to_f32): bfloat -> i16 pattern, zext, shl 16, i32 -> float
        if m := re.match(r"bitcast bfloat (\S+) to i16$", text):
            return np.asarray(self.val(m.group(1))).astype(BF16).view(np.uint16).astype(np.int64)
        if m := re.match(r"zext i16 (\S+) to i32$", text):
            return self.val(m.group(1))
        # 32-bit words as bits where both sides are scalars (a float moved through an i32 shuffle or
        # select, the bf16 -> f32 shift above); packed pairs (<2 x bfloat>) stay pairs of values
        if m := re.match(r"bitcast float (\S+) to i32$", text):
            return np.asarray(self.val(m.group(1)), np.float32).view(np.uint32).astype(np.int64)
        if m := re.match(r"bitcast i32 (\S+) to float$", text):
            return np.asarray(self.val(m.group(1)), np.int64).astype(np.uint32).view(np.float32)
        if m := re.match(r"icmp eq i32 (\S+), (\S+)$", text):
            return self.val(m.group(1).rstrip(",")) == self.val(m.group(2))
        if m := re.match(r"select i1 (\S+), \S+ (\S+), \S+ (\S+)$", text):
            c, a, b = self.val(m.group(1).rstrip(",")), self.val(m.group(2).rstrip(",")), self.val(m.group(3))
            if isinstance(a, tuple):
                return tuple(np.where(c, x, y) for x, y in zip(a, b, strict=True))
            return np.where(c, a, b)
        if m := re.match(r"insertelement <2 x bfloat> (\S+), bfloat (\S+), i32 (\d)$", text):
            v = list(self.val(m.group(1).rstrip(",")))
            v[int(m.group(3))] = self.val(m.group(2).rstrip(","))
            return tuple(v)
        if m := re.match(r"extractelement <2 x bfloat> (\S+), i32 (\d)$", text):
            return self.val(m.group(1).rstrip(","))[int(m.group(2))]
        if m := re.match(r"bitcast (?:<2 x \S+>|\S+) (\S+) to .+$", text):
            return self.val(m.group(1))
        if m := re.match(r"(fpext|fptrunc) \S+ (\S+) to (\S+)$", text):
            x = self.val(m.group(2))
            return x.astype(BF16).astype(np.float32) if m.group(3) == "bfloat" else x
        if m := re.match(r"fmul (?:contract )?float (\S+), (\S+)$", text):
            return (self.val(m.group(1).rstrip(",")) * self.val(m.group(2))).astype(np.float32)
        if m := re.match(r"call i32 @llvm.nvvm.shfl.sync.idx.i32\(i32 -1, i32 (\S+), i32 (\S+), i32 31\)$", text):
            v, src = self.val(m.group(1).rstrip(",")), self.val(m.group(2).rstrip(","))
            lane_of = (self.t // 32) * 32 + src
            return tuple(x[lane_of] for x in v) if isinstance(v, tuple) else v[lane_of]
        raise AssertionError(f"the evaluator does not know: {text}")


class _FakeCx:
    """What outer_product reads from a LoweringContext: operand fragments, a role of `threads`."""

    def __init__(self, threads: int, vals: dict):
        self.w = LLVMWriter()
        self.vals = vals
        self.threads = threads

    def get(self, v):
        return self.vals[id(v)]

    def set(self, v, x) -> None:
        self.vals[id(v)] = x

    def role_threads(self) -> int:
        return self.threads

    def thread_index(self) -> str:
        return "%tid"


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_emitted_outer_product_is_right_for_every_thread(target: str) -> None:
    """The LLVM the rule emits for based's two products, evaluated for all 128 threads: every slot of
    every thread holds round_bf16(a[.] * b[.]) of its element."""
    rng = np.random.default_rng(5)
    for op in _based_outers(target):
        threads = 128
        env: dict[str, object] = {"%tid": np.arange(threads)}
        vals: dict = {}
        data = {}
        for n, v in enumerate(op.operands):
            if id(v) in vals:
                continue
            t = v.type
            m = rng.standard_normal(t.shape).astype(BF16).astype(np.float32)
            data[id(v)] = m
            lay = layout_of(t)
            names = []
            for k, (r, c) in enumerate(numeric_slots(lay, t.shape)):
                name = f"%in{n}_{k}"
                rr, cc = np.asarray(r)[np.arange(threads) % lay.threads], np.asarray(c)[np.arange(threads) % lay.threads]
                env[name] = m[rr, cc]
                names.append(name)
            vals[id(v)] = Frag(t, names)
        cx = _FakeCx(threads, vals)
        outer_product(cx, op)
        res = cx.get(op.result)
        out_names = [res.values[i] for i in range(len(res.values))]  # a lazy product: emitted now
        ev = _Eval(threads, env)
        ev.run([ln for ln in cx.w.lines])
        a, b = data[id(op.operands[0])], data[id(op.operands[1])]
        if str(op.attrs["axis"]) == "row":
            full = np.einsum("ri,rj->rij", a, b).reshape(a.shape[0], -1)
        else:
            full = np.einsum("ic,jc->ijc", a, b).reshape(-1, a.shape[1])
        want_full = full.astype(BF16).astype(np.float32)
        rt = op.result.type
        lay = layout_of(rt)
        for name, (r, c) in zip(out_names, numeric_slots(lay, rt.shape), strict=True):
            rr, cc = np.asarray(r)[np.arange(threads) % lay.threads], np.asarray(c)[np.arange(threads) % lay.threads]
            assert np.array_equal(ev.env[name], want_full[rr, cc]), f"{target} {op.attrs['axis']}: slot {name}"
        n_shfl = sum("shfl.sync.idx" in ln for ln in cx.w.lines)
        assert n_shfl == (16 if str(op.attrs["axis"]) == "row" else 32)  # packed pairs, each distinct once


# --- the compiled kernel -------------------------------------------------------------------------------


@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
def test_based_assembles_without_local_memory(target: str) -> None:
    k = tkir.compile(BASED, target=target)
    res = k.asm["ptxas"]
    assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0
    sass = k.asm["sass"]
    assert not local_memory_ops(sass)
    assert sass.count("SHFL.IDX") >= 48  # 16 + 32 factor shuffles per chunk
    if target == "sm_90a":
        assert sass.count("HGMMA") == 42  # per chunk: 1 + 4 + 1 + 16 + 4 + 16 wgmma k-steps
        # no producer warpgroup: cp.async loads (LDGSTS) into two stages, no setmaxnreg, two blocks per SM
        assert "LDGSTS" in sass and "UTMALDG" not in sass and "USETMAXREG" not in sass
        assert "UTMASTG" in sass  # O still leaves through the staged TMA store
        assert not [w for w in res.warnings if any(c in w for c in ("C7514", "C7515", "C7511"))]
        plan = OccupancyPlan.of(k.module.kernel)
        assert plan.role("compute").warpgroups == 1 and plan.stages == 2 and plan.blocks_per_sm == 2
        assert res.registers <= 65536 // (2 * 128)  # two blocks of 128 threads fit the register file
    else:
        assert "HMMA" in sass


def test_sliced_outer_is_counted_as_two_slices(tmp_path: Path) -> None:
    """plan-occupancy counts a tk.outer product read only as the next mma's A as 2 slices of 16
    registers (the backend computes it slice by slice), not its whole 64 x 256 bf16 tile (64)."""
    from tkir.passes.plan_occupancy import SLICED_A_REGS, _register_budget

    passes = "canonicalize,legalize-mma,infer-layouts"
    sliced, _ = _register_budget(tkir.compile(BASED, passes=passes).module.kernel, 128)
    assert SLICED_A_REGS == 32 and sliced.total <= 248
    # the same product read by two mmas is live whole: 64 - 32 more registers at the peak
    twice = tmp_path / "twice.tk"
    twice.write_text(Path(BASED).read_text().replace(
        "o += row_outer(qr, qr) @ a2s", "let q2 = row_outer(qr, qr)\n        o += q2 @ a2s\n        o += q2 @ a2s"))
    whole, _ = _register_budget(tkir.compile(str(twice), passes=passes).module.kernel, 128)
    assert whole.total - sliced.total == 64 - SLICED_A_REGS
