"""The runner the session mutation scripts share (scripts/mutate_session12.py ... mutate_session15.py): apply
one hand mutant (a snippet that occurs exactly once, replaced), run the pytest arguments that should kill
it (TKIR_CACHE=0, stop at the first failure), put the file back, and print killed/SURVIVED."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile


def try_mutant(name: str, path: str, old: str, new: str, pytest_args: list[str]) -> bool | None:
    """True when the tests kill the mutant, False when it survives, None when the snippet is not unique."""
    src = open(path).read()
    if src.count(old) != 1:
        print(f"{name}: snippet occurs {src.count(old)} times")
        return None
    bak = os.path.join(tempfile.mkdtemp(), "bak")
    shutil.copy(path, bak)
    open(path, "w").write(src.replace(old, new))
    try:
        env = dict(os.environ, TKIR_CACHE="0")
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *pytest_args],
                           capture_output=True, text=True, env=env, timeout=900)
        killed = r.returncode != 0
        first = next((l for l in r.stdout.splitlines() if l.startswith(("FAILED", "ERROR"))), "")
        print(f"{name}: {'killed' if killed else 'SURVIVED'} {first[:150]}", flush=True)
        return killed
    finally:
        shutil.copy(bak, path)


def run_named(mutants: list[tuple[str, str, str, str, str]], tests: dict[str, list[str]], argv: list[str]) -> None:
    """Each (name, file, snippet, mutation, test group) of `mutants` named in `argv` (all of them when
    `argv` is empty), tried against the pytest arguments `tests[group]`."""
    sel = argv or [m[0] for m in mutants]
    for name, path, old, new, which in mutants:
        if name in sel:
            try_mutant(name, path, old, new, tests[which])
