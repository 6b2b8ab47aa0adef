"""lower-to-llvm: pipelined tile IR -> LLVM IR text for the NVPTX back end (sm_90a or sm_80).

The driver: it builds the kernel's signature from its PTX parameters (tkir.backend.launch.kernel_params:
tensor maps, pointers, sizes, scalars, hidden ones), computes the aligned base of the
dynamic shared memory, and lowers the body op by op. Each op is lowered by exactly one rule of the
table in backend.rules, chosen by (op name, target, operand forms); the rules live in the
`rules_*` modules, one family each:

* rules_core: scalars (`arith.*`, `tk.size`, `tk.block_id`), `scf.for`, `scf.if`;
* rules_pipe: shared allocations, mbarriers, TMA copies, warp-specialized roles;
* rules_registers: register tiles in any layout (element-wise math, broadcasts, reductions, masks,
  16-byte-chunk global access of `row` tiles);
* rules_memory: element-by-element copies between registers, shared and global memory for every
  layout (the general rule where no specialised one applies);
* rules_sm80: cp.async, ldmatrix, mma.sync; rules_wgmma: wgmma, accumulator stores, the staged
  TMA-store epilogue; rules_streamk: stream-K partial tiles.

An op without a rule is a located error naming the op, the target and the operand forms. What the
families share has its own modules (backend.idioms: the PTX of barriers, fences and waits, and the
named-barrier table; backend.exchange: cross-thread exchanges; backend.shared_slots, backend.f32);
no family imports another (tests/backend/test_backend_rooms.py).
"""

from __future__ import annotations

from tkir.backend.cache_policy import create_policies
from tkir.backend.context import LoweringContext, SharedPlan, plan_shared, tile_stage_bytes
from tkir.backend.idioms import bulk_wait
from tkir.backend.launch import Param, PointerParam, ScalarParam, SizeParam, TensorMapParam, WorkspaceParam
from tkir.backend.llvm_text import param_names
from tkir.backend.rules import load_rules
from tkir.backend.values import HEADER, LLVM_TYPE, SMEM_ALIGN, Global, LoweringError
from tkir.facts import requested_blocks_per_sm
from tkir.ir import Module, Operation
from tkir.launch_bounds import streaming_blocks_per_sm
from tkir.target import SMEM_PER_BLOCK
from tkir.types import GlobalType

__all__ = ["SharedPlan", "lower_kernel", "plan_shared", "tile_stage_bytes"]



def lower_kernel(module: Module, params: tuple[Param, ...], target: str) -> tuple[str, int]:
    """LLVM IR text of the module's kernel, whose PTX parameters are `params` (kernel_params), and the
    dynamic shared memory it needs (bytes)."""
    load_rules()
    cx = LoweringContext(module, module.kernel, params, target)
    if cx.plan.total + SMEM_ALIGN > SMEM_PER_BLOCK:  # before lowering: IR text with 2**20 mbarriers, say
        raise _smem_overflow(module, cx.plan.total)
    text = _lower_function(cx)
    used = cx.plan.total if not cx.scratch_bytes else cx.scratch_offset + cx.scratch_bytes
    if cx.scratch_bytes and used + SMEM_ALIGN > SMEM_PER_BLOCK:
        raise LoweringError(module.kernel.loc, f"shared memory: the kernel's tiles ({cx.plan.total} B) and the "
                                               f"scratch area of its layout exchanges ({cx.scratch_bytes} B) exceed "
                                               f"{SMEM_PER_BLOCK} B per block",
                            hint="use fewer stages or smaller tiles, or avoid transposes and column reductions "
                                 "of large register tiles")
    if used + SMEM_ALIGN > SMEM_PER_BLOCK:  # IR text that skipped plan-occupancy (the launch would fail)
        raise _smem_overflow(module, used)
    return text, used + SMEM_ALIGN  # slack to round the base up to 1024 B


def _smem_overflow(module: Module, used: int) -> LoweringError:
    return LoweringError(module.kernel.loc, f"shared memory: the kernel's tiles need {used + SMEM_ALIGN} B "
                                            f"(with {SMEM_ALIGN} B of alignment slack), above the "
                                            f"{SMEM_PER_BLOCK} B a block may have", hint="use smaller tiles")


