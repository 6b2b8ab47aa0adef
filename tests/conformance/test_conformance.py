"""Every conformance case either works (PTX, ptxas, interpreter == numpy) or is refused with a
located error by the front end or a pass -- never a backend failure (tests/conformance/run.py).

Cases that are backend failures today are listed in known_gaps.py (regenerate it with
`python scripts/gen_coverage.py --write-known-gaps`) and marked xfail(strict=True): a gap that
gets fixed fails here until it is taken off the list. Cases listed as WORKING must keep working.
The swizzle family's cases must also take the TMA path they were written for (cases_swizzle.EXPECTED_TMA):
the interpreter cannot see a layout, so a case that quietly lost its swizzle or boxes fails here.
"""

from __future__ import annotations

import tempfile

import pytest

from conformance.cases import CONSTRUCTS, Case, all_cases
from conformance.cases_swizzle import EXPECTED_TMA, HALF_DTYPES
from conformance.known_gaps import KNOWN_BACKEND_GAPS, WORKING
from conformance.run import BACKEND_FAILURE, REFUSED, WORKS, compile_case, run_case

pytestmark = pytest.mark.conformance

CASES = all_cases()
_GAPS = set(KNOWN_BACKEND_GAPS)
_WORKING = set(WORKING)


def _param(case: Case) -> object:
    marks = [pytest.mark.xfail(strict=True, reason="known backend gap (known_gaps.py)")] if case.id in _GAPS else []
    return pytest.param(case, id=case.id, marks=marks)


def test_known_lists_name_real_cases() -> None:
    ids = {c.id for c in CASES}
    assert not (_GAPS - ids), f"known_gaps.py names cases the table no longer has: {sorted(_GAPS - ids)[:5]}"
    assert not (_WORKING - ids), f"WORKING names cases the table no longer has: {sorted(_WORKING - ids)[:5]}"


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_case_is_not_a_backend_failure(case: Case) -> None:
    out = run_case(case)
    assert out.status != BACKEND_FAILURE, f"{case.id}: {out.message}\n{out.detail}"
    if case.expect_refused:
        assert out.status == REFUSED, f"{case.id}: expected a refusal ({case.refusal_reason})"
    if case.id in _WORKING:
        assert out.status == WORKS, f"{case.id} worked before and is now {out.status}: {out.message}"


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("name", sorted(EXPECTED_TMA))
def test_swizzle_case_takes_its_tma_path(name: str, dtype: str) -> None:
    """On sm_90a (top context, bf16 and f16): each tensor's descriptor has the pinned swizzle and the box,
    and each copy through it the number of boxes, that the case is about; None: the copy stays off TMA."""
    construct = next(c for c in CONSTRUCTS if c.name == name and dtype in c.dtypes)
    with tempfile.TemporaryDirectory(prefix="tkir-conf-") as tmp:
        k, _ = compile_case(Case(construct, "top", dtype, "sm_90a"), tmp)
    descs = {op.attrs["tensor"]: op for op in k.module.ops if op.name == "tma.desc"}
    boxes = {str(op.attrs["desc"].name): op.attrs.get("boxes") for op in k.module.kernel.walk() if "desc" in op.attrs}
    for tensor, want in EXPECTED_TMA[name].items():
        if want is None:
            assert tensor not in descs, f"{name}: {tensor} was not expected to get a tensor map"
            continue
        swizzle, box, per_copy = want
        assert tensor in descs, f"{name}: no tensor map for {tensor}"
        got = descs[tensor].attrs
        assert (got["swizzle"], got["box"]) == (swizzle, box), f"{name}: {tensor}: {got}"
        assert boxes[descs[tensor].symbol] == per_copy, f"{name}: {tensor}: {boxes}"
