"""Session 15's hand mutants (docs/mutation.md, "Session 15"): the cache-policy pass and its backend
(L2 hints on loads into registers), contract-fma's move rule, and the row kernels' OCC = 8. Each is
applied, the tests that touch it are run (TKIR_CACHE=0, stop at the first failure) and the file is put
back. `python3 scripts/mutate_session15.py [NAME ...]` from the repository root; prints killed/SURVIVED."""

from __future__ import annotations

import sys

from hand_mutants import run_named

M = [  # (name, file, snippet, its mutation, tests)
    ("marks-shared-loads-too", "passes/analysis.py",
     "return (isinstance(op.operands[0].type, GlobalType) and isinstance(t, TileType | VectorType)",
     "return (isinstance(t, TileType | VectorType)", "pass"),
    ("marks-stores", "passes/analysis.py", "    if op.name != \"tk.load\" or not op.results or not op.operands:",
     "    if op.name not in (\"tk.load\", \"tk.store\") or not op.operands:", "pass"),
    ("none-marks-anyway", "passes/cache_policy.py", "        if self.loads == \"none\":\n            return\n", "",
     "pass"),
    ("backend-ignores-hint", "backend/cache_policy.py", "    return None if p is None else cx.l2_policies[str(p)]",
     "    return None", "backend"),
    ("policy-evict-first", "backend/cache_policy.py", "[f\"createpolicy.fractional.L2::{p}.b64 $0, 1.0;\"]",
     "[\"createpolicy.fractional.L2::evict_first.b64 $0, 1.0;\"]", "backend"),
    ("8-bytes-as-words", "backend/cache_policy.py", "    if nbytes == 8 and elem_bytes == 2:",
     "    if nbytes == 8 and elem_bytes == 3:", "backend"),
    ("sm80-old-ptx", "backend/ptx.py", "    if target == \"sm_80\" and CACHE_HINT in ir:",
     "    if False:", "backend"),
    ("move-always", "passes/contract_fma.py", "        if _move_is_free(mul, top[id(add)], readers, top):",
     "        if True:", "fma"),
    ("move-never", "passes/contract_fma.py", "        if _move_is_free(mul, top[id(add)], readers, top):",
     "        if False:", "fma"),
    ("move-ignores-later-reads", "passes/contract_fma.py",
     "top[id(r)] >= at for r in readers.get(id(v), []) if r is not mul",
     "top[id(r)] > at for r in readers.get(id(v), []) if r is not mul", "fma"),
    ("no-occ-8", "examples/layernorm.tk", "OCC=[0, 4, 8],", "OCC=[0, 4],", "occ"),
]
TESTS = {
    "pass": ["tests/test_filecheck.py", "-k", "cache-policy"],
    "backend": ["tests/test_filecheck.py", "tests/test_backend_sass.py", "tests/test_runtime.py", "-k",
                "cache-policy or cache_policy or 4_and_8 or sm80_with_ptx"],
    "fma": ["tests/test_filecheck.py", "-k", "contract"],
    "occ": ["tests/test_blocks_per_sm.py", "-k", "tune_occ"],
}
run_named(M, TESTS, sys.argv[1:])
