"""The one table of passes: kebab-case name -> the class that implements it, and the default pipeline.

Entries are imported lazily so that a research pass file can be dropped in without importing
every pass. `tkc compile --passes=a,b{k=v},c` replaces DEFAULT_PIPELINE; `--load-pass=FILE.py` adds
entries at run time (tkir.passmanager.load_pass_file). LEGACY_OPTIONS maps the deprecated
`--pass-option KEY=VALUE` / `--group-m G` spellings onto pass parameters (legacy_pipeline).
"""

from __future__ import annotations

import importlib
import warnings

from tkir.pass_pipeline import PassSpec, as_specs
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
    "hoist-loads": "hoist_loads:HoistLoads",        # later global loads issued right after the first (@hoist_loads)
    "contract-fma": "contract_fma:ContractFma",     # f32 x * y read once by + or -: one fma per element
    "fuse-row-stats": "fuse_row_stats:FuseRowStats",  # a row mean and var of one tile: one pass, one exchange
    "fence-loads": "fence_loads:FenceLoads",        # a kernel's first register loads issued before its first reduction
    "cache-policy": "cache_policy:CachePolicy",     # global -> register loads get an L2 eviction priority
    "readonly-loads": "readonly_loads:ReadonlyLoads",  # tensors never written read through ld.global.nc
    "cluster-rows": "cluster_rows:ClusterRows",     # a register-only block spread over a cluster of CTAs (@cluster)
    "early-release": "early_release:EarlyRelease",  # a barrier ring per tile: stages freed by their last reader
    "pingpong": "pingpong:Pingpong",                # consumer warpgroups take turns issuing mmas (named barriers)
    "split-masks": "split_masks:SplitMasks",        # masks only on the iterations that can mask
    "overlap-mma": "overlap_mma:OverlapMma",        # next block's wgmma issued before this block's softmax
    "stream-k": "stream_k:StreamK",                  # split the last partial wave along K over every block
    "stage-epilogue": "stage_epilogue:StageEpilogue",  # mma.sync accumulator stores: per-warp shared rows, 16 B
}

# The tk-level pipeline `tkc compile` runs before the backend (in order).
DEFAULT_PIPELINE: list[str] = [
    "canonicalize",    # fold shapes and sizes first: every later decision reads constants
    "legalize-mma",    # mma operands the instructions can read (before layouts are chosen)
    "fold-scale",      # a positive scale moved past masks and row max/min, fused with the subtraction
    "contract-fma",    # f32 multiply read once by an add or subtract: one fma (nvcc's and Triton's default)
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
    "plan-occupancy",  # stages, roles and registers from the budget (before pipeline uses them)
    "pipeline",        # ring buffers, mbarriers, producer/consumer roles
    "pipeline-cp-async",  # the mma.sync path's (sm_80) cp.async ring buffers: copies S-1 k-tiles ahead
    "early-release",   # one ring per loaded tile: each stage released by the mma that read it last
    "persistent",      # one block per SM over output tiles, grouped order
    "stream-k{opt_in=true}",  # Stream-K, only for kernels whose source asks (@stream_k(1)): tkc tune chooses
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
