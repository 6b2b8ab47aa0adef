"""Session 19's hand mutants (docs/mutation.md, "Session 19"): `@cluster(C)` and cluster-rows (the front
end's sizes, the pass's refusals and its sm_80 skip, the plan per CTA, the launch description, the
backend's cluster registers, exchange and guard, the tune model). Each is applied, the tests that touch it
are run (TKIR_CACHE=0, stop at the first failure) and the file is put back. `python3
scripts/mutate_session19.py [NAME ...]` from the repository root; prints killed/SURVIVED. The thread
numbering inside a cluster (rank x CTA threads + tid) is checked only on the GPU
(tests/test_cluster_rows.py's GPU cases): its mutants are not in this CPU list."""

from __future__ import annotations

import sys

from hand_mutants import run_named

CR = "passes/cluster_rows.py"
MEM = "backend/exchange.py"
M = [  # (name, file, snippet, its mutation, tests)
    ("never-clustered", CR, "            kernel.attrs[CLUSTER_ATTR] = c\n", "            pass\n", "fc"),
    ("sm80-clustered", CR, '            if options.target != "sm_90a":', "            if False:", "unit"),
    ("column-reduction-allowed", CR, 'str(op.attrs.get("axis")) == "col"', 'str(op.attrs.get("axis")) == "cols"',
     "unit"),
    ("shared-allowed", CR, '_REFUSED = {"tk.alloc": "a shared allocation",', '_REFUSED = {"tk.alloc_": "",', "unit"),
    ("uneven-warps-allowed", CR, "    if warps % c:", "    if False:", "unit"),
    ("plan-per-block", "passes/plan_occupancy.py", "        threads //= cluster\n", "        pass\n", "unit"),
    ("block-id-from-ctaid", "backend/rules_core.py", '    sreg = "clusterid." if cx.cluster > 1 else "ctaid."',
     '    sreg = "ctaid."', "fc"),
    ("no-cluster-dim", "backend/lower_llvm.py", "nvvm.cluster_dim", "nvvm.cluster_dim_off", "fc"),
    ("exchange-local", MEM, "    return cx.cluster > 1 and (cx.cta_threads // WARP_THREADS) % parts != 0",
     "    return False", "fc"),
    ("exchange-always", MEM, "    return cx.cluster > 1 and (cx.cta_threads // WARP_THREADS) % parts != 0",
     "    return cx.cluster > 1", "fc"),
    ("exchange-own-cta-only", MEM, "    for r in range(cx.cluster):", "    for r in range(1):", "fc"),
    ("exchange-cta-barrier", MEM, "    cluster_barrier(cx.w) if across else cx.sync()", "    cx.sync()", "fc"),
    ("scratch-unguarded", "backend/context.py", "        if self.cluster > 1 and not cluster_wide:",
     "        if False:", "unit"),
    ("grid-in-blocks", "backend/launch.py", '        grid[0] = f"{cluster} * ({grid[0]})"', "        pass", "unit"),
    ("launch-without-cluster", "backend/launch.py", '        out["cluster"] = [cluster, 1, 1]', "        pass", "unit"),
    ("model-ignores-cluster", "tkir/tune_model.py", "    blocks = max(1, cluster)\n", "    blocks = 1\n", "unit"),
    ("size-3-accepted", "frontend/lower.py", "CLUSTER_SIZES = (1, 2, 4, 8)", "CLUSTER_SIZES = (1, 2, 3, 4, 8)", "unit"),
]
TESTS = {
    "fc": ["tests/test_filecheck.py", "-k", "cluster-rows"],
    "unit": ["tests/test_cluster_rows.py"],
}
run_named(M, TESTS, sys.argv[1:])
