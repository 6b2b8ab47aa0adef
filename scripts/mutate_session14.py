"""Session 14's hand mutants (docs/mutation.md, "Session 14"): the edge tests left out of register-tile
copies (tkir/bounds.py and its use in rules_registers), 4- and 8-byte vector accesses (tkir.layout,
the backend, tkir.requires), bf16 -> f32 as a shift, and layernorm's shifted chunk loop. Each is applied,
the tests that touch it are run (TKIR_CACHE=0, stop at the first failure) and the file is put back.
`python3 scripts/mutate_session14.py [NAME ...]` from the repository root; prints killed/SURVIVED."""

from __future__ import annotations

import sys

from hand_mutants import run_named

M = [  # (name, file, snippet, its mutation, tests)
    ("loop-last-is-hi", "tkir/bounds.py", "return lo + (hi - 1 - lo) // step * step", "return hi - 1", "bounds"),
    ("loop-ignores-step", "tkir/bounds.py", "if lo is None or hi is None or step is None or lo < 0 or step <= 0:",
     "if lo is None or hi is None or lo < 0:", "bounds"),
    ("fits-strict", "tkir/bounds.py", "if top is None or extent * (top + 1) > dim:",
     "if top is None or extent * top > dim:", "bounds"),
    ("grid-any-size", "tkir/bounds.py", "if d < len(grid) and _same_size(str(grid[d]), dim):",
     "if d < len(grid):", "bounds"),
    ("one-row-any-extent", "tkir/bounds.py",
     'if extent != 1 or not isinstance(coord.owner, Operation) or coord.owner.name != "tk.block_id":',
     'if not isinstance(coord.owner, Operation) or coord.owner.name != "tk.block_id":', "bounds"),
    ("sub-is-add", "tkir/bounds.py", 'if owner.name in ("arith.add", "arith.mul"):',
     'if owner.name in ("arith.add", "arith.mul", "arith.sub"):', "bounds"),
    ("rows-never-tested", "backend/rules_registers.py",
     "rows_in, cols_in = proven if is_tile else (False, proven[0])",
     "rows_in, cols_in = (True, proven[-1]) if is_tile else (False, proven[0])", "edge"),
    ("extents-swapped", "tkir/bounds.py",
     "extents = (tile.rows, tile.cols) if isinstance(tile, TileType) else (tile.n,)",
     "extents = (tile.cols, tile.rows) if isinstance(tile, TileType) else (tile.n,)", "edge"),
    ("no-8-byte-access", "tkir/layout.py", "VECTOR_ACCESS_BYTES = (4, 8, 16)", "VECTOR_ACCESS_BYTES = (4, 16)",
     "vector"),
    ("aligned-16-always", "tkir/requires.py", "widest[g.name] = max(widest.get(g.name, 0), nbytes)",
     "widest[g.name] = 16", "vector"),
    ("bf16-shift-15", "backend/f32.py", "shl i32 {bits}, 16", "shl i32 {bits}, 15", "shift"),
    ("layernorm-no-shift", "examples/layernorm.tk", "let dx = f32(xc) - f32(k0)", "let dx = f32(xc)", "wide"),
    ("layernorm-skips-first-chunk", "examples/layernorm.tk", "let mi = f32(k0) + s1 * inv_n",
     "let mi = s1 * inv_n", "wide"),
]
TESTS = {
    "bounds": ["tests/test_bounds.py", "tests/test_filecheck.py", "-k", "bounds or largest or grid or unknown "
               "or edge"],
    "edge": ["tests/test_filecheck.py", "-k", "edge"],
    "vector": ["tests/test_runtime.py", "-k", "4_and_8"],
    "shift": ["tests/test_based.py", "-k", "emitted_outer"],
    "wide": ["tests/test_wide_rows.py"],
}
run_named(M, TESTS, sys.argv[1:])
