"""create-tma: turn global<->shared tile copies into TMA copies with module-level descriptor specs.

Rewrites, in every kernel:
* `tk.load %s, %G, coords...` (global -> shared) into `tma.load` and `tk.store %G, %s, coords...`
  (shared -> global) into `tma.store`, same operands, with attrs `desc = @G_tma`, `boxes`, `bytes`;
* adds one `tma.desc` per (tensor, box, swizzle) before the kernel (identical ones are shared):
  dims innermost first, byte strides as size expressions (fixed sizes folded to ints), box, element
  strides 1, the tile's swizzle (the one select-swizzle wrote in its type; 0 for an interleaved
  tile, whose 16-byte panels are unswizzled boxes), L2 promotion 128 B
  (CUTLASS's default, HOPPER.md §4.1; `create-tma{l2_promotion=B}` sets another) and out-of-bounds
  fill "zero", so partial edge tiles work.

Box shape (HOPPER.md §3.4, §4.1). A shared tile `st<T, R, C, swizzle=S>` whose row is wider than the
swizzle span S is stored as column panels of S bytes (the select-swizzle convention), so it is
`C * sizeof(T) / S` boxes of `[S / sizeof(T), R]`; otherwise one box `[C, R]`. A vector `sv<T, N>` is
one box `[N]`. Leading dims of a rank > 2 tensor get box 1.

Copies that stay as they are, with `no_tma_reason = "..."` saying why (the report shows it):
* `@no_tma` on the copy, `--no-tma` (Options.no_tma), a target without TMA (below sm_90);
* loads into shared tiles of a kernel without a producer warpgroup (`@warpgroups(consumers=N, producers=0)`):
  nobody would issue the TMA copies ahead; the compute warpgroups copy with cp.async into
  pipeline-cp-async's ring buffers, and with no producer registers held back the block can be
  small enough for two per SM (ThunderKittens' Based: two one-warpgroup blocks per SM);
* the hardware's limits: box dim > 256, inner box bytes not a multiple of 16 B, a row that is not a
  whole number of swizzle panels, row padding (`pad=`, TMA writes dense rows), rank > 5, and byte
  strides that are fixed and not a multiple of 16 B (strides that depend on run-time sizes are
  checked by the runtime when it encodes the descriptor);
* register <-> global copies (`tk.load` into an rt/rv, `tk.store` of an rt/rv), with one exception:
  a bf16 mma accumulator of whole 64-column panels (64 or 128 columns, or a multiple of 128) stored
  to global (the epilogue) becomes `tk.store_staged` through a
  `rows x 128` staging tile (32 KB for gemm's 128-row tile, a quarter of what staging the whole
  128x256 tile would cost, so the 4 pipeline stages still fit) and TMA stores. The tile is written
  `chunk_cols` = 64 columns at a time into alternating halves (`buffers = 2`), so the warpgroup
  writes one half while the copy engine reads the other; `create-tma{epilogue_chunk=128}` (one
  buffer) is the single-buffered ablation. Other register
  copies use the backend's vectorised ld/st.global, which already moves full 16-byte sectors.
* a reducing store (`reduce = "add"`, the front end's `G[i, j] += t`) of a register tile becomes
  `tk.store %G_add_stage, %t` into an f32 shared tile of its shape (128B-swizzled where its rows are
  whole 128-byte panels) and `tma.store %G, %G_add_stage, ... {reduce = "add"}`, a TMA reduce-add
  (`stage_reduce`); where TMA cannot take it (the reasons above) it stays a `tk.store` with
  `no_tma_reason = "register tile added with red.global.add: ..."` (per-element `red.global.add.f32`).
  A reducing store of a shared tile is a copy like any other and keeps its `reduce` as a `tma.store`.

`create-tma{prefetch=true}` gives a kernel with TMA copies the attr `tma_prefetch = true`: at launch
one thread issues `prefetch.tensormap` for each of its descriptors (kernel parameters,
`__grid_constant__`), so their 128 bytes are on chip before the first copy needs them, as CUTLASS's
`prefetch_tma_descriptor` does at the start of its kernels. Off by default: on the H200 it changed no
attention timing (docs/experiments.md, "Attention: persistence chosen per shape"), and it changes every
TMA kernel's PTX.

Assumes select-swizzle has run if swizzles are wanted (an st without `swizzle=` is unswizzled).
"""

from __future__ import annotations

import re

