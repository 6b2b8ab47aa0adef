"""The conformance cases that work on the CPU (known_gaps.WORKING), run on the GPU: the compiled
kernel's outputs must equal the interpreter's (within the dtype's tolerance)."""

from __future__ import annotations

import numpy as np
import pytest

from conformance.cases import TOLERANCE, Case, all_cases
from conformance.known_gaps import WORKING
from conformance.run import WORKS, mismatch, run_case

pytestmark = [pytest.mark.gpu, pytest.mark.conformance]

_WORKING = set(WORKING)
CASES = [c for c in all_cases() if c.id in _WORKING]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_case_on_gpu_matches_interpreter(case: Case) -> None:
    from tkir import cuda as tkcuda

    out = run_case(case)
    assert out.status == WORKS, f"{case.id}: {out.status}: {out.message}"
    device = {n: tkcuda.to_device(np.ascontiguousarray(a)) for n, a in out.inputs.items()}
    out.kernel(*device.values())
    # DeviceArray.numpy() synchronizes the context before copying back
    bad = [mismatch(n, device[n].numpy(), want, TOLERANCE[case.dtype]) for n, want in out.outputs.items()]
    bad = [b for b in bad if b]
    assert not bad, f"{case.id}: GPU vs interpreter: {bad}"
