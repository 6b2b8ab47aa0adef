"""fold-acc-init: `(a @ b) − v` with v a broadcast vector becomes `a @ b` accumulated onto `−v`.

Matches, in one block, `%p = tk.mma %a, %b, %z` whose accumulator `%z` is a zero `tk.fill` read only by that mma,
and whose f32 result is read only by `%r = tk.sub %p, %v {bcast = row|col}` or `%r = tk.add %p, %v {bcast}` (either
operand order for the add), with %v an f32 register vector defined before the mma. Rewrites:

* `%init = tk.sub %z, %v {bcast}` (or `tk.add`) is inserted right before the mma: the zero tile minus (plus) the
  broadcast vector, once per element, as the subtraction did;
* the mma accumulates onto %init (`tk.mma %a, %b, %init`), and %r's readers read the mma's result; %r goes.

Why: the matrix instructions add their product to the accumulator registers (wgmma, mma.sync: D = A·B + C), so
starting from −v costs nothing where starting from 0 did, and %v's registers die before the product is issued
instead of staying live until it is read. In attention's backward (examples/attention_bwd.tk), dS = P ∘ (dP − Δ)
with dP = dO Vᵀ: Δ (one f32 per query column, 16 registers a thread at 64 queries) was live across both products
of the iteration and P's exponentials, at the kernel's register peak; folded, dP's accumulator holds dP − Δ when
the product lands (H100, 64 x 128 blocks: 343-361 against 324-347 TFLOP/s; docs/experiments.md).
The values differ only in rounding: the product's partial sums are added to −v instead of v being subtracted from
their total (one f32 rounding placed differently).

**The loop form** (on by default; `fold-acc-init{loops=false}` is its ablation): `%z = tk.fill 0` read only as the
initial value of one `scf.for` slot that the body only accumulates into with one `tk.mma` (`acc += a @ b`), and the
loop's final value read only by `tk.add/tk.sub %res, %v {bcast}` after it: the loop starts from `%z + %v` (`%z -
%v`) and the addition goes. A %v loaded after the loop from a tensor the kernel never stores, at coordinates known
before the loop (`reg b: rv<bf16, BN> = Bias[block.y]`, with one cast to f32), is loaded before the loop instead;
its registers die before the first product. Why: GEMM + bias + GELU's 128 x 256 tile
(examples/user/gemm_bias_gelu.tk) held the f32 bias (64 registers a thread) beside the 128-register accumulator in
its epilogue and ptxas spilled 32 B; with the fold it assembles without spills, so auto consts can take it
(1.03-1.06x cuBLAS measured with the spill, against 0.94-0.96x at the 256 x 128 tile taken without it). Measured on
an H100 (on against off, interleaved; docs/experiments.md, "The column reduction's scratch padding, fold-acc-init's
loop form on, the first Nsight Compute runs"): the user GEMM + bias + GELU 1.10-1.12x faster (its 128 x 256 tile),
examples/linear.tk 0.999-1.004x.

sm_90a only: on sm_80 the folded attention backward spills where the unfolded one does not (32 x 128 blocks,
causal, deterministic: ptxas 12 B at 255 registers with the fold, none without; why is not investigated).
Runs before infer-layouts (the new tile gets the accumulator's layout like any mma operand). Ablation:
`--pass-edits=-fold-acc-init`.
"""

from __future__ import annotations

from tkir.ir import Block, Module, Operation, Value, parent_op
from tkir.passes.analysis import classify_copy, written_globals
from tkir.passmanager import Options, Pass, param
from tkir.types import TileType, VectorType

FOLDED = ("tk.sub", "tk.add")
SM90A = "sm_90a"  # the target whose wgmma this is measured on


