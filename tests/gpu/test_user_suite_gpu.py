"""The user-kernel suite (examples/user/*.tk, issue 44) on the GPU: each kernel at its defaults (no -D, no
tuning) at each of its companion's CHECK_SIZES, fresh random inputs, outputs poisoned, against the float64
reference (tkir.tools.check). Its speed against the torch peer is `tkc bench examples/user/NAME.tk`."""

from __future__ import annotations

from pathlib import Path

import pytest

from tkir.tools.check import check_example
from tkir.tools.examples import load_companion

USER = Path(__file__).resolve().parents[2] / "examples" / "user"

pytestmark = pytest.mark.gpu


def _cases() -> list:
    out = []
    for tk in sorted(USER.glob("*.tk")):
        comp = load_companion(str(tk))
        for i, (sizes, consts) in enumerate(zip(comp.CHECK_SIZES, comp.CHECK_CONSTS, strict=True)):
            out.append(pytest.param(str(tk), sizes, consts, id=f"{tk.stem}-{i}"))
    return out


@pytest.mark.parametrize("path, sizes, consts", _cases())
def test_user_kernel_on_the_gpu(path: str, sizes: dict, consts: dict) -> None:
    r = check_example(path, sizes, consts)
    assert r.ok, str(r)
