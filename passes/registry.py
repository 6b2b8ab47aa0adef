"""The one table of passes: kebab-case name -> the class that implements it, and the default pipeline.

Entries are imported lazily so that a research pass file can be dropped in without importing
every pass. `tkc compile --passes=a,b,c` replaces DEFAULT_PIPELINE; `--load-pass=FILE.py` adds
entries at run time (tkir.passmanager.load_pass_file).
"""

from __future__ import annotations

import importlib

from tkir.passmanager import Pass

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
    "plan-occupancy": "plan_occupancy:PlanOccupancy",  # registers, shared memory, stages, setmaxnreg
    "persistent": "persistent:Persistent",           # one block per SM looping over tiles, grouped order
    "stream-k": "stream_k:StreamK",                  # split the last partial wave along K over every block
}

# The tk-level pipeline `tkc compile` runs before the backend (in order).
DEFAULT_PIPELINE: list[str] = [
    "canonicalize",    # fold shapes and sizes first: every later decision reads constants
    "legalize-mma",    # mma operands the instructions can read (before layouts are chosen)
    "infer-layouts",   # register fragments decide how many warpgroups compute
    "select-swizzle",  # shared layouts from the consumers the layouts imply
    "bank-conflicts",  # check (and fix) every shared access under those layouts
    "create-tma",      # copies whose layouts TMA can write become descriptors
    "plan-occupancy",  # stages, roles and registers from the budget (before pipeline uses them)
    "pipeline",        # ring buffers, mbarriers, producer/consumer roles
    "persistent",      # one block per SM over output tiles, grouped order
    "stream-k",        # the last partial wave's K iterations spread over every block
    "canonicalize",    # clean up what the rewrites left
]


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
