"""The one table of passes: kebab-case name -> the class that implements it, and the default pipeline.

Entries are imported lazily so that a research pass file can be dropped in without importing
every pass. `tkc compile --passes=a,b{k=v},c` replaces DEFAULT_PIPELINE; `--load-pass=FILE.py` adds
entries at run time (tkir.passmanager.load_pass_file). LEGACY_OPTIONS maps the deprecated
`--pass-option KEY=VALUE` / `--group-m G` spellings onto pass parameters (legacy_pipeline).
A kernel's `@passes(...)` edits the default pipeline for itself (apply_pass_edits), within what
ADDABLE_AFTER, REQUIRES and BACKEND_REQUIRES allow.
"""

from __future__ import annotations

import importlib
import warnings

from tkir.pass_pipeline import PassEdit, PassSpec, as_specs
from tkir.passmanager import Pass, PassError

# name -> "module:Class" (modules under tkir.passes)
PASS_TABLE: dict[str, str] = {
    "verify": "verify:Verify",                      # re-check the IR (also runs after every pass)
    "canonicalize": "canonicalize:Canonicalize",    # fold compile-time arithmetic, drop dead ops
    "legalize-mma": "legalize_mma:LegalizeMma",    # register mma operands: explicit transposes, staged B
    "infer-layouts": "infer_layouts:InferLayouts",  # register fragment layouts + conversions
    "select-swizzle": "select_swizzle:SelectSwizzle",  # shared tile swizzle + alignment
    "bank-conflicts": "bank_conflicts:BankConflicts",  # conflict degree of shared accesses, fixes
    "create-tma": "create_tma:CreateTma",            # global<->shared copies -> TMA descriptors
    "pipeline": "pipeline:Pipeline",                 # ring buffers, mbarriers, producer/consumer roles
    "pipeline-cp-async": "pipeline_cp_async:PipelineCpAsync",  # sm_80: S-stage cp.async ring buffers, one role
    "plan-occupancy": "plan_occupancy:PlanOccupancy",  # registers, shared memory, stages, setmaxnreg
    "persistent": "persistent:Persistent",           # one block per SM looping over tiles, grouped order
    "longest-first": "longest_first:LongestFirst",  # blocks whose loops grow with their index launched longest first
    "fold-scale": "fold_scale:FoldScale",            # x * c past masks and row max; x * c - m as one fma
    "exp-base2": "exp_base2:ExpBase2",              # exp(a - v) as exp2(a log2e - v log2e): one fma, no multiply
    "hoist-loads": "hoist_loads:HoistLoads",        # later global loads issued right after the first (@hoist_loads)
    "prefetch-loads": "prefetch_loads:PrefetchLoads",  # a reducing loop's register loads issued an iteration ahead
    "contract-fma": "contract_fma:ContractFma",     # f32 x * y read once by + or -: one fma per element
    "fold-acc-init": "fold_acc_init:FoldAccInit",  # (a @ b) - v: the mma accumulates onto -v (v dies before it)
    "fuse-row-stats": "fuse_row_stats:FuseRowStats",  # a row mean and var of one tile: one pass, one exchange
    "fence-loads": "fence_loads:FenceLoads",        # a kernel's first register loads issued before its first reduction
    "cache-policy": "cache_policy:CachePolicy",     # global -> register loads get an L2 eviction priority
    "readonly-loads": "readonly_loads:ReadonlyLoads",  # tensors never written read through ld.global.nc
    "cluster-rows": "cluster_rows:ClusterRows",     # a register-only block spread over a cluster of CTAs (@cluster)
    "coarsen-rows": "coarsen_rows:CoarsenRows",     # row kernels adding into global tensors: bounded grid, row loop
    "vector-red": "vector_red:VectorRed",          # f32 register adds into global memory, four a red (sm_90a)
    "reuse-smem": "reuse_smem:ReuseSmem",          # a tile first written after another's last use, in its memory
    "early-release": "early_release:EarlyRelease",  # a barrier ring per tile: stages freed by their last reader
    "pingpong": "pingpong:Pingpong",                # consumer warpgroups take turns issuing mmas (named barriers)
    "split-masks": "split_masks:SplitMasks",        # masks only on the iterations that can mask
    "overlap-mma": "overlap_mma:OverlapMma",        # next block's wgmma issued before this block's softmax
    "stream-k": "stream_k:StreamK",                  # split the last partial wave along K over every block
    "stage-epilogue": "stage_epilogue:StageEpilogue",  # mma.sync accumulator stores: per-warp shared rows, 16 B
    "multicast": "multicast:Multicast",              # clusters of 2 along the tile rows share B tiles (TMA multicast)
}

