"""Session 13's hand mutants (docs/mutation.md, "Session 13"): hoist-loads, infer-layouts' idle-warp split
and class chunk width, the tune model's lone blocks and floor, tkir.tools.timing's host-lead fallback, the
`@hoist_loads` annotation and rmsnorm's chunk loop. Each is applied, the tests that touch it are run
(TKIR_CACHE=0, stop at the first failure) and the file is put back.
`python3 scripts/mutate_session13.py [NAME ...]` from the repository root; prints killed/SURVIVED."""

from __future__ import annotations

import sys

from hand_mutants import run_named

M = [  # (name, file, snippet, its mutation, tests)
    ("hoist-ignores-request", "passes/hoist_loads.py",
     "if not (self.all or kernel.attrs.get(REQUEST_ATTR)):", "if not self.all:", "filecheck"),
    ("hoist-past-store", "passes/hoist_loads.py",
     "if any(global_store(inner) for inner in op.walk()):", "if False:", "filecheck"),
    ("hoist-sees-top-level-stores-only", "passes/hoist_loads.py",
     "if any(global_store(inner) for inner in op.walk()):", "if global_store(op):", "filecheck"),
    ("hoist-ignores-operands", "passes/hoist_loads.py",
     "if _global_load(op) and not any(id(v) in defined_after for v in op.operands):",
     "if _global_load(op):", "filecheck"),
    ("hoist-reverses-order", "passes/hoist_loads.py", "            anchor = op\n", "", "filecheck"),
    ("idle-split-off", "passes/infer_layouts.py", "split_idle_warps: bool = param(True,",
     "split_idle_warps: bool = param(False,", "filecheck"),
    ("idle-no-narrower", "passes/infer_layouts.py", "for v in _narrower(vec):", "for v in []:", "filecheck"),
    ("class-chunk-first-value", "passes/infer_layouts.py", "if id(v) in touches:", "if True:", "sass"),
    ("class-chunk-narrowest-only", "passes/infer_layouts.py", "if id(v) in touches:", "if False:", "sass"),
    ("model-shares-with-absent-blocks", "tkir/tools/tune_model.py",
     "per_sm = max(1, min(blocks_per_sm, math.ceil(blocks / NUM_SMS)))", "per_sm = max(1, blocks_per_sm)", "tune"),
    ("model-no-floor", "tkir/tools/tune_model.py",
     "ms = max(waves * per_block, KERNEL_FLOOR_S) * 1e3", "ms = waves * per_block * 1e3", "tune"),
    ("lead-fallback-none", "tkir/tools/timing.py", "for _ in range(FALLBACK_LEAD_FLUSHES):", "for _ in range(0):",
     "bench"),
    ("annotation-drops-request", "frontend/lower.py",
     'return self.ann_switch(a, "H", HOIST_LOADS_ATTR)', "return {}", "filecheck"),
    ("annotation-accepts-2", "frontend/lower.py",
     "if c not in (0, 1) or isinstance(c, float):\n            raise self.error(a.args[0].loc, f\"bad argument",
     "if c not in (0, 1, 2) or isinstance(c, float):\n            raise self.error(a.args[0].loc, f\"bad argument",
     "diagnostics"),
    ("rmsnorm-sum-not-squares", "examples/rmsnorm.tk", "sq += xcf * xcf", "sq += xcf", "examples"),
]
TESTS = {
    "filecheck": ["tests/test_filecheck.py", "-k", "hoist or idle"],
    "sass": ["tests/test_backend_sass.py", "-k", "chunk_loop or class_of"],
    "tune": ["tests/test_tune.py", "-k", "lone"],
    "bench": ["tests/test_bench.py", "-k", "lead"],
    "diagnostics": ["tests/test_diagnostics.py", "-k", "hoist"],
    "examples": ["tests/test_examples_interp.py", "-k", "rmsnorm"],
}
run_named(M, TESTS, sys.argv[1:])
