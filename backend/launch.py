"""The launch description (`tkc compile --emit launch`): what another toolchain needs to launch the PTX.

    build_launch(module, "sm_90a") -> {"kernel", "target", "tensors", "scalars", "params", "grid",
                                       "block", "dynamic_smem", "requires", "aligned", "tma"}

The format is the one the runtime reads (docs/runtime.md, "Launch description"). Sizes (grid, TMA
dims and strides, requirements) are `tkir.symexpr` expressions of the kernel's size names.

PTX parameter order (the backend declares its kernel parameters in exactly this order):
1. one `tensor_map` per `tma.desc`, in module order (name = the descriptor's symbol, `tma` = its index
   in the "tma" list; a 128-byte, 64-byte aligned `.param`, HOPPER.md §4.3);
2. one `pointer` per `gl` kernel parameter, in order (name = the parameter's name), also for tensors
   that are only reached through a tensor map;
3. one i32 `scalar` per size name, in order of first appearance in the `gl` dims (`"size": name`);
4. the kernel's own scalar parameters, in order (`"scalar": name`);
5. hidden parameters the runtime provides, in IR order: a `workspace` pointer per `tk.workspace`
   (`dtype`, `dims` of ints and NUM_SMS: device memory zeroed once and kept across launches) and an
   i32 `launch_count` per `tk.launch_count` (1 on the first launch of the kernel, then 2, ...).

`requires` lists the run-time conditions the kernel refuses to run without (the runtime checks
them); tkir.requires computes them from the IR, and the interpreter checks the same list. `aligned`
lists the tensors whose base address must be 16-byte aligned because they are copied in 16-byte pieces
without TMA (cp.async chunks, ld/st.global.v4): `{"tensor", "bytes", "why"}` (tkir.requires.kernel_alignments).
"""

from __future__ import annotations

import json

from tkir.diagnostics import CompileError
from tkir.facts import OccupancyPlan
from tkir.ir import Module, Operation
from tkir.requires import kernel_alignments, kernel_requires
from tkir.target import PLAIN_SMEM_ALIGN
from tkir.target import WARPGROUP as THREADS_PER_WARPGROUP
from tkir.types import DTYPE_BYTES, GlobalType, ScalarType, TileType
from tkir.verify_tma import verify_tma

DESC_FIELDS = ("dtype", "rank", "dims", "strides", "box", "elem_strides", "swizzle", "l2_promotion",
               "oob_fill")


def build_launch(module: Module, target: str) -> dict:
    """The launch description of the module's kernel, as a JSON-ready dict."""
    kernel = module.kernel
    params = kernel.body.args
    tensors = [a for a in params if isinstance(a.type, GlobalType)]
    scalars = [a for a in params if isinstance(a.type, ScalarType)]
    descs = [op for op in module.ops if op.name == "tma.desc"]
    verify_tma(module, CompileError, decided=True)  # the verifier's rule, tiles without swizzle= as unswizzled

    sizes: list[str] = []
    for t in tensors:
        for d in t.type.dims:
            if isinstance(d, str) and d not in sizes:
                sizes.append(d)

    ptx_params: list[dict] = [{"name": d.symbol, "kind": "tensor_map", "tma": i} for i, d in enumerate(descs)]
    ptx_params += [{"name": t.name, "kind": "pointer", "dtype": t.type.dtype, "tensor": t.name}
                   for t in tensors]
    ptx_params += [{"name": s, "kind": "scalar", "dtype": "i32", "size": s} for s in sizes]
    ptx_params += [{"name": s.name, "kind": "scalar", "dtype": s.type.dtype, "scalar": s.name}
                   for s in scalars]
    for op in kernel.walk():  # hidden parameters the runtime provides (passes/stream_k.py)
        if op.name == "tk.workspace":
            t = op.result.type
            ptx_params.append({"name": op.attrs["name"], "kind": "workspace", "dtype": t.dtype, "dims": list(t.dims)})
        elif op.name == "tk.launch_count":
            ptx_params.append({"name": op.attrs["name"], "kind": "launch_count", "dtype": "i32"})

    grid = [str(g) for g in kernel.attrs["grid"]]
    cluster = kernel.attrs.get("cluster")  # cluster-rows: a block is `cluster` CTAs along x
    if isinstance(cluster, int) and cluster > 1:
        grid[0] = f"{cluster} * ({grid[0]})"
    plan = OccupancyPlan.of(kernel)
    if plan is not None:
        warpgroups = sum(r.warpgroups if r.warpgroups is not None else 1 for _, r in plan.roles) or 1
        threads = plan.threads or THREADS_PER_WARPGROUP * warpgroups  # sm_80: 32 x warps
        smem = plan.smem_bytes if plan.smem_bytes is not None else _alloc_bytes(kernel)
    else:
        threads, smem = THREADS_PER_WARPGROUP, _alloc_bytes(kernel)
    out = {
        "kernel": kernel.symbol,
        "target": target,
        "tensors": [{"name": t.name, "dtype": t.type.dtype, "dims": list(t.type.dims)} for t in tensors],
        "scalars": [{"name": s.name, "dtype": s.type.dtype} for s in scalars],
        "params": ptx_params,
        "grid": grid + ["1"] * (3 - len(grid)),
        "block": [threads, 1, 1],
        "dynamic_smem": smem,
        "requires": kernel_requires(kernel, descs),
        "aligned": kernel_alignments(kernel),
        # tensors read through ld.global.nc (passes/readonly_loads.py): no other argument may overlap them
        "readonly": [str(n) for n in kernel.attrs.get("readonly_params", [])],
        "tma": [{"param": d.symbol, "tensor": d.attrs["tensor"], **{k: d.attrs[k] for k in DESC_FIELDS}}
                for d in descs],
    }
    if isinstance(cluster, int) and cluster > 1:  # the PTX says .reqnctapercluster: a plain launch forms them
        out["cluster"] = [cluster, 1, 1]
    return out


def launch_json(module: Module, target: str) -> str:
    """`build_launch` as indented JSON text (what `--emit launch` writes)."""
    return json.dumps(build_launch(module, target), indent=2) + "\n"


def _alloc_bytes(kernel: Operation) -> int:
    """Shared memory of the kernel's allocations, each rounded to its alignment (no occupancy plan)."""
    total, max_align = 0, PLAIN_SMEM_ALIGN
    for op in kernel.walk():
        if op.name != "tk.alloc":
            continue
        t = op.result.type
        eb = DTYPE_BYTES[t.dtype]
        pad = int(t.get("pad", 0) or 0)
        size = t.rows * (t.cols * eb + pad) if isinstance(t, TileType) else t.n * eb + pad
        align = int(t.get("align", 0) or 0) or PLAIN_SMEM_ALIGN
        stages = t.get("stages") if isinstance(t.get("stages"), int) else 1
        total += -(-size // align) * align * stages
        max_align = max(max_align, align)
    return total + (max_align if max_align > PLAIN_SMEM_ALIGN else 0)
