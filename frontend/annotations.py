"""The annotations of the language: one table from name to where it applies, what arguments it takes
and what it writes into the IR.

`ANNOTATIONS[name]` gives the construct an annotation may precede (CONSTRUCTS), its arity (checked
here, before its arguments are read), how to write it (the hint of its errors) and the function
that checks its argument values and returns the attrs it adds: to `tk.kernel` for the kernel's,
to `scf.for`, `tk.alloc` or `tk.load` for those of a loop, a shared declaration or a load. Most
kernel annotations are requests that a pass reads (the *_ATTR names below; each pass names the attr
it reads). `check_annotations` is the entry the statements and the kernel header call; ANNOTATIONS stands at
the end of the module, after the functions its rows name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tkir.diagnostics import CompileError
from tkir.facts import MAX_STREAM_K_MIN_ITERS, MIN_BLOCKS_ATTR
from tkir.frontend import ast
from tkir.frontend.exprs import ExpressionLowering
from tkir.frontend.tune import check_tune
from tkir.pass_pipeline import PassEdit, edits_text, parse_pass_edits
from tkir.target import MAX_BLOCKS_PER_SM, MAX_THREADS_PER_BLOCK, WARP

# the constructs an annotation may precede, as its misplacement error names them
CONSTRUCTS = {"kernel": "the kernel", "for": "a for loop", "shared": "a shared declaration",
              "load": "a load statement"}
SWIZZLE_CHOICES = {"128": 128, "64": 64, "32": 32, "none": 0}  # bytes; 0 = unswizzled
STREAM_K_ATTR = "stream_k_requested"  # what `@stream_k(1)` records; passes/stream_k.py reads it
STREAM_K_MIN_ITERS_ATTR = "stream_k_min_iters"  # what `@stream_k(1, min_iters=I)` adds; passes/stream_k.py
PERSISTENT_ATTR = "persistent_requested"  # what `@persistent(1)` records; passes/persistent.py reads it
HOIST_LOADS_ATTR = "hoist_loads_requested"  # what `@hoist_loads(1)` records; passes/hoist_loads.py reads it
FENCE_LOADS_ATTR = "fence_loads_requested"  # what `@fence_loads(1)` records; passes/fence_loads.py reads it
CLUSTER_ATTR = "cluster_requested"  # what `@cluster(C)` with C > 1 records; passes/cluster_rows.py reads it
WARPS_ATTR = "warps"  # what `@warps(W)` with W >= 1 records; passes/infer_layouts.py reads it
PASSES_ATTR = "passes"  # what `@passes(...)` records: the kernel's pipeline edits (tkir.api applies them)
MAX_BLOCK_WARPS = MAX_THREADS_PER_BLOCK // WARP  # 32: a block's 1024 threads
# `@warpgroups(producers=P)`: the pipeline has one producer warpgroup (a TMA copy is issued by one thread;
# plan-occupancy plans exactly one) or none (the compute warpgroups copy with cp.async)
PRODUCER_WARPGROUPS = (0, 1)
CLUSTER_SIZES = (1, 2, 4, 8)  # CTAs per cluster: powers of two up to the portable maximum, 8 (HOPPER.md; CUDA
                              # C Programming Guide, "Thread Block Clusters")


@dataclass(frozen=True)
class Arity:
    """The arguments an annotation takes; its error says "'@NAME' takes {words}"."""

    words: str
    positional: int | None  # exactly this many positional arguments; None: named ones only, at least one
    keywords: tuple[str, ...] = ()  # optional named arguments, each at most once

    def accepts(self, a: ast.Annotation) -> bool:
        if self.positional is None:
            return not a.args and bool(a.kwargs)
        names = [key for key, _ in a.kwargs]
        return len(a.args) == self.positional and set(names) <= set(self.keywords) and len(set(names)) == len(names)


NO_ARGUMENTS = Arity("no arguments", 0)
ONE_ARGUMENT = Arity("one argument", 1)
NAMED_ARGUMENTS = Arity("named arguments", None)

# (lowerer, the annotation, its form): checks the argument values; the attrs it adds
AnnotationLowering = Callable[[ExpressionLowering, ast.Annotation, str | None], dict[str, object]]


@dataclass(frozen=True)
class AnnotationRule:
    """One annotation: where it applies, what it takes, how it is written, what it adds."""

    applies_to: str  # a key of CONSTRUCTS
    arity: Arity | None  # None: its lowering checks the arguments itself (@tune)
    form: str | None  # how to write it: the hint of its argument errors
    lower: AnnotationLowering


def check_annotations(lw: ExpressionLowering, anns: list[ast.Annotation],
                      construct: str) -> dict[str, dict[str, object]]:
    """Check annotations against the construct they precede (a key of CONSTRUCTS, or "none" where no
    annotation applies); name -> the attrs it adds."""
    out: dict[str, dict[str, object]] = {}
    for a in anns:
        rule = ANNOTATIONS.get(a.name)
        if rule is None:
            raise lw.error(a.loc, f"unknown annotation '@{a.name}'",
                           hint="known: " + ", ".join("@" + n for n in ANNOTATIONS))
        if rule.applies_to != construct:
            raise lw.error(a.loc, f"'@{a.name}' applies to {CONSTRUCTS[rule.applies_to]}, not here")
        if a.name in out:
            raise lw.error(a.loc, f"duplicate annotation '@{a.name}'")
        if rule.arity is not None and not rule.arity.accepts(a):
            raise lw.error(a.loc, f"'@{a.name}' takes {rule.arity.words}", hint=rule.form)
        out[a.name] = rule.lower(lw, a, rule.form)
    return out


def kernel_attrs(lw: ExpressionLowering, anns: list[ast.Annotation]) -> dict[str, object]:
    """The attrs the kernel's annotations add to `tk.kernel`, in the order written."""
    attrs: dict[str, object] = {}
    for ann in check_annotations(lw, anns, "kernel").values():
        attrs.update(ann)
    wg = attrs.get("warpgroups")
    if WARPS_ATTR in attrs and isinstance(wg, dict) and "consumers" in wg:
        # @warps(W >= 1) sizes the block in place of @warpgroups' consumers (a producers= stays)
        rest = {r: n for r, n in wg.items() if r != "consumers"}
        if rest:
            attrs["warpgroups"] = rest
        else:
            del attrs["warpgroups"]
    return attrs


