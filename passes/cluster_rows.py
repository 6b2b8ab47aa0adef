"""cluster-rows: spread a register-only kernel's block over a cluster of C CTAs (C SMs) on sm_90a.

Rewrites nothing but the kernel's attrs: a kernel whose source asks (`@cluster(C)`, C > 1, the kernel attr
`cluster_requested = C`) gets `cluster = C` when it qualifies. The block stays the unit of the IR: its
W warps (`@warpgroups` or `@warps`) hold its tiles as before, and the interpreter runs it as one block. The backend
then launches C CTAs of W / C warps per block, `.reqnctapercluster C, 1, 1`: logical thread t is
thread t mod (32 W / C) of CTA rank t div (32 W / C) of the block's cluster, `block.x` is the cluster's
index, and a row reduction whose parts span CTAs exchanges them through distributed shared memory
(each thread writes its partial into every CTA's scratch with `st.shared::cluster`, then one
`barrier.cluster` instead of `bar.sync`; backend/rules_memory.py `combine_row_parts`). plan-occupancy
plans registers and resident blocks per CTA, and the launch description says `"cluster": [C, 1, 1]`
with the grid in CTAs.

Why: a row of D = 16384 bf16 held in registers needs 256 threads (64 f32 per thread at 128 registers),
so at most two such blocks fit on an SM, and each waits for its whole row before it reduces; D = 8192
on 128 threads runs four blocks per SM and reaches 101.6% of the copy bandwidth, against 98.2% for
D = 16384 (docs/experiments.md, "Wide rows: a rows loop and clusters"). With C = 2 each SM runs four CTAs
holding half a row each.

Qualifies: a kernel whose values all live in registers or global memory (no shared tile or vector, no
`tk.mma`, roles, TMA, layout conversions, transposes, column reductions, Stream-K workspace: their
exchanges go through one CTA's shared memory) and whose warps divide into C equal CTAs. Anything else
that asks is a located error; on sm_80 (no clusters) the request is recorded as skipped
(`cluster_skipped`) and the block runs as one CTA of all its threads, which is the same program.

Ablation: a pipeline without cluster-rows leaves every kernel one CTA per block (the `@cluster(1)`
kernel). Test: tests/filecheck/passes/cluster-rows.tk; the GPU and interpreter checks in
tests/passes/test_cluster_rows.py.
"""

from __future__ import annotations

from tkir.diagnostics import CompileError
from tkir.facts import compute_warpgroups
from tkir.ir import Module, Operation
from tkir.passes.analysis import CLUSTER_ATTR
from tkir.passmanager import Options, Pass
from tkir.target import WARPS_PER_WARPGROUP

REQUEST_ATTR = "cluster_requested"  # frontend/annotations.py CLUSTER_ATTR
SKIPPED_ATTR = "cluster_skipped"
# ops whose lowering exchanges data between warps through one CTA's shared memory, or that need roles (every
# shared tile or vector is a tk.alloc's)
_REFUSED = {"tk.alloc": "a shared allocation",
            "tk.mma": "a matrix product", "tk.convert_layout": "a layout conversion",
            "tk.transpose": "a register transpose", "tk.outer": "an outer product", "tk.role": "warp roles",
            "tk.workspace": "a Stream-K workspace", "tk.partial_store": "a Stream-K partial",
            "tk.partial_add": "a Stream-K partial", "tk.store_staged": "a staged store"}


class ClusterRows(Pass):
    name = "cluster-rows"

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            c = kernel.attrs.get(REQUEST_ATTR)
            if not isinstance(c, int) or c <= 1:
                continue
            if options.target != "sm_90a":
                kernel.attrs[SKIPPED_ATTR] = (f"{options.target} has no thread block clusters: each block runs as "
                                              "one CTA of all its threads")
                continue
            _check(kernel, c)
            kernel.attrs[CLUSTER_ATTR] = c


def _check(kernel: Operation, c: int) -> None:
    """Refuse, at the op, what a cluster of `c` CTAs cannot run (see the module docstring)."""
    hint = "@cluster(C) spreads a block over C SMs for kernels whose tiles live in registers (row kernels)"
    for op in kernel.walk():
        why = _REFUSED.get(op.name) or ("a pipeline or TMA op" if op.name.startswith(("pipe.", "tma.")) else None)
        if why is None and op.name == "tk.reduce" and str(op.attrs.get("axis")) == "col":
            why = "a column reduction"
        if why is not None:
            raise CompileError(op.loc, f"cluster-rows: @cluster({c}) with {why} ({op.name}): its exchange between "
                                       "warps goes through one CTA's shared memory", hint=hint)
    warps = kernel.attrs.get("warps")  # @warps(W) with W not a multiple of 4 (infer-layouts keeps it)
    if not isinstance(warps, int):
        warps = WARPS_PER_WARPGROUP * compute_warpgroups(kernel)
    if warps % c:
        raise CompileError(kernel.loc, f"cluster-rows: @cluster({c}) needs the block's {warps} warps to split into "
                                       f"{c} CTAs of equal whole warps",
                           hint="use more warps or warpgroups, or a smaller cluster")
