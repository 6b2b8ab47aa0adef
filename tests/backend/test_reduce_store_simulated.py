"""The per-element reducing store (`tk.store %G, %v, ... {reduce = "add"}`, backend/rules_memory.py) run on the CPU for
every thread of the block (the simulator of tests/backend/test_sm80_mma_simulated.py, extended with the f32 global
address and the owner bits): every in-bounds element of the tile is added exactly once with its value, nothing outside
the tensor, also where several threads hold the same element (a vector in every warp, a tile smaller than the
block's threads) — a plain store may write such an element from every holder, an add must not."""

from __future__ import annotations

import re

import numpy as np
import pytest
from test_sm80_mma_simulated import _Cx, _Simt

from tkir.backend.fragments import NumpyBuilder, slot_coords, tile_shape
from tkir.backend.rules_memory import store_registers_elementwise
from tkir.backend.values import Frag, Global, register_layout
from tkir.parser import parse_module

F32 = 4


class _RedSimt(_Simt):
    """_Simt plus the reducing store's f32 addresses, owner bits and `red.global.add.f32`."""

    def __init__(self, threads: int, env: dict[str, object]) -> None:
        super().__init__(threads, np.zeros(0), env)
        self.adds: list[tuple[int, float]] = []  # (byte address, value) of every executed add

    def _eval(self, rhs: str) -> object:
        if m := re.fullmatch(r"getelementptr float, ptr addrspace\(1\) (\S+), i64 (\S+)", rhs):
            return np.asarray(self.val(m[1])) + F32 * np.asarray(self.val(m[2]))
        if m := re.fullmatch(r"trunc i32 (\S+) to i1", rhs):
            return (np.asarray(self.val(m[1])) & 1).astype(bool)
        if m := re.fullmatch(r"select i1 ([^,]+), i(?:32|64) ([^,]+), i(?:32|64) (.+)", rhs):
            return np.where(self.val(m[1]), self.val(m[2]), self.val(m[3]))
        if m := re.fullmatch(r"icmp (\w+) i64 ([^,]+), (.+)", rhs):
            return super()._eval(f"icmp {m[1]} i32 {m[2]}, {m[3]}")
        return super()._eval(rhs)

    def _asm(self, line: str) -> None:
        m = re.fullmatch(r'call void asm sideeffect "(.*)", "[^"]*"\((.*)\)', line)
        assert m and "st.global" not in m[1], line
        args = [np.broadcast_to(self.val(a.split()[-1]), (self.threads,)) for a in m[2].split(", ")]
        if "red.global.add.v4.f32" in m[1]:  # vector-red: four consecutive f32 at the address
            addr, *vs, pred = args
            assert len(vs) == 4, line
        else:
            assert "red.global.add.f32" in m[1], line
            addr, v, pred = args
            vs = [v]
        for t in np.flatnonzero(pred):
            for k, v in enumerate(vs):
                self.adds.append((int(addr[t]) + F32 * k, float(v[t])))


# (value type, warps of the block, tensor rows, cols, tile coordinates)
CASES = [
    ("rt<f32, 64, 64, layout={kind = wgmma_acc, wg = 1}>", 4, 100, 72, (1, 1)),   # ragged both ways
    ("rt<f32, 64, 64, layout={kind = mma_c, warps = 4}>", 4, 64, 64, (0, 0)),
    ("rt<f32, 16, 64, layout={kind = row, warps = 4, vec = 4}>", 4, 16, 200, (0, 3)),
    ("rt<f32, 16, 16, layout={kind = row, warps = 2, vec = 4}>", 4, 20, 20, (1, 0)),  # 2 warps hold it, 4 run
    ("rv<f32, 64, layout={kind = col_vec, of = row, warps = 4, vec = 4}>", 4, 1, 100, (0, 1)),  # every warp holds it
    ("rv<f32, 64, layout={kind = acc_row_vec, wg = 1}>", 4, 1, 64, (0, 0)),        # every lane of a quad holds it
    ("rv<f32, 64, layout={kind = row_vec, warps = 4}>", 4, 1, 64, (0, 0)),
]


