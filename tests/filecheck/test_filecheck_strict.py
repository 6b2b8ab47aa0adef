"""The FileCheck tests that mean a count fail when the output has one more: each case doubles one
output line of a test's RUN pipeline (the first line containing the given text) and runs its
filecheck on that; the unchanged output must still pass (the control), the doubled one must fail.

This is what `CHECK-COUNT-n` followed by `CHECK-NOT`, or a `CHECK-NEXT` chain, buys over a bare
`CHECK:` (which matches the first of two copies and passes), issue 14 ("an 'exactly once' must fail
on two").
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path

import pytest
from test_filecheck import HERE, TOOLS, expand, run_lines

# (test file under tests/, check prefix, text of the output line to double)
CASES = [
    ("filecheck/backend/core.tkir", "CHECK", "= phi float"),
    ("filecheck/backend/core.tkir", "CHECK", "%x_5_31."),
    ("filecheck/backend/memory.tkir", "CHECK", "st.shared.v4.b32"),
    ("filecheck/backend/memory.tkir", "CHECK", "ld.shared.b16"),
    ("filecheck/backend/memory.tkir", "CHECK", "ld.shared.f32"),
    ("filecheck/backend/memory.tkir", "CHECK", "@p st.shared.f32"),
    ("filecheck/backend/pipe.tkir", "CHECK", "mbarrier.init.shared::cta.b64"),
    ("filecheck/backend/pipe.tkir", "CHECK", "i32 8)"),
    ("filecheck/backend/pipe.tkir", "CHECK", "call void @llvm.nvvm.setmaxnreg.dec"),
    ("filecheck/backend/pipe.tkir", "CHECK", "call void @llvm.nvvm.setmaxnreg.inc"),
    ("filecheck/backend/pipe.tkir", "CHECK", "mbarrier.try_wait.parity"),
    ("filecheck/backend/pipe.tkir", "CHECK", "mbarrier.arrive.expect_tx"),
    ("filecheck/backend/pipe.tkir", "CHECK", "complete_tx::bytes"),
    ("filecheck/backend/pipe.tkir", "CHECK", "cp.async.bulk.wait_group.read 0"),
    ("filecheck/backend/registers.tkir", "CHECK", "wgmma.mma_async"),
    ("filecheck/backend/wgmma.tkir", "CHECK", "wgmma.mma_async"),
    ("filecheck/backend/sm80.tkir", "CPA", "cp.async.cg.shared.global"),
    ("filecheck/backend/sm80.tkir", "LDM", "= call {i32, i32, i32, i32} @llvm.nvvm.ldmatrix"),
    ("filecheck/backend/sm80.tkir", "MMA", "mma.sync.aligned"),
    ("filecheck/backend/streamk.tkir", "CHECK", "st.global.v4.f32"),
    ("filecheck/backend/streamk.tkir", "CHECK", "st.release.gpu"),
    ("filecheck/backend/streamk.tkir", "CHECK", "ld.acquire.gpu"),
    ("filecheck/backend/streamk.tkir", "CHECK", "ld.global.cg.v4.f32"),
    ("filecheck/passes/pipeline.tkir", "CHECK", "pipe.copy %b_s"),
    ("filecheck/passes/pipeline.tkir", "CHECK", "pipe.expect %full"),
    ("filecheck/passes/pipeline.tkir", "CHECK", "tk.store %C"),
    ("filecheck/passes/persistent.tkir", "CHECK", "pipe.copy %a_s"),
    ("filecheck/passes/persistent.tkir", "CHECK", "tk.store %C"),
    ("filecheck/passes/stream-k.tkir", "CHECK", "tk.store_staged"),
    ("filecheck/passes/stream-k.tkir", "CHECK", "pipe.copy %a_s"),
    ("filecheck/passes/stream-k.tkir", "ONCE", "tk.launch_count"),
    ("filecheck/passes/create-tma.tkir", "CHECK", "tma.desc @C_tma"),
    ("filecheck/passes/create-tma.tkir", "CHECK", "tma.load %b"),
    ("filecheck/passes/early-release.tk", "CHECK", "pipe.expect %full_k"),
]


def _pipeline(path: Path, prefix: str) -> tuple[str, str]:
    """(the producer command, the filecheck command) of the RUN line checking `prefix`."""
    for cmd in run_lines(path):
        producer, _, check = cmd.rpartition("| filecheck")
        want = f"--check-prefix={prefix}" if prefix != "CHECK" else None
        if check and ((want and want in check) or (not want and "--check-prefix" not in check)):
            return expand(producer.strip(), path), f"{TOOLS['filecheck']} {path} {check.replace('%s', '').strip()}"
    raise AssertionError(f"{path}: no RUN line checks the prefix {prefix}")


@cache
def _output(producer: str) -> str:
    r = subprocess.run(["bash", "-o", "pipefail", "-c", producer], capture_output=True, text=True, cwd=HERE.parent)
    assert r.returncode == 0, r.stderr
    return r.stdout


def _filecheck(check: str, text: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", check], input=text, capture_output=True, text=True, cwd=HERE.parent)


@pytest.mark.parametrize("name, prefix, line", CASES, ids=[f"{n}:{p}:{t}" for n, p, t in CASES])
def test_a_doubled_line_fails_the_check(name: str, prefix: str, line: str) -> None:
    path = HERE / name
    producer, check = _pipeline(path, prefix)
    out = _output(producer)
    assert _filecheck(check, out).returncode == 0, "the unchanged output must pass"
    lines = out.splitlines(keepends=True)
    at = next((i for i, ln in enumerate(lines) if line in ln), None)
    assert at is not None, f"no output line contains {line!r}"
    doubled = "".join(lines[:at + 1] + [lines[at]] + lines[at + 1:])
    r = _filecheck(check, doubled)
    assert r.returncode != 0, f"{name} ({prefix}) still passes with this line twice:\n{lines[at]}"
