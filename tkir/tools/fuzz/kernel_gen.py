"""Typed random kernels: programs shaped like real ones (row-wise and matrix-product kernels), most of
which pass the front end, so that the passes, the LLVM lowering and PTX emission see varied input.

Choices are drawn from the values kernels use (tile sides 16..256, bf16/f16/f32, 1..4 stages, the
swizzles, 1..3 consumer warpgroups, transposed operands, epilogues of element-wise math, broadcasts,
reductions, masks, run-time `if`s). Shapes and resource limits are not checked here: a kernel that
asks for too much shared memory or too many registers must get a located error from the compiler.
"""

from __future__ import annotations

import random

SIDES = (16, 32, 64, 128, 256)
ROW_COUNTS = (1, 2, 4, 8, 16, 32, 64)
WIDTHS = (16, 64, 128, 256, 512, 1024, 2048)
MMA_DTYPES = ("bf16", "f16")
IO_DTYPES = ("bf16", "f16", "f32")
UNARY = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "abs", "tanh", "sigmoid", "erf")
BINARY = ("+", "-", "*", "/")
CMP = ("<", "<=", ">", ">=", "==", "!=")
SWIZZLES = ("128", "64", "32", "none")
SCALARS = ("0.5", "2.0", "1.0", "1e-5", "3", "-1.5", "0")


class _Expr:
    """Random f32 register-tile expressions over a tile of R x C, with row/col vectors and scalars."""

    def __init__(self, rng: random.Random, tiles: list[str], rows: int, cols: int):
        self.rng, self.tiles, self.rows, self.cols = rng, tiles, rows, cols

    def tile(self, depth: int) -> str:
        rng = self.rng
        if depth <= 0 or rng.random() < 0.25:
            return rng.choice(self.tiles)
        k = rng.randrange(9)
        if k == 0:
            return f"{rng.choice(UNARY)}({self.tile(depth - 1)})"
        if k == 1:
            return f"({self.tile(depth - 1)} {rng.choice(BINARY)} {self.tile(depth - 1)})"
        if k == 2:
            return f"({self.tile(depth - 1)} {rng.choice(BINARY)} {rng.choice(SCALARS)})"
        if k == 3:
            return f"({self.tile(depth - 1)} {rng.choice(BINARY)} {self.rowvec(depth - 1)})"
        if k == 4:
            return f"({self.tile(depth - 1)} {rng.choice(BINARY)} col({self.colvec(depth - 1)}))"
        if k == 5:
            return (f"where({self.tile(depth - 1)} {rng.choice(CMP)} {rng.choice(SCALARS)}, "
                    f"{self.tile(depth - 1)}, {rng.choice(('0', '-inf', '1.0'))})")
        if k == 6:
            return f"{rng.choice(('max', 'min'))}({self.tile(depth - 1)}, {self.tile(depth - 1)})"
        if k == 7 and self.rows == self.cols and self.rows >= 16:
            return f"mask_causal({self.tile(depth - 1)}, block.x * {self.rows}, 0)"
        if k == 8:
            return f"where(row_index({self.tiles[0]}) >= col_index({self.tiles[0]}), {self.tile(depth - 1)}, 0)"
        return f"f32(bf16({self.tile(depth - 1)}))"

    def rowvec(self, depth: int) -> str:
        red = self.rng.choice(("row_max", "row_sum", "row_min", "row_mean", "row_var"))
        return f"{red}({self.tile(depth - 1)})"

    def colvec(self, depth: int) -> str:
        return f"{self.rng.choice(('col_max', 'col_sum', 'col_min'))}({self.tile(depth - 1)})"