# The tk-level pipeline `tkc compile` runs before the backend (in order).
DEFAULT_PIPELINE: list[str] = [
    "canonicalize",    # fold shapes and sizes first: every later decision reads constants
    "legalize-mma",    # mma operands the instructions can read (before layouts are chosen)
    "fold-scale",      # a positive scale moved past masks and row max/min, fused with the subtraction
    "exp-base2",       # exp(a - v) with v a row vector: exp2 with log2(e) folded into a's scale and v
    "contract-fma",    # f32 multiply read once by an add or subtract: one fma (nvcc's and Triton's default)
    "fold-acc-init",   # (a @ b) - v, v a broadcast vector: the product accumulated onto -v
    "fuse-row-stats",  # row_mean and row_var of one tile: one Welford pass and one exchange
    "hoist-loads",     # only kernels that ask (@hoist_loads(1)): later global loads right after the first
    "fence-loads{opt_in=true}",  # only kernels that ask (@fence_loads(1)): loads issued before the 1st reduction
    "infer-layouts",   # register fragments decide how many warpgroups compute
    "select-swizzle",  # shared layouts from the consumers the layouts imply
    "bank-conflicts",  # check (and fix) every shared access under those layouts
    "create-tma",      # copies whose layouts TMA can write become descriptors
    "cache-policy",    # global -> register loads marked L2 evict_last (measured: row kernels 1-4%, chunk loops 2-9%)
    "readonly-loads",  # loads of tensors the kernel never writes: ld.global.nc (ptxas may issue them above stores)
    "cluster-rows",    # only kernels that ask (@cluster(C)): a block's warps spread over C CTAs (before the plan)
    "coarsen-rows",    # row kernels that reduce-add into global tensors: a bounded grid walks the rows, the sums
                       # carried in registers (before the plan, which counts them and sizes the grid)
    "vector-red",      # sm_90a: reducing f32 stores add four elements a red.global.add.v4.f32
    "reuse-smem",      # epilogue staging tiles in the memory of tiles dead by then (before the plan counts bytes)
    "plan-occupancy",  # stages, roles and registers from the budget (before pipeline uses them)
    "pipeline",        # ring buffers, mbarriers, producer/consumer roles
    "pipeline-cp-async",  # the mma.sync path's (sm_80) cp.async ring buffers: copies S-1 k-tiles ahead
    "early-release",   # one ring per loaded tile: each stage released by the mma that read it last
    "multicast{auto=true}",  # two-CTA clusters sharing B, only for a size bucket whose one full wave is
                             # feed-bound by the cost model's rates (measured: gemm 1000^3 1.14x; a loss elsewhere)
    "persistent",      # one block per SM over output tiles, grouped order
    "stream-k{opt_in=true}",  # Stream-K, only for kernels whose source asks (@stream_k(1)): tkc tune chooses
    "prefetch-loads",  # a loop with row reductions: its chunk loads issued an iteration ahead, where the plan,
                       # grown by the carried tiles' registers, keeps more bytes in flight per SM
    "split-masks",     # loops split so that element masks run only where they can mask
    "overlap-mma",     # next block's q @ k.T issued before this block's softmax (FA3)
    "pingpong",        # consumer warpgroups take turns issuing their mmas: one's softmax under the other's
    "stage-epilogue",  # mma.sync accumulator stores through per-warp shared rows, 16 bytes a lane (the plan is final)
    "canonicalize",    # clean up what the rewrites left
]
# stream-k runs opt-in only: for every kernel it can rewrite it measured slower on the H200 at square
# sizes (passes/stream_k.py says why); `stream-k` without opt_in, named in a pipeline, forces it.
# Not in it (research passes, measured no faster on the H200; docs/experiments.md): longest-first (after
# persistent: causal attention 0-8% slower reversed in place, up to 18% with move_last). fence-loads runs
# opt-in only: faster at the narrow small row points, slower at wider ones (docs/experiments.md), so tkc tune
# chooses it per shape (@fence_loads(FENCE) in the row examples).

# Passes the default pipeline leaves out that a kernel may switch on with `@passes(+NAME)`: the pass each
# goes right after (the places the notes above give them).
ADDABLE_AFTER: dict[str, str] = {
    "longest-first": "persistent",  # it reorders the tiles persistent laid out
    "multicast": "early-release",   # it marks the rings pipeline built; persistent pairs the cluster's tiles
}
# Pass -> the passes it needs to have run before it, so that `@passes(-NAME)` cannot take them away while it
# stays: each pass's docstring says so (pipeline and pipeline-cp-async take the stage count and the roles
# from plan-occupancy's plan; without it the backend finds roles the block has no threads for).
REQUIRES: dict[str, tuple[str, ...]] = {
    "pipeline": ("plan-occupancy",),
    "pipeline-cp-async": ("plan-occupancy",),
}
# What the backend cannot lower without: register tiles with no layout ("has no layout (run infer-layouts)").
BACKEND_REQUIRES: tuple[str, ...] = ("infer-layouts",)
OPT_IN = "opt_in"  # the parameter of a pass the pipeline runs only for kernels that ask (stream-k, fence-loads)
# Parameters under which a pipeline entry rewrites only some kernels: `+NAME` drops them (the pass then rewrites
# every kernel it applies to): OPT_IN, and multicast's `auto` (only where its cost rule predicts a gain).
CONDITIONAL = (OPT_IN, "auto")