# the cases whose lane chunks hold four f32, again with vector-red's `red_vec = 4` (red.global.add.v4.f32)
VEC_CASES = [c for c in CASES if "vec = 4" in c[0]]


@pytest.mark.parametrize(("tname", "warps", "rows", "cols", "at"), CASES, ids=[c[0] for c in CASES])
def test_each_element_is_added_once(tname: str, warps: int, rows: int, cols: int, at: tuple) -> None:
    _check_adds(tname, warps, rows, cols, at, "")


@pytest.mark.parametrize(("tname", "warps", "rows", "cols", "at"), VEC_CASES, ids=[c[0] for c in VEC_CASES])
def test_each_element_is_added_once_four_at_a_time(tname: str, warps: int, rows: int, cols: int, at: tuple) -> None:
    asm = _check_adds(tname, warps, rows, cols, at, ", red_vec = 4")
    assert "red.global.add.v4.f32" in asm and "red.global.add.f32" not in asm


def _check_adds(tname: str, warps: int, rows: int, cols: int, at: tuple, attrs: str) -> str:
    vector = tname.startswith("rv")
    gtype = "gl<f32>[S]" if vector else "gl<f32>[R, S]"
    coords = "%by" if vector else "%bx, %by"
    text = f"""tk.kernel @k {{grid = ["1"], warps = {warps}}} {{
  ^(%Y: {gtype})
  %bx = tk.block_id {{dim = 0}} : i32
  %by = tk.block_id {{dim = 1}} : i32
  %v = tk.fill {{value = 0.0}} : {tname}
  tk.store %Y, %v, {coords} {{reduce = "add"{attrs}}}
}}
"""
    kernel = parse_module(text, "k.tkir").kernel
    bx, by, fill, store = kernel.body.ops
    t = fill.result.type
    threads = 32 * warps
    names = [f"%v_{s}" for s in range(_Cx(threads, {}).nslots(t))]
    vals = {id(kernel.body.args[0]): Global("%Y", kernel.body.args[0].type), id(bx.result): "%bx",
            id(by.result): "%by", id(fill.result): Frag(t, names)}
    cx = _Cx(threads, vals)
    shape = (t.rows, t.cols) if not vector else (t.n,)
    tile = np.arange(int(np.prod(shape)), dtype=float).reshape(shape) + 1
    env: dict[str, object] = {"%tid": np.arange(threads), "%Y": 0, "%R": rows, "%S": cols,
                              "%bx": at[0], "%by": at[1]}
    lay = register_layout(t)
    tids = np.arange(threads) % lay.threads
    for name, c in zip(names, slot_coords(lay, tile_shape(t), NumpyBuilder(), tids), strict=True):
        env[name] = tile[tuple(np.broadcast_to(np.asarray(x), tids.shape) for x in c)]
    store_registers_elementwise(cx, store)
    sim = _RedSimt(threads, env)
    sim.run(cx.w.lines)
    total = np.zeros(rows * cols)
    count = np.zeros(rows * cols, int)
    for addr, v in sim.adds:
        i = addr // F32
        assert 0 <= i < rows * cols, f"an add outside the tensor: byte {addr}"
        total[i] += v
        count[i] += 1
    want = np.zeros((rows, cols))
    if vector:
        c0 = at[1] * t.n
        part = tile[:max(0, cols - c0)]
        want[0, c0:c0 + part.size] = part
        n_in = part.size
    else:
        r0, c0 = at[0] * t.rows, at[1] * t.cols
        part = tile[:rows - r0, :cols - c0]
        want[r0:r0 + part.shape[0], c0:c0 + part.shape[1]] = part
        n_in = part.size
    assert count.max() <= 1, f"an element added {count.max()} times"
    assert count.sum() == n_in
    np.testing.assert_array_equal(total.reshape(rows, cols), want)
    return "\n".join(cx.w.lines)