def row_kernel(rng: random.Random) -> str:
    """Rows of width D in registers, a chain of element-wise math and reductions, one store."""
    rows, width = rng.choice(ROW_COUNTS), rng.choice(WIDTHS)
    dt = rng.choice(IO_DTYPES)
    wg = rng.choice((1, 1, 2, 4))
    head = f"@warpgroups(consumers={wg})\n" if rng.random() < 0.5 else ""
    if rng.random() < 0.2:  # a resident-block floor, some of which cannot fit (a located refusal)
        head += f"@blocks_per_sm({rng.choice((0, 1, 2, 4, 8, 33))})\n"
    if rng.random() < 0.1:  # a 1-D grid without roles: the persistent pass leaves it
        head += f"@persistent({rng.choice((0, 1))})\n"
    if rng.random() < 0.15:  # a block over a cluster of CTAs (refused where the warps do not split, 3 at the argument)
        head += f"@cluster({rng.choice((1, 2, 4, 3))})\n"
    params = [f"X: gl<{dt}>[N, D]", f"Y: gl<{dt}>[N, D]"]
    has_w = rng.random() < 0.4
    if has_w:
        params.insert(1, f"W: gl<{dt}>[D]")
    body = [f"    reg x: rt<{dt}, ROWS, D> = X[block.x, 0]", "    let xf = f32(x)"]
    tiles = ["xf"]
    e = _Expr(rng, tiles, rows, width)
    for i in range(rng.randint(1, 3)):
        body.append(f"    let t{i} = {e.tile(rng.randint(1, 3))}")
        tiles.append(f"t{i}")
    if has_w:
        body.append(f"    reg w: rv<{dt}, D> = W[0]")
        body.append(f"    let tw = {tiles[-1]} * col(f32(w))")
        tiles.append("tw")
    if rng.random() < 0.3:
        body.append("    if block.x == 0 {")
        body.append(f"        Y[block.x, 0] = {dt}({rng.choice(tiles)})")
        body.append("    }")
    if rng.random() < 0.2:
        body.append("    reg acc: rt<f32, ROWS, D> = 0")
        body.append("    for i in 0 .. 3 {")
        body.append(f"        acc += {rng.choice(tiles)}")
        body.append("    }")
        tiles.append("acc")
    body.append(f"    Y[block.x, 0] = {dt}({tiles[-1]})")
    return (f"{head}kernel rows<ROWS={rows}, D={width}>({', '.join(params)})\n    grid(cdiv(N, ROWS))\n{{\n"
            + "\n".join(body) + "\n}\n")


def mma_kernel(rng: random.Random) -> str:
    """A gemm-shaped kernel: shared (or register) operands, a K loop of `acc += a @ b`, an epilogue."""
    bm, bn, bk = rng.choice(SIDES), rng.choice(SIDES), rng.choice(SIDES[:4])
    dt, out = rng.choice(MMA_DTYPES), rng.choice(IO_DTYPES)
    trans_b = rng.random() < 0.3
    reg_a = rng.random() < 0.2
    stages = rng.choice((1, 2, 3, 4))
    head = ""
    if rng.random() < 0.3:  # producers=0: no producer warpgroup, cp.async ring buffers (sm_90a)
        producers = rng.choice(("", "", ", producers=0"))
        head = f"@warpgroups(consumers={rng.choice((1, 2, 3))}{producers})\n"
    if rng.random() < 0.2:
        head += f"@stream_k({rng.choice((0, 1))})\n"
    if rng.random() < 0.15:
        head += f"@blocks_per_sm({rng.choice((0, 1, 2, 4))})\n"
    if rng.random() < 0.1:  # 2-D grids are persistent either way: the request changes nothing
        head += f"@persistent({rng.choice((0, 1))})\n"
    if rng.random() < 0.05:  # shared tiles and mma: cluster-rows refuses at the op (sm_80 skips)
        head += "@cluster(2)\n"
    b_dims = "[N, K]" if trans_b else "[K, N]"
    params = f"A: gl<{dt}>[M, K], B: gl<{dt}>{b_dims}, C: gl<{out}>[M, N]"
    if rng.random() < 0.2:
        params += ", alpha: f32"
    body = []
    sw = f"@swizzle({rng.choice(SWIZZLES)}) " if rng.random() < 0.25 else ""
    if reg_a:
        body.append(f"    reg a: rt<{dt}, BM, BK>")
    else:
        body.append(f"    {sw}shared a: st<{dt}, BM, BK>")
    body.append(f"    shared b: st<{dt}, BN, BK>" if trans_b else f"    shared b: st<{dt}, BK, BN>")
    body.append("    reg acc: rt<f32, BM, BN> = 0")
    if rng.random() < 0.8:
        body.append(f"    @stages({stages})")
    step = f" step {rng.choice((1, 2))}" if rng.random() < 0.1 else ""
    body.append(f"    for k in 0 .. cdiv(K, BK){step} {{")
    no_tma = "@no_tma " if rng.random() < 0.15 else ""
    body.append(f"        {no_tma}a = A[block.x, k]")
    body.append("        b = B[block.y, k]" if trans_b else "        b = B[k, block.y]")
    body.append("        acc += a @ b.T" if trans_b else "        acc += a @ b")
    body.append("    }")
    e = _Expr(rng, ["acc"], bm, bn)
    if rng.random() < 0.5:
        body.append(f"    acc = {e.tile(rng.randint(1, 2))}")
    if "alpha" in params:
        body.append("    acc = acc * alpha")
    if rng.random() < 0.2:
        body.append(f"    shared c: st<{out}, BM, BN>")
        body.append(f"    c = {out}(acc)")
        body.append("    C[block.x, block.y] = c")
    else:
        body.append(f"    C[block.x, block.y] = {out}(acc)")
    return (f"{head}kernel mm<BM={bm}, BN={bn}, BK={bk}>({params})\n    grid(cdiv(M, BM), cdiv(N, BN))\n{{\n"
            + "\n".join(body) + "\n}\n")


