"""The verifier's TMA rules: descriptors agree with the tensors they describe and the copies that use them.

One op's check (tkir/ops_tma.py) cannot see across symbols; these rules can (issue 14):

* a `tma.desc` describes its kernel parameter as the parameter is: `param` is a gl parameter named
  `tensor`, with the desc's dtype and rank; `dims` are the gl's dims innermost first and `strides`
  their byte strides (each a well-formed size expression of the kernel's sizes, tkir/symexpr.py);
  its `elem_strides` are all 1 (a box fills a dense tile: TMA's element strides would skip elements);
* a copy that names a descriptor (`tma.load`, `tma.store`, `pipe.copy`, `tk.store_staged`) names a
  `tma.desc` of the tensor it copies, whose swizzle is its shared tile's (tkir/layout.py
  `tma_swizzle`) and whose box is the one that fills that tile (`tma_box`; for the staged epilogue,
  one swizzle panel of the staging tile and a row count dividing its rows), with as many `boxes`.

* a multicast copy (passes/multicast.py) runs in a kernel of clusters of its CTAs, loads its part through
  its descriptor with 1/C of the box rows, and fills a ring whose empty barriers count every CTA's releases.

A descriptor that disagrees with its tile writes the tile in a layout other than the one wgmma and
ld.shared read (re-running select-swizzle on lowered IR did that): wrong results, no error.
"""

from __future__ import annotations

from tkir import symexpr
from tkir.diagnostics import CompileError
from tkir.facts import MULTICAST_ATTR
from tkir.ir import Module, Operation, Value
from tkir.types import DTYPE_BYTES, GlobalType, Symbol, TileType, VectorType, is_size_name
from tkir.verify_sizes import kernel_sizes, size_names

# (global operand, shared operand) of each op that copies through a descriptor
SWIZZLE_ATOM_ROWS = 8  # a swizzle pattern repeats every 8 rows (HOPPER.md §4.3): a multicast part starts on one
COPY_OPERANDS = {"tma.load": (1, 0), "tma.store": (0, 1), "pipe.copy": (3, 0), "tk.store_staged": (0, 2)}
SAMPLE_SIZES = (1009, 1013)  # distinct primes: two size expressions that agree at both are taken as equal


def verify_tma(module: Module, error: type[CompileError], *, decided: bool = False) -> None:
    """Check every descriptor and every copy through one; raise `error` (located) at the first problem.

    A shared tile whose type has no `swizzle` yet has no layout: select-swizzle has not decided it,
    so the verifier does not compare it with a descriptor. The backend passes `decided=True`: what it
    lowers is unswizzled (swizzle 0) unless the type says otherwise."""
    descs = {op.symbol: op for op in module.ops if op.name == "tma.desc"}
    kernels = module.kernels()
    for kernel in kernels:
        copies = [op for op in kernel.walk() if op.name in COPY_OPERANDS and isinstance(op.attrs.get("desc"), Symbol)]
        named = {op.attrs["desc"].name for op in copies}
        # the launch passes every descriptor of the module to its kernel
        own = list(descs.values()) if len(kernels) == 1 else [d for n, d in descs.items() if n in named]
        for desc in own:
            _check_desc(desc, kernel, error)
        for op in copies:
            _check_copy(op, kernel, descs, error, decided)
            if "multicast" in op.attrs:
                _check_multicast(op, kernel, descs, error)


