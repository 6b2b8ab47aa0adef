"""Where each register slot of a distributed tile or vector lives, as expressions of the thread index.

`slot_coords(layout, shape, b, tid)` returns, for every register slot a thread holds, the logical
(row, col) of a tile (or (index,) of a vector) as expressions built with `b`, an expression builder.
The backend passes an LLVM builder (instructions on the thread index); the tests pass
`NumpyBuilder`, which evaluates the same formulas for all threads at once, and compare them with
`tkir.layout.fragment`, the layouts' definition. So the code the backend emits addresses exactly
the elements the layout passes assigned. Slots a thread does not hold (-1 in the table) are None.
"""

from __future__ import annotations

from typing import Protocol

WARP = 32
WARPGROUP = 128
QUAD = 4
WGMMA_M = 64  # HOPPER.md §1.2


class Builder(Protocol):
    def add(self, a: object, b: object) -> object: ...
    def mul(self, a: object, b: object) -> object: ...
    def div(self, a: object, b: object) -> object: ...
    def rem(self, a: object, b: object) -> object: ...


class NumpyBuilder:
    """Evaluates expressions on arrays of thread indices (for tests)."""

    def add(self, a, b):
        return a + b

    def mul(self, a, b):
        return a * b

    def div(self, a, b):
        return a // b

    def rem(self, a, b):
        return a % b


def _parts(b: Builder, tid: object) -> dict[str, object]:
    lane = b.rem(tid, WARP)
    return {"lane": lane, "warp": b.div(tid, WARP), "g": b.div(lane, QUAD), "q": b.rem(lane, QUAD),
            "wg": b.div(tid, WARPGROUP), "wwg": b.rem(b.div(tid, WARP), 4)}


def slot_coords(layout: dict, shape: tuple[int, ...], b: Builder, tid: object) -> list[tuple | None]:
    kind = str(layout["kind"])
    p = _parts(b, tid)
    if kind in ("wgmma_acc", "wgmma_a"):  # wgmma_a: the 16-bit A fragment has the same order (§1.6)
        rows, cols = shape
        wg = int(layout.get("wg", 1))
        slab = rows // wg
        base = b.add(b.add(b.mul(p["wg"], slab), b.mul(p["wwg"], 16)), p["g"])
        col0 = b.mul(p["q"], 2)
        out = []
        for mb in range(slab // WGMMA_M):
            for i in range(cols // 2):
                r = b.add(base, mb * WGMMA_M + 8 * ((i >> 1) & 1))
                c = b.add(col0, 8 * (i >> 2) + (i & 1))
                out.append((r, c))
        return out
    if kind == "row":
        rows, cols = shape
        warps, vec = int(layout["warps"]), int(layout["vec"])
        slab, cpr = rows // warps, cols // vec
        steps = -(-slab * cpr // WARP)
        out = []
        for s in range(steps):
            e = b.add(p["lane"], s * WARP)
            if (s + 1) * WARP > slab * cpr:
                raise ValueError("row layout with a partial last step is not supported by the backend")
            r = b.add(b.mul(p["warp"], slab), b.div(e, cpr))
            c0 = b.mul(b.rem(e, cpr), vec)
            out.extend((r, b.add(c0, v)) for v in range(vec))
        return out
    if kind == "acc_row_vec":
        (n,) = shape
        wg = int(layout.get("wg", 1))
        slab = n // wg
        base = b.add(b.add(b.mul(p["wg"], slab), b.mul(p["wwg"], 16)), p["g"])
        return [(b.add(base, mb * WGMMA_M + h),) for mb in range(slab // WGMMA_M) for h in (0, 8)]
    if kind == "row_vec":
        (n,) = shape
        slab = n // int(layout["warps"])
        return [(b.add(b.mul(p["warp"], slab), i),) for i in range(slab)]
    if kind == "col_vec" and str(layout.get("of")) == "row":
        (n,) = shape
        vec = int(layout["vec"])
        cpr = n // vec
        if WARP % cpr == 0:
            chunks = [b.rem(p["lane"], cpr)]
        elif cpr % WARP == 0:
            chunks = [b.add(p["lane"], WARP * k) for k in range(cpr // WARP)]
        else:
            return [(i,) for i in range(n)]
        return [(b.add(b.mul(c, vec), v),) for c in chunks for v in range(vec)]
    if kind == "col_vec" and str(layout.get("of")) == "wgmma_acc":
        (n,) = shape
        return [(b.add(b.mul(p["q"], 2), 8 * j + e),) for j in range(n // 8) for e in (0, 1)]
    raise NotImplementedError(f"backend: no slot formulas for layout '{kind}'")


def row_groups(layout: dict, shape: tuple[int, int]) -> tuple[int, int]:
    """For a reduction along rows: (lanes sharing one row within a warp, xor distance limit).

    `row`: a row's chunks sit in min(cpr, 32) consecutive lanes; `wgmma_acc`: the 4 lanes of a quad.
    """
    kind = str(layout["kind"])
    if kind == "wgmma_acc":
        return QUAD, QUAD
    if kind == "row":
        cpr = shape[1] // int(layout["vec"])
        n = min(cpr, WARP)
        return n, n
    raise NotImplementedError(f"backend: no row reduction for layout '{kind}'")
