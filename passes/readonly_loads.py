"""readonly-loads: read the tensors a kernel never writes through the non-coherent read-only path.

Matches each kernel's `gl` parameters whose every use is a `tk.load` into registers (`rt` / `rv`) or a
`tk.gather` (rows picked by an index vector):
no store, no copy into shared memory (a TMA copy or cp.async names the tensor as an operand too). Each of those
loads gets `readonly = true`, and the kernel `readonly_params = ["X", ...]` (the parameters, in order).
The backend then emits the loads as `ld.global.nc` (PTX ISA: ld.global.nc, sm_32 and later; with
`.L2::cache_hint` when cache-policy also marked them, sm_80 and later: both targets), and the launch
description lists the parameters under `readonly`.

A load that reads again what an earlier pass read also gets `reread = true`: a load inside a loop
that stores to global memory, of a parameter also loaded outside that loop (layernorm.tk's chunked
output loop re-reads X after the statistics loop). The backend emits it with `.L1::no_allocate`.
Two `ld.global.nc` of one address with the same qualifiers are, to ptxas, the same value: it keeps
the first pass's registers live across the second pass instead of loading again, which is what the
chunked kernels exist to avoid (layernorm D = 16384, DC = 2048, 4 blocks per SM: 276 bytes of spills
with plain `.nc` on the re-reads, none without the pass). With a different qualifier it loads again,
and still issues those loads above the stores. (No L1 allocation for a second read is also what
the line is worth by then.)

Why: with plain `ld.global`, ptxas must assume a later load may read what an earlier `st.global`
wrote, so it never issues a load above a store. A row kernel's chunk loop (layernorm.tk with D > DC:
load X, W and Bias chunk c, store Y chunk c, then chunk c + 1) became one L2 round trip per chunk,
one after another. Read-only loads carry no such dependence: ptxas issues all chunks' loads first
(LDG.E.64.CONSTANT above every STG in the SASS, tests/backend/test_backend_sass.py), and may reuse a value an
earlier load of the same address returned. This is what `const T *__restrict__` gives nvcc.

The contract (the same as `__restrict__`): while the kernel runs, no memory a read-only parameter
covers is written, through another argument or otherwise. tkir.backend.runtime.bind checks the part
it can see before every launch: a read-only tensor argument overlapping any other tensor argument
(an in-place call such as `k(X, W, B, X)`) is a LaunchError, and so in the C launcher `--emit c`
writes. Kernels that must run in place: leave the pass out (`--passes`), which is also the ablation.
"""

from __future__ import annotations

from tkir.ir import Module, Operation, parent_op
from tkir.passes.analysis import global_store, register_load_from_global
from tkir.passmanager import Options, Pass
from tkir.types import GlobalType

ATTR = "readonly"                 # on tk.load (tkir/ops.py READONLY_ATTR)
REREAD_ATTR = "reread"            # on tk.load: read again after an earlier pass (tkir/ops.py REREAD_ATTR)
KERNEL_ATTR = "readonly_params"   # on the kernel: the parameters read only (backend/launch.py)


class ReadonlyLoads(Pass):
    name = "readonly-loads"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            params = [a for a in kernel.body.args if isinstance(a.type, GlobalType)]
            uses: dict[int, list[Operation]] = {id(a): [] for a in params}
            for op in kernel.walk():
                for v in op.operands:
                    if id(v) in uses:
                        uses[id(v)].append(op)
            readonly = [a for a in params if uses[id(a)]
                        and all(_reads_only(op, a) for op in uses[id(a)])]
            for a in readonly:
                for op in uses[id(a)]:
                    op.attrs[ATTR] = True
                    if _rereads(op, uses[id(a)]):
                        op.attrs[REREAD_ATTR] = True
            if readonly:
                kernel.attrs[KERNEL_ATTR] = [a.name for a in readonly]


def _reads_only(op: Operation, param) -> bool:
    """op reads `param` into registers (a load, or a gather of rows) and uses it no other way (only as the
    load's source)."""
    if op.name == "tk.gather":  # rows picked by an index vector: a read of the table, as a load is
        return op.operands[0] is param and all(v is not param for v in op.operands[1:])
    return register_load_from_global(op) and op.operands[0] is param \
        and all(v is not param for v in op.operands[1:])


def _rereads(op: Operation, loads: list[Operation]) -> bool:
    """op sits in a loop that stores to global memory, and another load of its tensor lies outside
    that loop (the innermost scf.for around op)."""
    loop = _enclosing_loop(op)
    if loop is None or not any(global_store(inner) for inner in loop.walk()):
        return False
    inside = {id(o) for o in loop.walk()}
    return any(id(other) not in inside for other in loads)


def _enclosing_loop(op: Operation) -> Operation | None:
    p = parent_op(op)
    while p is not None and p.name != "scf.for":
        p = parent_op(p)
    return p