def _check_desc(desc: Operation, kernel: Operation, error: type[CompileError]) -> None:
    a, params = desc.attrs, kernel.body.args
    p = a["param"]
    if p >= len(params) or not isinstance(params[p].type, GlobalType):
        raise error(desc.loc, f"@{desc.symbol} describes parameter {p} of @{kernel.symbol}, which is not a "
                              "global tensor")
    g_val: Value = params[p]
    g: GlobalType = g_val.type
    if a["tensor"] != g_val.name:
        raise error(desc.loc, f"@{desc.symbol} names tensor '{a['tensor']}', but parameter {p} is %{g_val.name}")
    if a["dtype"] != g.dtype or a["rank"] != g.rank:
        raise error(desc.loc, f"@{desc.symbol} is a rank-{a['rank']} {a['dtype']} descriptor of %{g_val.name}, "
                              f"which is {g}")
    elem = list(a["elem_strides"])
    if any(e != 1 for e in elem):
        raise error(desc.loc, f"@{desc.symbol} has elem_strides = {elem}, but tkir's copies fill dense tiles: every "
                              "element stride must be 1",
                    hint="a stride e makes TMA copy every e-th element of the box (ceil(box / e) of them), so the "
                         "tile is not filled and the barrier receives fewer bytes than announced")
    known = kernel_sizes(kernel)
    dims = list(reversed(g.dims))
    eb = DTYPE_BYTES[g.dtype]
    for i, d in enumerate(a["dims"]):
        size_names(d, known, desc, f"@{desc.symbol} dims[{i}]", error)
        if not _same(d, dims[i], known):
            raise error(desc.loc, f"@{desc.symbol} dims[{i}] is {d!r}, but dim {g.rank - 1 - i} of %{g_val.name} "
                                  f"({g}) is {dims[i]!r}", hint="dims are the tensor's, innermost first")
    for i, s in enumerate(a["strides"]):
        size_names(s, known, desc, f"@{desc.symbol} strides[{i}]", error)
        want = _stride(dims[:i + 1], eb)
        if not _same(s, want, known):
            raise error(desc.loc, f"@{desc.symbol} strides[{i}] is {s!r}, but %{g_val.name} ({g}) steps dim "
                                  f"{g.rank - 2 - i} by {want} bytes", hint="strides are in bytes, innermost first")