def attention_kernel(rng: random.Random) -> str:
    """attention_fwd.tk's online softmax with random block sizes, head dim, masking and stages."""
    bq, bkv, d = rng.choice(SIDES[1:4]), rng.choice(SIDES[1:4]), rng.choice((32, 64, 128, 256))
    causal = rng.random() < 0.5
    stages = rng.choice((1, 2, 3))
    mask = "        s = mask_causal(s, block.x * BQ, j * BKV)\n" if causal else ""
    blocks = "cdiv((block.x + 1) * BQ, BKV)" if causal else "N / BKV"
    # persistent blocks over the 3-D grid: launch order, or (causal: unequal tiles) the rotated order; 2 is refused
    head = f"@persistent({rng.choice((0, 1, 1, 2))})\n" if rng.random() < 0.4 else ""
    return (f"{head}kernel attn<BQ={bq}, BKV={bkv}, D={d}>(Q: gl<bf16>[B, H, N, D], K: gl<bf16>[B, H, N, D], "
            "V: gl<bf16>[B, H, N, D], O: gl<bf16>[B, H, N, D])\n    grid(N / BQ, H, B)\n{\n"
            "    shared q: st<bf16, BQ, D>\n    shared k: st<bf16, BKV, D>\n    shared v: st<bf16, BKV, D>\n"
            "    reg o: rt<f32, BQ, D> = 0\n    reg m: rv<f32, BQ> = -inf\n    reg l: rv<f32, BQ> = 0\n"
            "    reg s: rt<f32, BQ, BKV>\n    let scale = 1.4426950408889634 / sqrt(D)\n"
            f"    let kv_blocks = {blocks}\n    q = Q[block.z, block.y, block.x, 0]\n"
            f"    @stages({stages})\n    for j in 0 .. kv_blocks {{\n"
            "        k = K[block.z, block.y, j, 0]\n        v = V[block.z, block.y, j, 0]\n"
            f"        s = q @ k.T\n        s *= scale\n{mask}"
            "        let m_new = max(m, row_max(s))\n        let p = exp2(s - m_new)\n"
            "        let alpha = exp2(m - m_new)\n        l = l * alpha + row_sum(p)\n        o *= alpha\n"
            "        o += bf16(p) @ v\n        m = m_new\n    }\n    o /= l\n"
            "    O[block.z, block.y, block.x, 0] = bf16(o)\n}\n")


GENERATORS = ((row_kernel, 5), (mma_kernel, 5), (attention_kernel, 1))


def generate(rng: random.Random) -> str:
    """One kernel from a generator chosen by weight."""
    gens = [g for g, _ in GENERATORS]
    return rng.choices(gens, [w for _, w in GENERATORS])[0](rng)