from tkir.access_report import add_report
from tkir.ir import Module, Operation
from tkir.layout import (
    SharedLayout,
    conflict_degree,
    layout_of,
    register_access,
    tma_box,
    tma_pattern,
    tma_swizzle,
)
from tkir.opdef import REDUCE_ATTR
from tkir.passes.analysis import (
    TileUse,
    access_report,
    choose_swizzle,
    classify_copy,
    no_producer,
    shared_layout,
    staged_store_uses,
    with_layout,
)
from tkir.passmanager import Options, ParamError, Pass, param
from tkir.target import TMA_INNER_BYTES_ALIGN, TMA_MAX_BOX, TMA_MAX_RANK, TMA_STRIDE_ALIGN
from tkir.types import DTYPE_BYTES, GlobalType, Symbol, TileType, VectorType, is_size_name

TMA_MIN_SM = 90                # cp.async.bulk.tensor: sm_90 and later (HOPPER.md §4.4)
L2_PROMOTION_BYTES = 128       # CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CUTLASS's default (HOPPER.md §4.1)
L2_PROMOTIONS = (0, 64, 128, 256)  # CUtensorMapL2promotion: NONE, L2_64B, L2_128B, L2_256B (CUDA driver API)
OOB_FILL = "zero"              # CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE: out-of-bounds elements read as 0

EPILOGUE_COLS = 128           # staging tile: 64 rows x 128 bf16 per warpgroup = 16 KB
EPILOGUE_CHUNK = 64           # columns written and stored at a time: two 8 KB buffers per warpgroup
EPILOGUE_PANEL_COLS = 64      # one 128-byte swizzle panel of bf16: the TMA store box width

TMA_COPY_OPS = ("tma.load", "tma.store", "tk.store_staged")  # the ops that read a descriptor

NO_PRODUCER_REASON = ("the kernel has no producer warpgroup (@warpgroups(producers=0)): its compute warpgroups copy "
                      "with cp.async (pipeline-cp-async's ring buffers)")


REGISTER_LOAD_REASON = "register tile: loaded with ld.global (create-tma stages no register copies)"
REGISTER_STORE_REASON = "register tile: stored with st.global (create-tma stages no register copies)"
REGISTER_REDUCE_REASON = "register tile added with red.global.add"
REDUCE_STAGE_SWIZZLE = 128     # the reduce-add staging tile's swizzle span where its rows are whole panels
REDUCE_STAGE_SPANS = (128, 64, 32)  # the spans `reduce_swizzle` takes (TMA's swizzle modes), widest first


class CreateTma(Pass):
    name = "create-tma"

    epilogue_chunk: int = param(EPILOGUE_CHUNK, "columns of the staged epilogue written and stored at a time "
                                                f"(a multiple of {EPILOGUE_PANEL_COLS}; 128: one buffer)")
    l2_promotion: int = param(L2_PROMOTION_BYTES, "the descriptors' L2 promotion in bytes: "
                                                  + ", ".join(map(str, L2_PROMOTIONS)))
    prefetch: bool = param(False, "prefetch the kernel's TMA descriptors at launch (kernel attr tma_prefetch: one "
                                  "thread issues prefetch.tensormap for each; measured no effect on attention, off)")
    reduce_swizzle: int = param(REDUCE_STAGE_SWIZZLE, "the reduce-add staging tile's swizzle span: 128, 64 or 32 "
                                                      "where its rows are whole panels (else plain), 0 plain, or -1: "
                                                      "the span under which the bank model gives the register "
                                                      "tile's stores the fewest conflicts (ties: the widest)")

    def __post_init__(self) -> None:
        if self.epilogue_chunk < EPILOGUE_PANEL_COLS or self.epilogue_chunk % EPILOGUE_PANEL_COLS:
            raise ParamError("epilogue_chunk", f"create-tma: epilogue_chunk={self.epilogue_chunk}: a positive "
                                               f"multiple of {EPILOGUE_PANEL_COLS} columns")
        if self.reduce_swizzle not in (-1, 0, *REDUCE_STAGE_SPANS):
            raise ParamError("reduce_swizzle", f"create-tma: reduce_swizzle={self.reduce_swizzle} is not one of -1, 0, "
                                               + ", ".join(map(str, REDUCE_STAGE_SPANS)))
        if self.l2_promotion not in L2_PROMOTIONS:
            raise ParamError("l2_promotion", f"create-tma: l2_promotion={self.l2_promotion} is not one of "
                                             + ", ".join(map(str, L2_PROMOTIONS)))

    def run(self, module: Module, options: Options) -> None:
        for kernel in module.kernels():
            _Rewriter(module, kernel, options, self).run()
            if self.prefetch and any(op.name in TMA_COPY_OPS for op in kernel.walk()):
                kernel.attrs["tma_prefetch"] = True


