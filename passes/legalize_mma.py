"""legalize-mma: give every tk.mma operands the target's matrix instructions can read.

* A register operand with `trans_a` / `trans_b`: mma.sync and wgmma read register fragments in one
  fixed orientation (only shared operands have a transposed form: ldmatrix.trans, or wgmma's
  MN-major descriptors; HOPPER.md §2.3, §6.3), so the transpose becomes an explicit
  `tk.transpose` of the operand and the flag is cleared.
* On sm_90a a register B operand: wgmma reads B only from shared memory (its RS form takes A from
  registers, never B; HOPPER.md §1.4), so B is staged first: a `tk.alloc` of B's shape at the
  kernel's top level, a `tk.store %alloc, %b` right before the mma, and the mma reads the alloc
  (a `trans_b` then stays: wgmma reads a transposed shared B through its descriptor).

* fp8 operands off sm_90a: a located error (only wgmma has 8-bit forms here; sm_80 has no fp8 mma at all,
  and the backend lowers no sm_89 mma.sync e4m3).

Runs right after the first canonicalize, before infer-layouts chooses the fragments these ops imply.
"""

from __future__ import annotations

from tkir.ir import Module, Operation, Value
from tkir.passmanager import Options, Pass, PassError
from tkir.scalar import FP8_DTYPES
from tkir.types import TileType, is_register

WGMMA_TARGET = "sm_90a"  # the target whose mma (wgmma) takes B from shared memory only
TRANS_FLAGS = ("trans_a", "trans_b")  # operand 0 and operand 1


class LegalizeMma(Pass):
    name = "legalize-mma"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            n_staged = 0
            for op in [o for o in kernel.walk() if o.name == "tk.mma"]:
                fp8 = [v.type.dtype for v in op.operands[:2] if v.type.dtype in FP8_DTYPES]
                if fp8 and options.target != WGMMA_TARGET:
                    raise PassError(op.loc, f"an fp8 '@' ({fp8[0]}) needs {WGMMA_TARGET}'s wgmma: {options.target} "
                                            "has no fp8 mma.sync in this backend",
                                    hint="cast the operands to bf16 for this target: bf16(x)")
                b = op.operands[1]
                if options.target == WGMMA_TARGET and is_register(b.type):
                    op.operands[1] = _stage(kernel, op, b, n_staged)  # trans_b now applies to shared B
                    n_staged += 1
                for idx, flag in enumerate(TRANS_FLAGS):
                    if op.attrs.get(flag) is True and is_register(op.operands[idx].type):
                        op.operands[idx] = _transpose(op, op.operands[idx])
                        del op.attrs[flag]


def _transpose(mma: Operation, v: Value) -> Value:
    """`%t = tk.transpose %v` right before the mma."""
    t = v.type
    assert isinstance(t, TileType)
    rt = TileType("rt", t.dtype, t.cols, t.rows)
    op = Operation("tk.transpose", [v], [rt], result_names=[f"{v.name}_t" if v.name else None], loc=mma.loc)
    mma.parent.insert_before(mma, op)
    return op.result


def _stage(kernel: Operation, mma: Operation, b: Value, n: int) -> Value:
    """A shared tile of B's shape at the kernel's top level, written right before the mma."""
    t = b.type
    assert isinstance(t, TileType)
    name = f"mma_b{n}" if n else "mma_b"
    alloc = Operation("tk.alloc", [], [TileType("st", t.dtype, t.rows, t.cols)], result_names=[name], loc=mma.loc)
    kernel.body.insert(0, alloc)
    mma.parent.insert_before(mma, Operation("tk.store", [alloc.result, b], [], loc=mma.loc))
    return alloc.result
