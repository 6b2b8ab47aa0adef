"""Session 17's hand mutants (docs/mutation.md, "Session 17"): fence-loads' opt-in, the row examples'
FENCE spaces, the tuner's `same` stage and its re-timing of near-best points, time_pair_ms's rounding
of the reps for small groups only, and the row examples' REREAD path and space. Each is applied, the
tests that touch it are run (TKIR_CACHE=0, stop at the first failure) and the file is put back.
`python3 scripts/mutate_session17.py [NAME ...]` from the repository root; prints killed/SURVIVED."""

from __future__ import annotations

import sys

from hand_mutants import run_named

M = [  # (name, file, snippet, its mutation, tests)
    ("opt-in-ignored", "passes/fence_loads.py", "            if self.opt_in and not kernel.attrs.get(REQUEST_ATTR):",
     "            if False:", "fence-py"),
    ("annotation-records-nothing", "frontend/lower.py", '        return self.ann_switch(a, "F", FENCE_LOADS_ATTR)',
     "        return {}", "fence-py"),
    ("fence-space-for-wide-rows", "examples/layernorm.tk", "FENCE=[0, 1], where=FENCE * D <= 1024,",
     "FENCE=[0, 1], where=FENCE * D <= 16384,", "fence-py"),
    ("same-never", "tkir/tools/tune.py", "            if c.code in first:", "            if False:", "tune"),
    ("same-ignores-launch", "tkir/tools/tune.py", 'code = hashlib.sha256((k.asm["ptx"] + "\\0" + launch).encode())',
     'code = hashlib.sha256((k.asm["ptx"]).encode())', "tune-same"),
    ("refine-never", "tkir/tools/tune.py", "    near = refine_candidates(good) if refine else []",
     "    near = []", "tune"),
    ("refine-decides-not", "tkir/tools/tune.py", "        return min(again, key=lambda c: c.again_ms)",
     "        return min(timed, key=lambda c: c.ms)", "tune"),
    ("refine-everything", "tkir/tools/tune.py", "c.ms <= REFINE_WITHIN * best), key=lambda c: c.ms)[:REFINE_TOP]",
     "True), key=lambda c: c.ms)", "tune"),
    ("reread-space-everywhere", "examples/layernorm.tk", "REREAD=[0, 1], where=REREAD * DC < REREAD * D + 1 - REREAD)",
     "REREAD=[0, 1])", "reread"),
    ("reread-uncentred", "examples/layernorm.tk", "            rstd = rsqrt(row_sum(xc * xc) / D + EPS)",
     "            rstd = rsqrt(row_sum(xf * xf) / D + EPS)", "reread"),
    ("rms-reread-no-square", "examples/rmsnorm.tk", "            rstd = rsqrt(row_sum(f32(x) * f32(x)) / D + EPS)",
     "            rstd = rsqrt(row_sum(f32(x)) / D + EPS)", "reread"),
    ("reps-rounded-always", "tkir/tools/timing.py", "    if rotate and count <= ROTATE_FULL_MAX:", "    if rotate:",
     "bench"),
    ("reps-rounded-never", "tkir/tools/timing.py", "    if rotate and count <= ROTATE_FULL_MAX:", "    if False:",
     "bench"),
]
TESTS = {
    "fence-py": ["tests/test_fence_loads.py"],
    "tune": ["tests/test_tune.py", "-k", "timed_again or same_code"],
    "tune-same": ["tests/test_tune.py", "-k", "same_code or another_launch"],
    "bench": ["tests/test_bench.py"],
    "reread": ["tests/test_wide_rows.py", "-k", "reread"],
}
run_named(M, TESTS, sys.argv[1:])
