"""Session 18's hand mutants (docs/mutation.md, "Session 18"): readonly-loads (its marks, the re-reads,
the PTX, the launch's list), the overlap check in the runtime and in the C launcher, the tuner's
choice by the second round, row_mean / row_var (interpreter, verifier) and fuse-row-stats. Each is
applied, the tests that touch it are run (TKIR_CACHE=0, stop at the first failure) and the file is put
back. `python3 scripts/mutate_session18.py [NAME ...]` from the repository root; prints killed/SURVIVED.
The Welford lowering itself (rules_registers._row_stats, exchange.combine_row_stats) is checked
only on the GPU (tests/test_row_stats.py, marked gpu): its mutants are not in this CPU list."""

from __future__ import annotations

import sys

from hand_mutants import run_named

RO = "passes/readonly_loads.py"
M = [  # (name, file, snippet, its mutation, tests)
    ("readonly-never", RO, "            for a in readonly:\n", "            for a in []:\n", "ro"),
    ("readonly-despite-stores", RO, "        and all(_reads_only(op, a) for op in uses[id(a)])]",
     "        and any(_reads_only(op, a) for op in uses[id(a)])]", "ro"),
    ("readonly-any-first-operand", RO, "    return register_load_from_global(op) and op.operands[0] is param \\",
     "    return op.operands[0] is param \\", "ro"),
    ("reread-never", RO, "                    if _rereads(op, uses[id(a)]):", "                    if False:", "ro"),
    ("reread-everywhere", RO, "    if loop is None or not any(global_store(inner) for inner in loop.walk()):",
     "    if False:", "ro-sass"),
    ("nc-not-emitted", "backend/cache_policy.py", '    opcode = ("ld.global" + (".nc" if nc else "")',
     '    opcode = ("ld.global" + ("" if nc else "")', "ro"),
    ("launch-lists-nothing", "backend/launch.py",
     '        "readonly": [str(n) for n in kernel.attrs.get("readonly_params", [])],', '        "readonly": [],', "ro"),
    ("overlap-unchecked", "backend/runtime.py",
     '    _check_readonly_overlap(kernel, launch.get("readonly", []), arrays)\n', "", "runtime"),
    ("overlap-touching", "backend/runtime.py", "            if a.ptr < b.ptr + b.nbytes and b.ptr < a.ptr + a.nbytes:",
     "            if a.ptr <= b.ptr + b.nbytes and b.ptr <= a.ptr + a.nbytes:", "runtime"),
    ("c-overlap-unchecked", "backend/emit_c.py", "        out += self.overlap_checks()\n", "", "c"),
    ("tune-first-round-decides", "tkir/tune.py", "        return min(again, key=lambda c: c.again_ms)",
     "        return min(again, key=lambda c: c.ms)", "tune"),
    ("var-is-mean", "tkir/interp_ops.py", '"var": lambda a, axis: np.var(', '"var": lambda a, axis: np.mean(', "stats"),
    ("var-on-columns", "tkir/ops.py", '    expect(kind not in ROW_ONLY_KINDS or axis == "row", ', "    expect(True, ",
     "stats"),
    ("fuse-never", "passes/fuse_row_stats.py", "        mean.attrs[STATS_ATTR] = var.attrs[STATS_ATTR] = group",
     "        continue", "fuse"),
    ("fuse-any-operand", "passes/fuse_row_stats.py",
     '        mean = next((o for o in ops if _row(o, "mean") and o.operands[0] is var.operands[0]), None)',
     '        mean = next((o for o in ops if _row(o, "mean")), None)', "fuse"),
]
TESTS = {
    "ro": ["tests/test_filecheck.py", "-k", "readonly-loads"],
    "ro-sass": ["tests/test_backend_sass.py", "-k", "readonly"],
    "runtime": ["tests/test_runtime.py", "-k", "readonly"],
    "c": ["tests/test_emit_c.py", "-k", "test_c_launch_makes_the_runtimes_calls and softmax"],
    "tune": ["tests/test_tune.py", "-k", "timed_again"],
    "stats": ["tests/test_row_stats.py"],
    "fuse": ["tests/test_filecheck.py", "-k", "fuse-row-stats"],
}
run_named(M, TESTS, sys.argv[1:])