class _Rewriter:
    def __init__(self, module: Module, kernel: Operation, options: Options, params: CreateTma):
        self.module = module
        self.kernel = kernel
        self.options = options
        self.pass_params = params
        self.params = list(kernel.body.args)
        self.descs: dict[tuple, str] = {}
        for op in module.ops:  # descriptors of an earlier run are reused, never duplicated
            if op.name == "tma.desc":
                a = op.attrs
                self.descs[(a["param"], tuple(a["box"]), a["swizzle"])] = op.symbol

    def run(self) -> None:
        for op in list(self.kernel.walk()):
            copy = classify_copy(op)
            if copy is None:
                continue
            kind, g_val, s_val = copy
            if kind == "register":
                load = op.name == "tk.load"
                if not load and REDUCE_ATTR in op.attrs:
                    reason = self.stage_reduce(op, g_val, s_val)
                    if reason is not None:
                        op.attrs["no_tma_reason"] = reason
                    continue
                if not load and self.stage_epilogue(op, g_val, s_val):
                    continue
                op.attrs["no_tma_reason"] = REGISTER_LOAD_REASON if load else REGISTER_STORE_REASON
                continue
            reason = NO_PRODUCER_REASON if op.name == "tk.load" and no_producer(self.kernel) else None
            reason = reason or self.why_not(op, g_val.type, s_val.type)
            if reason is None:
                box, boxes = _box(s_val.type, g_val.type.rank)
                reason = _stride_problem(g_val.type, g_val.name)
            if reason is not None:
                op.attrs["no_tma_reason"] = reason
                continue
            desc = self.descriptor(op, g_val, s_val.type, box)
            op.name = "tma.load" if op.name == "tk.load" else "tma.store"
            op.attrs.pop("no_tma_reason", None)
            op.attrs.update({"desc": Symbol(desc), "boxes": boxes, "bytes": s_val.type.nbytes})

    def stage_epilogue(self, op: Operation, g_val, v_val) -> bool:
        """An mma accumulator stored to global (the GEMM/attention epilogue) goes through a shared
        staging tile of EPILOGUE_COLS columns and TMA stores (`tk.store_staged`): each consumer
        warpgroup writes its rows swizzled (conflict-free), one thread issues the TMA stores, and the
        warpgroup goes on to its next tile while the copy engine writes C (HOPPER.md §4.4).
        The staging tile's swizzle is select-swizzle's rule applied to its uses and its accesses are
        reported as bank-conflicts reports them (passes/analysis.py): both passes ran before it
        existed."""
        v = v_val.type
        g: GlobalType = g_val.type
        lay = layout_of(v, op.loc)
        if not (lay is not None and lay.kind == "wgmma_acc" and isinstance(v, TileType) and v.dtype == "bf16"):
            return False
        cols = min(v.cols, EPILOGUE_COLS)
        if self.why_not(op, g, v) is not None or g.rank < 2 or v.cols % cols or self.options.swizzle == "none":
            return False  # (--swizzle=none: the staging tile would need the swizzle it is denied)
        if cols % EPILOGUE_PANEL_COLS:
            return False  # not whole 128-byte panels (an accumulator of 16 or 32 columns): st.global
        chunk = min(cols, self.pass_params.epilogue_chunk)  # both multiples of the panel: chunk divides cols
        alloc = Operation("tk.alloc", [], [TileType("st", v.dtype, v.rows, cols)],
                          result_names=[f"{g_val.name}_stage"], loc=op.loc)
        span = choose_swizzle(alloc, alloc.result.type, staged_store_uses(op, alloc.result.type), self.options)
        stage_t = with_layout(alloc.result.type, SharedLayout(v.dtype, v.rows, cols, span))
        # each warpgroup stores its own rows with one box per panel (backend/rules_wgmma.py): a box of
        # 64 rows (one wgmma M) left rows 64..127 of a single warpgroup's 128-row tile unstored (issue 14)
        box_t = TileType("st", v.dtype, v.rows // lay.split, cols, (("swizzle", span),))
        if _box_problem(box_t) is not None or _stride_problem(g, g_val.name) is not None:
            return False
        alloc.result.type = stage_t
        box, _ = _box(box_t, g.rank)
        desc = self.descriptor(op, g_val, box_t, box)
        body = self.kernel.body
        first = next(i for i, o in enumerate(body.ops) if o.name == "tk.alloc" or i == len(body.ops) - 1)
        body.insert(first, alloc)
        op.name = "tk.store_staged"
        op.operands = [op.operands[0], op.operands[1], alloc.result, *op.operands[2:]]
        op.attrs.pop("no_tma_reason", None)
        op.attrs.update({"desc": Symbol(desc), "chunk_cols": chunk, "buffers": cols // chunk})
        layout = shared_layout(stage_t)
        for use in staged_store_uses(op, stage_t):
            add_report(op.attrs, access_report(alloc.result, use, layout))
        return True

    def reduce_span(self, v: TileType) -> int:
        """The reduce-add staging tile's swizzle span (`reduce_swizzle`): a fixed span where the tile's rows are
        whole panels of it (else plain), or, at -1, the span (plain included) whose layout gives the register
        tile's stores the fewest bank conflicts by the bank model, the widest among equals (TMA's boxes then
        cover the most bytes of a row)."""
        if self.options.swizzle == "none":
            return 0
        row_bytes = v.cols * DTYPE_BYTES[v.dtype]
        want = self.pass_params.reduce_swizzle
        if want >= 0:
            return want if want and row_bytes % want == 0 else 0
        lay = layout_of(v)
        if lay is None:  # no register layout to judge by: the default span
            return REDUCE_STAGE_SWIZZLE if row_bytes % REDUCE_STAGE_SWIZZLE == 0 else 0
        stores = register_access(False, lay, v.dtype, (v.rows, v.cols))
        best, best_degree = 0, None
        for span in (*(s for s in REDUCE_STAGE_SPANS if row_bytes % s == 0), 0):
            degree = conflict_degree(stores, SharedLayout(v.dtype, v.rows, v.cols, span))
            if best_degree is None or degree < best_degree:
                best, best_degree = span, degree
        return best

    def stage_reduce(self, op: Operation, g_val, v_val) -> str | None:
        """A register tile added into global memory (`G[i, j] += t`, `reduce = "add"`) goes through a shared
        staging tile of its shape: `tk.store %stage, %t` (every thread writes its slots), then `tma.store
        %G, %stage, coords {reduce = "add"}`, which one thread issues as `cp.reduce.async.bulk.tensor ...
        .add` (the copy engine adds the tile into L2, HOPPER.md §4.4). The staging tile is 128B-swizzled
        where its rows are whole 128-byte panels (32 f32 columns), so the accumulator's writes spread over
        the banks. Returns why not (the store then stays a `tk.store` the backend lowers to per-element
        `red.global.add`), or None once rewritten."""
        v = v_val.type
        g: GlobalType = g_val.type
        if not isinstance(v, TileType) or g.rank < 2:
            return f"{REGISTER_REDUCE_REASON}: {v} into {g} (TMA adds tiles)"
        span = self.reduce_span(v)
        stage_t = TileType("st", v.dtype, v.rows, v.cols, (("swizzle", span),) if span else ())
        reason = self.why_not(op, g, stage_t) or _stride_problem(g, g_val.name)
        if reason is not None:
            return f"{REGISTER_REDUCE_REASON}: {reason}"
        alloc = Operation("tk.alloc", [], [stage_t], result_names=[f"{g_val.name}_add_stage"], loc=op.loc)
        body = self.kernel.body
        first = next(i for i, o in enumerate(body.ops) if o.name == "tk.alloc" or i == len(body.ops) - 1)
        body.insert(first, alloc)
        store = Operation("tk.store", [alloc.result, v_val], [], loc=op.loc)
        op.parent.insert_before(op, store)
        box, boxes = _box(stage_t, g.rank)
        desc = self.descriptor(op, g_val, stage_t, box)
        op.name = "tma.store"
        op.operands = [op.operands[0], alloc.result, *op.operands[2:]]
        op.attrs.pop("no_tma_reason", None)
        op.attrs.update({"desc": Symbol(desc), "boxes": boxes, "bytes": stage_t.nbytes})
        # the staging tile is new after bank-conflicts: its store's entry here (the TMA read's on the tma.store)
        layout, lay = shared_layout(stage_t), layout_of(v)
        if lay is not None:
            use = TileUse(store, register_access(False, lay, v.dtype, (v.rows, v.cols)), "ldst")
            add_report(store.attrs, access_report(alloc.result, use, layout))
        add_report(op.attrs, access_report(alloc.result, TileUse(op, tma_pattern(layout.rows, layout.row_bytes,
                                                                                  layout.box_bytes), "tma"), layout))
        return None

    def why_not(self, op: Operation, g: GlobalType, s: TileType | VectorType) -> str | None:
        if op.attrs.get("no_tma"):
            return "@no_tma on this copy"
        if self.options.no_tma:
            return "--no-tma"
        if _sm(self.options.target) < TMA_MIN_SM:
            return f"target {self.options.target} has no TMA (needs sm_90 or later)"
        if g.rank > TMA_MAX_RANK:
            return f"{g} has rank {g.rank}; TMA tensors have rank <= {TMA_MAX_RANK}"
        return _box_problem(s)

    def descriptor(self, op: Operation, g_val, s: TileType | VectorType, box: list[int]) -> str:
        g: GlobalType = g_val.type
        index = self.params.index(g_val)
        swizzle = int(s.get("swizzle", 0) or 0)
        key = (index, tuple(box), swizzle)
        if key in self.descs:
            return self.descs[key]
        taken = {o.symbol for o in self.module.ops if o.symbol}
        name, n = f"{g_val.name}_tma", 1
        while name in taken:
            name, n = f"{g_val.name}_tma{n}", n + 1
        eb = DTYPE_BYTES[g.dtype]
        dims = list(reversed(g.dims))
        attrs = {
            "tensor": g_val.name,
            "param": index,
            "dtype": g.dtype,
            "rank": g.rank,
            "dims": dims,
            "strides": [_product(dims[:i], eb) for i in range(1, g.rank)],
            "box": box,
            "elem_strides": [1] * g.rank,
            "swizzle": tma_swizzle(swizzle),
            "l2_promotion": self.pass_params.l2_promotion,
            "oob_fill": OOB_FILL,
        }
        desc = Operation("tma.desc", attrs=attrs, symbol=name, loc=op.loc)
        self.module.insert_before(self.kernel, desc)
        self.descs[key] = name
        return name


def _sm(target: str) -> int:
    m = re.match(r"sm_(\d+)", target)
    return int(m.group(1)) if m else 0


def _inner(s: TileType | VectorType) -> tuple[int, int, int]:
    """(inner box elements, boxes, outer rows) of a shared tile or vector under its swizzle."""
    eb = DTYPE_BYTES[s.dtype]
    cols, rows = (s.cols, s.rows) if isinstance(s, TileType) else (s.n, 1)
    lay = SharedLayout(s.dtype, rows, cols, int(s.get("swizzle", 0) or 0))
    return lay.box_bytes // eb, lay.row_bytes // lay.box_bytes, rows


def _box_problem(s: TileType | VectorType) -> str | None:
    if s.get("pad"):
        return f"{s} has padded rows (pad={s.get('pad')}); TMA writes dense rows"
    eb = DTYPE_BYTES[s.dtype]
    span = int(s.get("swizzle", 0) or 0)
    cols = s.cols if isinstance(s, TileType) else s.n
    if span and cols * eb > span and (cols * eb) % span:
        return f"{s}: a {cols * eb} B row is not a whole number of {span} B swizzle panels"
    inner, _, rows = _inner(s)
    if inner > TMA_MAX_BOX:
        return f"{s}: box inner dim {inner} > {TMA_MAX_BOX} elements"
    if rows > TMA_MAX_BOX:
        return f"{s}: box dim {rows} rows > {TMA_MAX_BOX}"
    if (inner * eb) % TMA_INNER_BYTES_ALIGN:
        return f"{s}: inner box of {inner * eb} B is not a multiple of {TMA_INNER_BYTES_ALIGN} B"
    return None


def _box(s: TileType | VectorType, rank: int) -> tuple[list[int], int]:
    return tma_box(s, rank)  # tkir/layout.py: the verifier checks descriptors against the same rule


def _product(dims: list[int | str], eb: int) -> int | str:
    """The byte stride over `dims` (innermost first) as an int, or an expression like 'N * 256'."""
    const = eb
    names: list[str] = []
    for d in dims:
        if isinstance(d, int):
            const *= d
        else:
            names.append(d if is_size_name(d) else f"({d})")  # an expression of sizes ("H / 4") as a factor
    if not names:
        return const
    return " * ".join([*reversed(names), str(const)])


def _stride_problem(g: GlobalType, name: str | None) -> str | None:
    eb = DTYPE_BYTES[g.dtype]
    dims = list(reversed(g.dims))
    for i in range(1, g.rank):
        s = _product(dims[:i], eb)
        if isinstance(s, int) and s % TMA_STRIDE_ALIGN:
            return (f"%{name}: {g} has a {s} B stride in dim {g.rank - 1 - i}; "
                    f"TMA needs multiples of {TMA_STRIDE_ALIGN} B")
    return None