def _check_multicast(op: Operation, kernel: Operation, descs: dict[str, Operation],
                     error: type[CompileError]) -> None:
    """A `pipe.copy {multicast = {ctas = C, desc = @D}}` (passes/multicast.py): the kernel runs clusters of C CTAs
    (`tma_multicast = {ctas = C}`); @D is the copy's descriptor with 1/C of its box rows, so each CTA's part is
    whole 8-row swizzle atoms of the tile; and every barrier the producer waits on to refill the copy's ring
    (its empty barriers) counts the releases of the C CTAs (`cluster = C`)."""
    mc = op.attrs["multicast"]
    ctas = mc.get("ctas") if isinstance(mc, dict) else None
    part = mc.get("desc") if isinstance(mc, dict) else None
    if not isinstance(ctas, int) or isinstance(ctas, bool) or ctas < 2 or not isinstance(part, Symbol):
        raise error(op.loc, f"'{op.name}' multicast = {mc!r}: want {{ctas = C, desc = @D}} with C >= 2")
    kmc = kernel.attrs.get(MULTICAST_ATTR)
    if not isinstance(kmc, dict) or kmc.get("ctas") != ctas:
        raise error(op.loc, f"'{op.name}' multicasts to {ctas} CTAs, but the kernel's {MULTICAST_ATTR} is {kmc!r}",
                    hint=f"the kernel must run clusters of {ctas} CTAs ({MULTICAST_ATTR} = {{ctas = {ctas}}})")
    whole, half = descs[op.attrs["desc"].name], descs.get(part.name)
    if half is None:
        raise error(op.loc, f"'{op.name}' multicasts with @{part.name}, which is not a tma.desc")
    box = list(whole.attrs["box"])
    want = [box[0], box[1] // ctas, *box[2:]]
    same = all(half.attrs.get(k) == whole.attrs.get(k) for k in ("tensor", "param", "dtype", "dims", "strides",
                                                                  "swizzle"))
    t = op.operands[0].type
    rows = t.rows if isinstance(t, TileType) else 0
    if not same or list(half.attrs["box"]) != want or box[1] % ctas or rows % (ctas * SWIZZLE_ATOM_ROWS):
        raise error(op.loc, f"'{op.name}': @{part.name} must be @{whole.symbol} with box {want} (1/{ctas} of its "
                            f"rows, each part whole {SWIZZLE_ATOM_ROWS}-row swizzle atoms of the {rows}-row tile), "
                            f"not box {list(half.attrs['box'])}")
    full = op.operands[1]
    loop = op.parent
    for w in (o for o in (loop.ops if loop is not None else []) if o.name == "pipe.wait" and o.operands[0] is not full):
        bars = w.operands[0].owner
        if isinstance(bars, Operation) and bars.attrs.get("cluster") != ctas:
            raise error(bars.loc, f"'{bars.name}' %{w.operands[0].name} frees stages that '{op.name}' multicasts "
                                  f"into {ctas} CTAs, but counts the releases of cluster = {bars.attrs.get('cluster')}",
                        hint=f"a ring a multicast fills is free only when every CTA released it: cluster = {ctas}")


def _check_copy(op: Operation, kernel: Operation, descs: dict[str, Operation], error: type[CompileError],
                decided: bool) -> None:
    gi, si = COPY_OPERANDS[op.name]
    g_val, s_val = op.operands[gi], op.operands[si]
    sym = op.attrs["desc"].name
    desc = descs.get(sym)
    if desc is None:
        raise error(op.loc, f"'{op.name}' names @{sym}, which is not a tma.desc")
    params = kernel.body.args
    index = next((i for i, v in enumerate(params) if v is g_val), None)
    if index is None or desc.attrs["param"] != index:
        raise error(op.loc, f"'{op.name}' copies %{g_val.name} with @{sym}, a descriptor of "
                            f"'{desc.attrs['tensor']}'")
    t = s_val.type
    assert isinstance(t, (TileType, VectorType))  # the op's own check
    if t.get("swizzle") is None and not decided:
        return
    # imported here: tkir.layout imports numpy, which `import tkir` (the verifier's importers) need not load
    from tkir.layout import SharedLayout, layout_of, tma_box, tma_swizzle

    span = int(t.get("swizzle", 0) or 0)
    if desc.attrs["swizzle"] != tma_swizzle(span):
        raise error(op.loc, f"'{op.name}': @{sym} has swizzle {desc.attrs['swizzle']}, but the shared tile "
                            f"%{s_val.name} is {t} (TMA swizzle {tma_swizzle(span)})",
                    hint="a pass changed the tile's layout after create-tma; the descriptor must follow it")
    box = list(desc.attrs["box"])
    if op.name == "tk.store_staged":
        # each warpgroup stores its rows of the accumulator with one box per panel (backend/rules_wgmma.py)
        panel = SharedLayout(t.dtype, t.rows, t.cols, span).box_bytes // DTYPE_BYTES[t.dtype]
        v = op.operands[1].type
        lay = layout_of(v, op.loc)
        slab = v.rows // lay.split if lay is not None and lay.kind == "wgmma_acc" else None
        rows_ok = box[1] == slab if slab else box[1] >= 1 and t.rows % box[1] == 0
        if not (box[0] == panel and rows_ok and all(b == 1 for b in box[2:])):
            rows = f"{slab}" if slab else f"a divisor of {t.rows}"
            who = f"each of {lay.split} warpgroup{'s' * (lay.split > 1)} stores {slab} rows" if slab else "it stores"
            raise error(op.loc, f"'{op.name}': @{sym} has box {box}, but {who} of {v} through %{s_val.name} "
                                f"({t}) one panel at a time: the box must be [{panel}, {rows}]")
        return
    want, boxes = tma_box(t, len(box))
    if box != want:
        raise error(op.loc, f"'{op.name}': @{sym} has box {box}, but %{s_val.name} ({t}) is filled by boxes "
                            f"of {want}")
    if op.attrs.get("boxes") != boxes:
        raise error(op.loc, f"'{op.name}' has boxes = {op.attrs.get('boxes')}, but %{s_val.name} ({t}) is "
                            f"{boxes} box{'es' * (boxes > 1)} of {want}")


def _stride(dims: list[int | str], eb: int) -> str:
    """The byte stride over `dims` (innermost first), as create-tma writes it: 'N * 256'."""
    const = eb
    for d in dims:
        const *= d if isinstance(d, int) else 1
    factors = [d if is_size_name(d) else f"({d})" for d in dims if isinstance(d, str)]
    return " * ".join([*reversed(factors), str(const)])


def _same(a: int | str, b: int | str, known: set[str]) -> bool:
    """Whether two size expressions agree (at two sample bindings of the sizes)."""
    for base in SAMPLE_SIZES:
        env = {n: base + 2 * i for i, n in enumerate(sorted(known))}
        try:
            if symexpr.evaluate(a, env) != symexpr.evaluate(b, env):
                return False
        except symexpr.SymExprError:
            return False
    return True
