"""Session 16's hand mutants (docs/mutation.md, "Session 16"): the sm_80 pipelined copy (ignore-src, round
addresses from round 0's, one run per tile), plan-occupancy's producer rule, time_pair_ms's rotated order
and the fence-loads research pass. Each is applied, the tests that touch it are run (TKIR_CACHE=0, stop at
the first failure) and the file is put back. `python3 scripts/mutate_session16.py [NAME ...]` from the
repository root; prints killed/SURVIVED."""

from __future__ import annotations

import sys

from hand_mutants import run_named

M = [  # (name, file, snippet, its mutation, tests)
    ("ignore-src-inverted", "backend/rules_sm80.py", 'f"setp.eq.b32 {IGNORE_SRC}, $2, 0;",',
     'f"setp.ne.b32 {IGNORE_SRC}, $2, 0;",', "copy"),
    ("row-pitch-in-elements", "backend/rules_sm80.py", "{ncols64}, {dr * eb}", "{ncols64}, {dr}", "copy"),
    ("ignores-row-test", "backend/rules_sm80.py", "w.op(f'and i1 {rok}, {cok}', 'ok')",
     "w.op(f'and i1 1, {cok}', 'ok')", "copy"),
    ("sm80-ptx-7.4-with-ignore-src", "backend/ptx.py", "        features = PTX_FEATURES_IGNORE_SRC",
     "        features = PTX_FEATURES_CACHE_HINT", "copy"),
    ("yield-per-copy", "backend/rules_sm80.py",
     '              ["r", "l", "r", "r"], [("i32", saddr), ("ptr addrspace(1)", g), ("i32", ok), ("i32", on)])\n',
     '              ["r", "l", "r", "r"], [("i32", saddr), ("ptr addrspace(1)", g), ("i32", ok), ("i32", on)])\n'
     "        yield\n", "runs"),
    ("producers-on-ties-lost", "passes/plan_occupancy.py", "if _mma_warps_per_sm(one) > _mma_warps_per_sm(plan):",
     "if _mma_warps_per_sm(one) >= _mma_warps_per_sm(plan):", "plan"),
    ("producers-always", "passes/plan_occupancy.py", "if _mma_warps_per_sm(one) > _mma_warps_per_sm(plan):",
     "if False:", "plan"),
    ("order-fixed", "tkir/tools/timing.py", "rotate: bool = True", "rotate: bool = False", "bench"),
    ("reps-not-rounded", "tkir/tools/timing.py", "        reps = -(-reps // count) * count\n", "", "bench"),
    ("fence-after-store", "passes/fence_loads.py", "            return False  # a store before the reduction",
     "            continue  # a store before the reduction", "fence"),
    ("fence-across-loops", "passes/fence_loads.py", "        if last_load is not None and not _register_compute(op):",
     "        if False:", "fence-py"),
]
TESTS = {
    "copy": ["tests/test_backend_sm80.py", "tests/test_filecheck.py", "-k", "pipelined_copy or sm80"],
    "runs": ["tests/test_pipeline_cp_async.py", "tests/test_filecheck.py", "-k", "loop_sass or sm80-pipeline"],
    "plan": ["tests/test_occupancy.py", "-k", "producer"],
    "bench": ["tests/test_bench.py"],
    "fence": ["tests/test_filecheck.py", "-k", "fence"],
    "fence-py": ["tests/test_fence_loads.py"],
}
run_named(M, TESTS, sys.argv[1:])