def apply_pass_edits(pipeline: list[PassSpec], edits: list[PassEdit],
                     registry: dict[str, type[Pass]]) -> list[PassSpec]:
    """The pipeline with a kernel's `@passes(...)` edits applied, in the order written:

    * `-NAME` removes every entry of NAME; an error where the pipeline runs no NAME, or where a pass that
      stays (REQUIRES) or the backend (BACKEND_REQUIRES) needs it;
    * `NAME{k=v}` sets parameters on every entry of NAME; an error where the pipeline runs no NAME;
    * `+NAME{k=v}` switches on NAME: an entry the pipeline runs opt-in only (`stream-k{opt_in=true}`) runs
      for this kernel whether or not it asks, one it runs where a rule says it pays (`multicast{auto=true}`)
      runs whatever the rule says; a pass the pipeline leaves out goes in at its place
      (ADDABLE_AFTER). An error where NAME runs already, or has no place.

    Pass names and parameter values are checked against `registry` (the passes' typed fields); every
    error is located at the edit, in the kernel's source, and names the passes it could have named."""
    specs = list(pipeline)
    for edit in edits:
        spec = edit.spec
        cls = registry.get(spec.name)
        if cls is None:
            raise PassError(spec.loc(), f"@passes: unknown pass '{spec.name}'", source=spec.source or None,
                            hint="known passes: " + ", ".join(sorted(registry)))
        cls.from_spec(spec)  # its parameters, each located where it is written
        here = [i for i, s in enumerate(specs) if s.name == spec.name]
        running = ", ".join(dict.fromkeys(s.name for s in specs))
        if edit.action == "remove":
            if not here:
                raise PassError(spec.loc(), f"@passes: '-{spec.name}': the pipeline does not run {spec.name}",
                                source=spec.source or None, hint=f"the pipeline: {running}")
            specs = [s for s in specs if s.name != spec.name]
            _check_required(spec, specs)
        elif edit.action == "set":
            if not here:
                raise PassError(spec.loc(), f"@passes: '{spec}': the pipeline does not run {spec.name}",
                                source=spec.source or None,
                                hint=f"write +{spec} to switch it on" if spec.name in ADDABLE_AFTER
                                else f"the pipeline: {running}")
            specs = [_merged(s, spec, s.params) if s.name == spec.name else s for s in specs]
        else:
            specs = _added(specs, spec, here, running)
        for i in here if edit.action != "remove" else ():
            registry[spec.name].from_spec(specs[i])  # the parameters together (a pass may refuse a mix)
    return specs


def _merged(old: PassSpec, edit: PassSpec, params: dict[str, str]) -> PassSpec:
    """Entry `old` with the edit's parameters on top of `params`, located at the edit."""
    return PassSpec(old.name, {**params, **edit.params}, edit.col, edit.param_cols, edit.source, edit.file,
                    edit.line, edit.param_lines)


def _added(specs: list[PassSpec], spec: PassSpec, here: list[int], running: str) -> list[PassSpec]:
    """`+NAME`: the opt-in entries of NAME made unconditional, or NAME inserted at its place."""
    if here:
        if not all(any(specs[i].params.get(p) in ("true", "1") for p in CONDITIONAL) for i in here):
            raise PassError(spec.loc(), f"@passes: '+{spec.name}': the pipeline runs {spec.name} already",
                            source=spec.source or None,
                            hint=f"write {spec.name}{{key=value}} to set its parameters (`tkc passes` lists them)")
        return [_merged(s, spec, {k: v for k, v in s.params.items() if k not in CONDITIONAL}) if i in here else s
                for i, s in enumerate(specs)]
    after = ADDABLE_AFTER.get(spec.name)
    at = next((i + 1 for i, s in enumerate(specs) if s.name == after), None) if after else None
    if at is None:
        where = (f"it goes after {after}, which the pipeline does not run" if after else
                 "it has no place in the default pipeline")
        addable = ", ".join(f"+{n}" for n in ADDABLE_AFTER) + " and the opt-in passes (" + ", ".join(
            dict.fromkeys(s.name for s in specs if s.params.get(OPT_IN) in ("true", "1"))) + ")"
        raise PassError(spec.loc(), f"@passes: '+{spec.name}': {where}", source=spec.source or None,
                        hint=f"a kernel may switch on {addable}; for any other pipeline pass --passes "
                             "(tkir.compile(passes=...)), which replaces the whole pipeline")
    return [*specs[:at], spec, *specs[at:]]