# --- the argument values of each annotation ---------------------------------------------------------


def _positive(lw: ExpressionLowering, a: ast.Annotation, e: ast.Expr, form: str) -> int:
    c = lw.const_eval(e)
    if not isinstance(c, int) or c < 1:
        raise lw.error(e.loc, f"bad argument to '@{a.name}': expected a positive integer", hint=form)
    return c


def _stages(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@stages(S)`: the software pipeline depth of the loop's loads."""
    return {"stages": _positive(lw, a, a.args[0], form)}


def _swizzle(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@swizzle(B)`: the shared tile's swizzle span in bytes (none: unswizzled)."""
    e = a.args[0]
    key = str(e.value) if isinstance(e, ast.Num) else e.id if isinstance(e, ast.Name) else None
    if key not in SWIZZLE_CHOICES:
        raise lw.error(e.loc, "bad argument to '@swizzle': expected 128, 64, 32 or none",
                       hint="the swizzle is the span in bytes that 16-byte chunks are permuted over")
    return {"swizzle": SWIZZLE_CHOICES[key]}


def _no_tma(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@no_tma`: this load is not made a TMA copy."""
    return {"no_tma": True}


def _warpgroups(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@warpgroups(consumers=C, producers=P)`: the block's warpgroups by role."""
    roles: dict[str, object] = {}
    for key, e in a.kwargs:
        if key not in ("consumers", "producers"):
            raise lw.error(e.loc, f"bad argument to '@warpgroups': unknown role '{key}'",
                           hint="roles are consumers and producers")
        if key == "producers":  # one warpgroup issues a pipeline's copies (passes/plan_occupancy.py), or none
            c = lw.const_eval(e)
            if type(c) is not int or c not in PRODUCER_WARPGROUPS:
                got = "a value known only at run time" if c is None else f"{c}"
                raise lw.error(e.loc, "bad argument to '@warpgroups': producers is 0 (the compute warpgroups "
                                      f"copy, with cp.async) or 1 (one producer warpgroup), got {got}", hint=form)
            roles[key] = c
            continue
        roles[key] = _positive(lw, a, e, "write @warpgroups(consumers=2)")
    return {"warpgroups": roles}


def _tune(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@tune(...)`: checked here (frontend/tune.py); the search space adds nothing to the IR."""
    check_tune(lw.kernel_ast, a, lw.source)
    return {}


def _switch_on(lw: ExpressionLowering, a: ast.Annotation, var: str) -> bool:
    """The argument of a switch: a compile-time 0 (off) or 1 (on), usually a const `var` that `@tune` chooses."""
    c = lw.const_eval(a.args[0])
    if c not in (0, 1) or isinstance(c, float):
        raise lw.error(a.args[0].loc, f"bad argument to '@{a.name}': expected 0 (off) or 1 (on)",
                       hint=f"a compile-time 0 or 1, e.g. a const {var} that @tune({var}=[0, 1]) chooses")
    return c == 1


def _switch(var: str, attr: str, record_off: bool = False) -> AnnotationLowering:
    """A kernel annotation that is a compile-time 0 or 1 (usually a const `var`, so `@tune` can choose
    it per shape): 1 records `attr = true` for the pass that reads it; 0 adds nothing, or, with `record_off`
    (a pass that decides by itself where the source does not say), `attr = false`: the source said no."""
    def lower(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
        on = _switch_on(lw, a, var)
        return {attr: True} if on else ({attr: False} if record_off else {})
    return lower


def _stream_k(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@stream_k(S)` or `@stream_k(S, min_iters=I)`: S = 1 asks the stream-k pass for the Stream-K
    schedule (passes/stream_k.py); I, a compile-time integer >= 1 (usually a const, so `@tune` can
    choose it), is the K iterations each block of the split must get, in place of the pass's
    `min_iters` (recorded as `stream_k_min_iters` only when S = 1)."""
    attrs: dict[str, object] = {STREAM_K_ATTR: True} if _switch_on(lw, a, "SK") else {}
    kwargs = dict(a.kwargs)
    if "min_iters" in kwargs:
        e = kwargs["min_iters"]
        c = lw.const_eval(e)
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_STREAM_K_MIN_ITERS:
            got = "a value known only at run time" if c is None else f"{c}"
            raise lw.error(e.loc, "bad argument to '@stream_k': min_iters expects a compile-time integer "
                           f"1..{MAX_STREAM_K_MIN_ITERS} (K iterations per block of the split), got {got}",
                           hint=form)
        if attrs:
            attrs[STREAM_K_MIN_ITERS_ATTR] = c
    return attrs


def _blocks_per_sm(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@blocks_per_sm(B)`: B a compile-time integer 0..MAX_BLOCKS_PER_SM (usually a const, so `@tune`
    can choose it), CUDA's __launch_bounds__ minBlocksPerMultiprocessor: B >= 1 records
    `min_blocks_per_sm = B`, the floor of resident blocks ptxas is asked for (plan-occupancy checks
    that B fit, the backend emits `.minnctapersm`); 0 adds nothing (the planner decides)."""
    c = lw.const_eval(a.args[0])
    if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_BLOCKS_PER_SM:
        got = "a value known only at run time" if c is None else f"{c}"
        raise lw.error(a.args[0].loc, f"bad argument to '@blocks_per_sm': expected a compile-time integer "
                       f"0..{MAX_BLOCKS_PER_SM} (resident blocks per SM; 0: the planner decides), got {got}",
                       hint=form)
    return {MIN_BLOCKS_ATTR: c} if c else {}


def _cluster(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@cluster(C)`: C a compile-time 1, 2, 4 or 8 (usually a const, so `@tune` can choose it): C > 1
    records `cluster_requested = C`, the request that the cluster-rows pass spread each block's warps
    over a cluster of C CTAs (C SMs) on sm_90a; 1 adds nothing (one CTA per block)."""
    c = lw.const_eval(a.args[0])
    if isinstance(c, bool) or c not in CLUSTER_SIZES or isinstance(c, float):
        got = "a value known only at run time" if c is None else f"{c}"
        raise lw.error(a.args[0].loc, "bad argument to '@cluster': expected a compile-time "
                       f"{', '.join(map(str, CLUSTER_SIZES[:-1]))} or {CLUSTER_SIZES[-1]} (CTAs per cluster), "
                       f"got {got}", hint=form)
    return {CLUSTER_ATTR: c} if c > 1 else {}


def _warps(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@warps(W)`: W a compile-time integer 0..MAX_BLOCK_WARPS (usually a const, so `@tune` can choose
    it): W >= 1 records `warps = W`, the block's compute warps, in place of `@warpgroups`' consumers
    (infer-layouts spreads the tiles over them; on sm_90a, W not a multiple of 4 only for kernels
    without `@`, whose wgmma needs whole warpgroups); 0 adds nothing (`@warpgroups` or the default
    sizes the block)."""
    c = lw.const_eval(a.args[0])
    if isinstance(c, bool) or not isinstance(c, int) or not 0 <= c <= MAX_BLOCK_WARPS:
        got = "a value known only at run time" if c is None else f"{c}"
        raise lw.error(a.args[0].loc, f"bad argument to '@warps': expected a compile-time integer "
                       f"0..{MAX_BLOCK_WARPS} (the block's warps; 0: @warpgroups decides), got {got}",
                       hint=form)
    return {WARPS_ATTR: c} if c else {}


def _passes(lw: ExpressionLowering, a: ast.Annotation, form: str | None) -> dict[str, object]:
    """`@passes(-overlap-mma, plan-occupancy{producer_warps=4}, +stream-k)`: the kernel's edits of the pipeline
    it is compiled with, in the pipeline's spelling (tkir.pass_pipeline); their form is checked here, the
    pass names and parameter values where they are applied (tkir.api, against the registered passes)."""
    return {PASSES_ATTR: edits_text(pass_edits(a, lw.source))}


def pass_edits(a: ast.Annotation, source: str) -> list[PassEdit]:
    """The edits of a `@passes(...)` annotation, each located where it is written in `source`."""
    if a.text is None or a.text_loc is None:  # `@passes` with no parentheses
        raise CompileError(a.loc, "'@passes' takes pass edits in parentheses", source,
                           hint=ANNOTATIONS["passes"].form)
    return parse_pass_edits(a.text, a.text_loc, source)


# name: AnnotationRule(where it applies, arity, form, lowering); the comment says what it adds
ANNOTATIONS: dict[str, AnnotationRule] = {
    "stages": AnnotationRule("for", ONE_ARGUMENT, "write @stages(4)", _stages),  # scf.for {stages}
    "swizzle": AnnotationRule("shared", ONE_ARGUMENT, "write @swizzle(128)", _swizzle),  # tk.alloc {swizzle}
    "no_tma": AnnotationRule("load", NO_ARGUMENTS, None, _no_tma),  # tk.load {no_tma}
    "warpgroups": AnnotationRule(  # tk.kernel {warpgroups = {consumers, producers}}
        "kernel", NAMED_ARGUMENTS, "write @warpgroups(consumers=2) or @warpgroups(consumers=2, producers=1)",
        _warpgroups),
    "tune": AnnotationRule("kernel", None, None, _tune),  # nothing: the search space (frontend/tune.py)
    "stream_k": AnnotationRule(  # tk.kernel {stream_k_requested, stream_k_min_iters}
        "kernel", Arity("one argument and an optional min_iters=", 1, ("min_iters",)),
        "write @stream_k(SK) or @stream_k(SK, min_iters=SKI) with consts SK = 0 or 1 and SKI >= 1", _stream_k),
    "blocks_per_sm": AnnotationRule(  # tk.kernel {min_blocks_per_sm}
        "kernel", ONE_ARGUMENT,
        "write @blocks_per_sm(4), or @blocks_per_sm(OCC) with a const OCC that @tune(OCC=[0, 4]) chooses",
        _blocks_per_sm),
    # @persistent(1) asks the persistent pass to loop each block over the tiles of a 1-D or 3-D grid too, in
    # launch order (passes/persistent.py; 2-D grids are made persistent either way)
    "persistent": AnnotationRule(  # tk.kernel {persistent_requested}
        "kernel", ONE_ARGUMENT, "write @persistent(1), or @persistent(P) with a const P = 0 or 1",
        _switch("P", PERSISTENT_ATTR)),
    # @hoist_loads(1) asks the hoist-loads pass to issue the kernel's later global loads right after its
    # first one (passes/hoist_loads.py)
    "hoist_loads": AnnotationRule(  # tk.kernel {hoist_loads_requested}
        "kernel", ONE_ARGUMENT, "write @hoist_loads(1), or @hoist_loads(H) with a const H = 0 or 1",
        _switch("H", HOIST_LOADS_ATTR, record_off=True)),
    # @fence_loads(1) asks the fence-loads pass to keep the kernel's first global register loads issued
    # before its first reduction (passes/fence_loads.py)
    "fence_loads": AnnotationRule(  # tk.kernel {fence_loads_requested}
        "kernel", ONE_ARGUMENT, "write @fence_loads(1), or @fence_loads(F) with a const F = 0 or 1",
        _switch("F", FENCE_LOADS_ATTR, record_off=True)),
    "cluster": AnnotationRule(  # tk.kernel {cluster_requested}
        "kernel", ONE_ARGUMENT, "write @cluster(2), or @cluster(CL) with a const CL that @tune(CL=[1, 2]) chooses",
        _cluster),
    "warps": AnnotationRule(  # tk.kernel {warps}
        "kernel", ONE_ARGUMENT, "write @warps(2), or @warps(NW) with a const NW that @tune(NW=[0, 1, 2]) chooses",
        _warps),
    "passes": AnnotationRule(  # tk.kernel {passes}: the edits as one line (tkir.pass_pipeline.edits_text)
        "kernel", None, "write @passes(-overlap-mma) or @passes(plan-occupancy{producer_warps=4}, +stream-k)",
        _passes),
}