class FoldAccInit(Pass):
    name = "fold-acc-init"
    loops: bool = param(True, "also the loop form: a product accumulated from zero over a loop, then + or - a "
                              "broadcast vector (false: only the straight-line form)")

    def run(self, module: Module, options: Options) -> None:
        if options.target != SM90A:
            return  # sm_80 (mma.sync): measured worse, see the module docstring
        for kernel in module.kernels():
            stored = written_globals(kernel)
            for op in list(kernel.walk()):
                for r in op.regions:
                    _rewrite_block(r.block)
                    if self.loops:
                        _rewrite_loops(r.block, stored)


def _readers(blk: Block) -> dict[int, list[Operation]]:
    """id(value) -> the ops of the block (or nested in them) that read it."""
    out: dict[int, list[Operation]] = {}
    for op in blk.ops:
        for inner in op.walk():
            for v in dict.fromkeys(inner.operands):
                out.setdefault(id(v), []).append(inner)
    return out


def _is_f32_tile(v: Value) -> bool:
    t = v.type
    return isinstance(t, TileType) and t.space == "rt" and t.dtype == "f32"


def _is_zero_fill(v: Value, blk: Block) -> bool:
    z = v.owner
    return (isinstance(z, Operation) and z.name == "tk.fill" and z.parent is blk and _is_f32_tile(v)
            and z.attrs.get("value") == 0.0)


def _match(mma: Operation, blk: Block, readers: dict[int, list[Operation]]) -> tuple[Operation, Value] | None:
    """(the subtraction or addition, the vector) where `mma` matches the docstring's pattern."""
    if mma.name != "tk.mma" or len(mma.operands) != 3 or not _is_f32_tile(mma.result):
        return None
    z = mma.operands[2]
    if not _is_zero_fill(z, blk) or readers.get(id(z)) != [mma]:
        return None
    users = readers.get(id(mma.result), [])
    if len(users) != 1:
        return None
    r = users[0]
    bcast = r.attrs.get("bcast")
    if r.name not in FOLDED or r.parent is not blk or getattr(bcast, "name", bcast) not in ("row", "col") \
            or r.result.type != mma.result.type:
        return None
    p, v = r.operands
    if r.name == "tk.add" and v is mma.result:
        p, v = v, p
    if p is not mma.result or v is mma.result:
        return None
    vt = v.type
    if not (isinstance(vt, VectorType) and vt.space == "rv" and vt.dtype == "f32") or not _defined_before(v, mma):
        return None  # (a bias loaded after the product: the accumulator cannot start from it)
    return r, v


def _defined_before(v: Value, op: Operation) -> bool:
    """v is defined before `op` runs: an argument of a block around it, or an op before it in its block or before
    the op that contains it in an enclosing block."""
    cur: Operation | None = op
    while cur is not None and cur.parent is not None:
        blk = cur.parent
        if v in blk.args:
            return True
        owner = v.owner
        if isinstance(owner, Operation) and owner.parent is blk:
            return blk.ops.index(owner) < blk.ops.index(cur)
        cur = parent_op(cur)
    return False


def _rewrite_block(blk: Block) -> None:
    readers = _readers(blk)
    for mma in list(blk.ops):
        if mma.parent is not blk:
            continue
        found = _match(mma, blk, readers)
        if found is None:
            continue
        r, v = found
        z = mma.operands[2]
        init = Operation(r.name, [z, v], [z.type], {"bcast": r.attrs["bcast"]},
                         result_names=[f"{mma.result.name or 'acc'}_init"], loc=r.loc)
        blk.insert_before(mma, init)
        mma.operands = [mma.operands[0], mma.operands[1], init.result]
        for op in blk.ops:
            for inner in op.walk():
                inner.operands = [mma.result if x is r.result else x for x in inner.operands]
        blk.remove(r)
        readers = _readers(blk)