def _check_required(removed: PassSpec, specs: list[PassSpec]) -> None:
    """A removal that leaves a pass (or the backend) without a pass it needs is an error at the edit."""
    users = [s.name for s in specs if removed.name in REQUIRES.get(s.name, ())]
    if removed.name in BACKEND_REQUIRES:
        users.append("the backend")
    if users:
        removable = [s for s in dict.fromkeys(x.name for x in specs)
                     if s not in BACKEND_REQUIRES and not any(s in REQUIRES.get(o.name, ()) for o in specs)]
        raise PassError(removed.loc(), f"@passes: '-{removed.name}' removes a pass that "
                                       f"{' and '.join(dict.fromkeys(users))} need{'s' if len(users) == 1 else ''}",
                        source=removed.source or None, hint="passes a kernel may remove: " + ", ".join(removable))


# deprecated `--pass-option KEY=VALUE` (tkir.compile(pass_options=...)) -> (pass, parameter)
LEGACY_OPTIONS: dict[str, tuple[str, str]] = {
    "group_m": ("persistent", "group_m"),
    "balanced_grid": ("persistent", "balanced_grid"),
    "stream_k_min_iters": ("stream-k", "min_iters"),
    "stream_k_max_tail": ("stream-k", "max_tail"),
    "epilogue_chunk": ("create-tma", "epilogue_chunk"),
    "l2_promotion": ("create-tma", "l2_promotion"),
}
LEGACY_SWITCHES = {"stream_k": "forces stream-k after persistent (and persistent{balanced_grid=0})"}


def _legacy_value(value: object) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def legacy_pipeline(pipeline: list[PassSpec] | str | list[str], options: dict[str, object],
                    explicit: bool = False) -> list[PassSpec]:
    """The pipeline with the deprecated pass options applied as parameters of the passes in it.

    `stream_k=1` sets `persistent{balanced_grid=0}` unless given, and forces stream-k when the
    pipeline is the default one (`explicit` False): its opt-in `stream-k{opt_in=true}` loses the
    opt_in (a pipeline without stream-k gets `stream-k` after `persistent`);
    every other key sets a parameter of the pass it belongs to (LEGACY_OPTIONS), on each occurrence
    of that pass (an option for a pass the pipeline does not run changes nothing, as before).
    Emits one DeprecationWarning naming the new spelling."""
    specs = as_specs(pipeline)
    if not options:
        return specs
    unknown = [k for k in options if k not in LEGACY_OPTIONS and k not in LEGACY_SWITCHES]
    if unknown:
        raise PassError(None, f"unknown pass option '{unknown[0]}'",
                        hint="pass options (deprecated; write pass parameters in --passes): "
                             + ", ".join(sorted([*LEGACY_OPTIONS, *LEGACY_SWITCHES])))
    params: dict[str, dict[str, str]] = {}
    for key, value in options.items():
        if key in LEGACY_OPTIONS:
            pass_name, name = LEGACY_OPTIONS[key]
            params.setdefault(pass_name, {})[name] = _legacy_value(value)
    if _legacy_value(options.get("stream_k", 0)) in ("1", "true"):
        named = [s for s in specs if s.name == "stream-k"]
        if not named or all(s.params.get("opt_in") in ("true", "1") for s in named):
            params.setdefault("persistent", {}).setdefault("balanced_grid", "false")
        if not explicit and named and all(s.params.get("opt_in") in ("true", "1") for s in named):
            params.setdefault("stream-k", {})["opt_in"] = "false"  # the default pipeline's opt-in entry, forced
        at = next((i + 1 for i, s in enumerate(specs) if s.name == "persistent"), None)
        if at is not None and not explicit and not named:
            specs = [*specs[:at], PassSpec("stream-k"), *specs[at:]]
    out = [PassSpec(s.name, {**s.params, **params.get(s.name, {})}, s.col, s.param_cols, s.source) for s in specs]
    warnings.warn("pass options are deprecated; write the pipeline with pass parameters instead: "
                  + ",".join(str(s) for s in out), DeprecationWarning, stacklevel=3)
    return out


def load_registry() -> dict[str, type[Pass]]:
    """Import every pass whose module exists; missing ones are reported when named."""
    out: dict[str, type[Pass]] = {}
    for name, target in PASS_TABLE.items():
        mod_name, cls_name = target.split(":")
        try:
            mod = importlib.import_module(f"tkir.passes.{mod_name}")
        except ModuleNotFoundError as e:
            if e.name == f"tkir.passes.{mod_name}":
                continue
            raise
        out[name] = getattr(mod, cls_name)
    return out
