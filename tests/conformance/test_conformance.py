"""Every conformance case either works (PTX, ptxas, interpreter == numpy) or is refused with a
located error by the front end or a pass -- never a backend failure (tests/conformance/run.py).

Cases that are backend failures today are listed in known_gaps.py (regenerate it with
`python scripts/gen_coverage.py --write-known-gaps`) and marked xfail(strict=True): a gap that
gets fixed fails here until it is taken off the list. Cases listed as WORKING must keep working.
"""

from __future__ import annotations

import pytest

from conformance.cases import Case, all_cases
from conformance.known_gaps import KNOWN_BACKEND_GAPS, WORKING
from conformance.run import BACKEND_FAILURE, REFUSED, WORKS, run_case

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
        assert out.status == REFUSED, f"{case.id}: expected a refusal ({case.construct.refused_dtypes[case.dtype]})"
    if case.id in _WORKING:
        assert out.status == WORKS, f"{case.id} worked before and is now {out.status}: {out.message}"