def _rewrite_loops(blk: Block, stored: set[int]) -> None:
    """The loop form (module docstring): a product accumulated over a loop from zero, then `+ v` / `- v`."""
    for loop in [op for op in blk.ops if op.name == "scf.for"]:
        if loop.parent is not blk:
            continue
        body = loop.regions[0].block
        term = body.terminator
        nargs = len(loop.operands) - 3
        for k in range(nargs):
            found = _match_loop(loop, body, term, k, blk, stored)
            if found is None:
                continue
            r, v, chain = found
            for op in chain:  # the vector's load (and cast), moved up: they read nothing the loop writes
                blk.remove(op)
                blk.insert_before(loop, op)
            z = loop.operands[3 + k]
            init = Operation(r.name, [z, v], [z.type], {"bcast": r.attrs["bcast"]},
                             result_names=[f"{loop.results[k].name or 'acc'}_init"], loc=r.loc)
            blk.insert_before(loop, init)
            ops = list(loop.operands)
            ops[3 + k] = init.result
            loop.operands = ops
            for op in blk.ops:
                for inner in op.walk():
                    inner.operands = [loop.results[k] if x is r.result else x for x in inner.operands]
            blk.remove(r)


def _match_loop(loop: Operation, body: Block, term: Operation | None, k: int, blk: Block, stored: set[int]
                ) -> tuple[Operation, Value, list[Operation]] | None:
    """(the add or subtraction after the loop, the vector, the ops to move before the loop) where carried slot `k`
    of `loop` starts from a zero tile read only by the loop, is only accumulated by one mma in the body, and its
    final value is read only by `tk.add/tk.sub %res, %v {bcast}` in `blk`."""
    if term is None or len(term.operands) <= k:
        return None
    z, arg, res = loop.operands[3 + k], body.args[1 + k], loop.results[k]
    mma = term.operands[k].owner
    # the body's own checks first: a loop without an accumulating mma costs no walk of the enclosing block (a
    # kernel of many loops stays linear: tests/tools/test_compile_time.py)
    if not (isinstance(mma, Operation) and mma.name == "tk.mma" and mma.parent is body and len(mma.operands) == 3
            and mma.operands[2] is arg and term.operands.count(mma.result) == 1):
        return None
    inner = _readers(body)
    if inner.get(id(arg)) != [mma] or inner.get(id(mma.result)) != [term]:
        return None
    readers = _readers(blk)
    if not _is_zero_fill(z, blk) or readers.get(id(z)) != [loop]:
        return None
    users = readers.get(id(res), [])
    if len(users) != 1:
        return None
    r = users[0]
    bcast = r.attrs.get("bcast")
    if r.name not in FOLDED or r.parent is not blk or getattr(bcast, "name", bcast) not in ("row", "col") \
            or r.result.type != res.type:
        return None
    p, v = r.operands
    if r.name == "tk.add" and v is res:
        p, v = v, p
    if p is not res or v is res:
        return None
    vt = v.type
    if not (isinstance(vt, VectorType) and vt.space == "rv" and vt.dtype == "f32"):
        return None
    if _defined_before(v, loop):
        return r, v, []
    chain = _hoistable(v, loop, blk, readers, stored)
    return None if chain is None else (r, v, chain)


def _hoistable(v: Value, loop: Operation, blk: Block, readers: dict[int, list[Operation]], stored: set[int]
               ) -> list[Operation] | None:
    """The ops after `loop` that make `v` from a global load (`tk.load` of a vector, optionally one `tk.cast`), in
    order, where each result is read only by the next (and `v` by the fold alone), the tensor is never stored
    and the coordinates are defined before the loop; None where `v` is made any other way."""
    op = v.owner
    chain: list[Operation] = []
    while isinstance(op, Operation) and op.parent is blk and len(chain) < 2:
        chain.insert(0, op)
        if op.name == "tk.load":
            c = classify_copy(op)
            if c is None or c[0] != "register" or id(c[1]) in stored:
                return None
            if not all(_defined_before(x, loop) for x in op.operands):
                return None
            break
        if op.name != "tk.cast" or len(op.operands) != 1:
            return None
        op = op.operands[0].owner
    if not chain or chain[0].name != "tk.load":
        return None
    for a, b in zip(chain, chain[1:], strict=False):
        if readers.get(id(a.result)) != [b]:
            return None
    if blk.ops.index(chain[0]) < blk.ops.index(loop):
        return None
    return chain
