"""Session 12's hand mutants of the sm_80 producer warps (docs/mutation.md, "Session 12"): each is applied,
the tests that touch the new code are run (TKIR_CACHE=0, stop at the first failure), and the file is put
back. `python3 scripts/mutate_session12.py [NAME ...]` from the repository root; prints killed/SURVIVED."""

from __future__ import annotations

import sys

from hand_mutants import try_mutant

M = [  # (name, file, snippet, its mutation)
    (
        "full-count-one-copy",
        "passes/pipeline.py",
        "n_producers * WARP * len(loads) if cp_async else 0",
        "n_producers * WARP if cp_async else 0",
    ),
    (
        "defer-on-sm80",
        "passes/pipeline.py",
        "defer = ring.stages >= 2 and not ring.cp_async",
        "defer = ring.stages >= 2",
    ),
    (
        "expect-on-sm80",
        "passes/pipeline.py",
        "    if not ring.cp_async:  # cp.async copies arrive themselves",
        "    if True:  # cp.async copies arrive themselves",
    ),
    (
        "empty-count-warpgroups-sm80",
        "passes/pipeline.py",
        "consumer_warps = n_consumers if cp_async else",
        "consumer_warps = 4 * n_consumers if cp_async else",
    ),
    (
        "sched-floor",
        "passes/plan_occupancy.py",
        "per_scheduler = -(-(warps + producer_warps) // SCHEDULERS_PER_SM)",
        "per_scheduler = (warps + producer_warps) // SCHEDULERS_PER_SM",
    ),
    (
        "auto-any-loop",
        "passes/plan_occupancy.py",
        "if not _only_copies_and_mma(loop) or (requested or 1) > 1:",
        "if (requested or 1) > 1:",
    ),
    (
        "consumer-budget-full",
        "passes/plan_occupancy.py",
        "needed = _round_up(budget.total - budget.addr_regs + POINTER_REGS, REG_ALLOC_UNIT)",
        "needed = _round_up(budget.total, REG_ALLOC_UNIT)",
    ),
    ("no-wait-all", "backend/rules_pipe.py", "cp_async_wait_all(w)", "pass"),
    (
        "try-wait-sm80",
        "backend/idioms.py",
        'test = "try_wait" if target == "sm_90a" else "test_wait"',
        'test = "try_wait"',
    ),
    (
        "no-noinc-arrive",
        "backend/rules_sm80.py",
        "    cp_async_mbarrier_arrive(cx.w, cx.target, bar)",
        "    pass",
    ),
    (
        "requires-no-producer-copies",
        "tkir/requires.py",
        'if op.name == "pipe.copy" and op.attrs.get("cp_async")',
        'if False and op.name == "pipe.copy"',
    ),
    (
        "role-warp-offset",
        "backend/rules_pipe.py",
        'ctx.tid = w.op(f"sub i32 {cx.tid}, {first_warp * WARP}", "rtid")',
        'ctx.tid = w.op(f"sub i32 {cx.tid}, {first_warp * 4 * WARP if by_warps else first_warp * WARP}", "rtid")',
    ),
    (
        "persistent-sm80",
        "passes/persistent.py",
        'if any(isinstance(r.attrs.get("warps"), int) for r in roles) and not kernel.attrs.get(REQUEST_ATTR):',
        "if False:",
    ),
    (
        "store-block-tid",
        "backend/rules_sm80.py",
        "slot_coords(lay, t.shape, LLVMBuilder(w), cx.thread_index())",
        "slot_coords(lay, t.shape, LLVMBuilder(w), cx.tid)",
    ),
    (
        "ptx70-parity",
        "backend/ptx.py",
        'features = PTX_FEATURES_PARITY_WAIT if target == "sm_80" and PARITY_WAIT in ir else None',
        "features = None",
    ),
]
TESTS = [
    "tests/test_filecheck.py",
    "tests/test_pipeline_interp.py",
    "tests/test_occupancy.py",
    "tests/test_backend_sass.py",
    "tests/test_backend_sm80.py",
    "tests/test_runtime.py",
    "tests/test_persistent_grid.py",
]
SELECT = "sm80 or producer or pipeline or interp or aligned or occupancy or persistent or deadlock"
sel = sys.argv[1:] or [m[0] for m in M]
for name, path, old, new in M:
    if name in sel:
        try_mutant(name, path, old, new, [*TESTS, "-k", SELECT])