def _lower_function(cx: LoweringContext) -> str:
    w = cx.w
    sig = []
    names = param_names([p.name for p in cx.kernel_params])
    for p, name in zip(cx.kernel_params, names, strict=True):
        if isinstance(p, TensorMapParam):
            sig.append(f'ptr byval([128 x i8]) align 64 "nvvm.grid_constant" {name}')
            cx.tmaps[p.name] = name
        elif isinstance(p, PointerParam):
            sig.append(f"ptr addrspace(1) {name}")
            cx.params[p.tensor] = name
        elif isinstance(p, WorkspaceParam):
            sig.append(f"ptr addrspace(1) {name}")
            cx.params[p.name] = name
        else:
            sig.append(f"{LLVM_TYPE[p.dtype]} {name}")
            if isinstance(p, SizeParam):
                cx.sizes[str(p.size)] = name
            else:
                cx.params[p.scalar if isinstance(p, ScalarParam) else p.name] = name
    for a in cx.kernel.body.args:
        if isinstance(a.type, GlobalType):
            cx.set(a, Global(cx.params[a.name], a.type))
        else:
            cx.set(a, cx.params[a.name])
    w.start_block("entry")
    cx.tid = w.sreg("tid.x")
    if cx.cluster > 1:  # cluster-rows: the block's thread index, CTA rank-major (passes/cluster_rows.py)
        rank = w.sreg("cluster.ctarank")
        cx.tid = w.op(f"add i32 {w.op(f'mul i32 {rank}, {cx.cta_threads}', 'rank_base')}, {cx.tid}", "btid")
    raw = w.op("ptrtoint ptr addrspace(3) @smem to i32", "smem_raw")
    bumped = w.op(f"add i32 {raw}, {SMEM_ALIGN - 1}", "smem_b")
    cx.smem = w.op(f"and i32 {bumped}, {-SMEM_ALIGN}", "smem")
    create_policies(cx)  # the L2 policies of hinted loads (passes/cache_policy.py), made once here
    if cx.kernel.attrs.get("tma_prefetch") and cx.tmaps:  # create-tma's choice (passes/create_tma.py)
        first = w.op(f"icmp eq i32 {cx.tid}, 0", "t0")
        cx.if_then(first, lambda: [w.asm("void", ["prefetch.tensormap [$0];"], ["l"], [("ptr", cx.tmaps[n])])
                                   for n in sorted(cx.tmaps)])
    for op in cx.kernel.body.ops:
        cx.lower_op(op)
    if cx.staged_stores:  # TMA stores outside roles must finish reading shared memory before exit
        lead = w.op(f"icmp eq i32 {w.op(f'and i32 {cx.tid}, 127', 't')}, 0", "wglead")
        cx.if_then(lead, lambda: bulk_wait(w, 0))
    w.emit("ret void")
    name = cx.kernel.symbol
    body = "\n".join(w.lines)
    decls = "".join(t + "\n" for t in sorted(w.types.values())) + "\n".join(sorted(w.declares))
    ctas = max(cx.cluster, cx.multicast)
    cluster = f' "nvvm.cluster_dim"="{ctas},1,1"' if ctas > 1 else ""  # .reqnctapercluster
    attrs = (f'attributes #0 = {{ "nvvm.maxntid"="{cx.cta_threads}" '
             f'"nvvm.minctasm"="{min_blocks_per_sm(cx.kernel, cx.cta_threads)}"{cluster} }}')
    return (f"{HEADER}{decls}\n\ndefine ptx_kernel void @{name}({', '.join(sig)}) #0 {{\n{body}\n}}\n\n"
            f"{attrs}\n")


def min_blocks_per_sm(kernel: Operation, threads: int) -> int:
    """`.minnctapersm`: warp-specialized kernels run one block per SM (setmaxnreg redistributes
    its registers); other kernels ask ptxas for at least two resident blocks, or the plan's or the
    source's count (tkir.launch_bounds.streaming_blocks_per_sm). ptxas then caps registers accordingly;
    tests check it never spills."""
    requested = requested_blocks_per_sm(kernel)
    if any(op.name == "tk.role" for op in kernel.body.ops):
        if requested is not None and requested > 1:  # IR text past plan-occupancy's refusal
            raise LoweringError(kernel.loc, f"backend: min_blocks_per_sm = {requested} on a warp-specialized kernel "
                                            "(tk.role): it runs one block per SM")
        return 1
    return streaming_blocks_per_sm(kernel, threads)
