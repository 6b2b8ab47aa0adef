"""tkir/tools/check.py and the numpy references the GPU tests compare with, on the CPU.

The GPU tests (tests/gpu/test_gpu_examples.py) judge every example configuration by its companion's numpy
`reference`; here each of those configurations (example, consts, target and options) runs in the
interpreter at a small size against the same reference, so a wrong reference fails on the CPU first.
`check_kernel`'s plumbing (fresh inputs, NaN-poisoned outputs, which arguments are outputs, the
comparison) runs with host arrays standing in for device arrays and the interpreter standing in
for the launch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_gpu_examples import CASES, PATH_CASES, example_path

import tkir
from tkir.tools import check
from tkir.tools.examples import check_interpreted, load_companion

# One small size per example (the companions' CHECK_SIZES are for their default consts; these fit
# every configuration's tiles and keep a ragged edge where the kernel allows one).
SMALL = {
    "gemm": dict(M=200, N=264, K=136),
    "linear": dict(M=200, N=264, K=136),
    "attention_fwd": dict(B=1, H=2, N=150),
    "softmax": dict(N=37),
    "layernorm": dict(N=37),
    "rmsnorm": dict(N=37),
    "rotary": dict(T=77),
    "transpose": dict(M=128, N=136),
}


def _configurations() -> list[Any]:
    seen: dict[str, Any] = {}
    for name, _sizes, consts, *kw in [*CASES, *PATH_CASES]:
        compile_kw = kw[0] if kw else {}
        key = f"{name}-" + "-".join(f"{k}{v}" for k, v in {**consts, **compile_kw}.items())
        seen.setdefault(key.rstrip("-"), pytest.param(name, consts, compile_kw, id=key.rstrip("-")))
    return list(seen.values())


@pytest.mark.parametrize("name, consts, compile_kw", _configurations())
def test_reference_of_every_gpu_configuration_matches_the_interpreter(name: str, consts: dict,
                                                                       compile_kw: dict) -> None:
    path = example_path(name)
    k = tkir.compile(path, **compile_kw, **consts)
    results = check_interpreted(k.module, load_companion(path), SMALL[name], consts, seed=0)
    assert results and all(r.ok for r in results), "; ".join(map(str, results))


class HostArray:
    """Stands in for a DeviceArray: the host copy it was made from, handed back by numpy()."""

    def __init__(self, host: np.ndarray, device: int = 0):
        self.host, self.device = np.array(host), device

    def numpy(self) -> np.ndarray:
        return self.host.copy()


@pytest.fixture
def host_arrays(monkeypatch: pytest.MonkeyPatch) -> list[HostArray]:
    """tkcuda.to_device replaced by HostArray; returns the arrays made, in order."""
    from tkir.backend import cuda as tkcuda

    made: list[HostArray] = []

    def to_device(host: np.ndarray, device: int = 0) -> HostArray:
        made.append(HostArray(host, device))
        return made[-1]

    monkeypatch.setattr(tkcuda, "to_device", to_device)
    return made


def test_check_kernel_compares_every_output(host_arrays: list[HostArray]) -> None:
    comp = load_companion("examples/attention_fwd.tk")
    k = tkir.compile("examples/attention_fwd.tk", D=64, CAUSAL=1)
    sizes = dict(B=1, H=1, N=70)

    def interpret(*args: HostArray) -> None:
        tkir.interpret(k, *(a.host for a in args))

    result = check.check_kernel(interpret, comp, sizes, {"D": 64, "CAUSAL": 1}, device=1,
                                rng=np.random.default_rng(0), name="attention_fwd")
    assert result.ok and [r.output for r in result.results] == ["O", "L"], str(result)
    assert [a.device for a in host_arrays] == [1] * 5
    assert np.isnan(host_arrays[3].host).sum() == 0  # the kernel wrote O ...
    assert str(result).startswith("attention_fwd [B=1 H=1 N=70 D=64 CAUSAL=1] on GPU 1: O: rel_err")


def test_check_kernel_fails_an_output_left_unwritten_or_wrong(host_arrays: list[HostArray]) -> None:
    comp = load_companion("examples/softmax.tk")
    k = tkir.compile("examples/softmax.tk")

    def nothing(*args: HostArray) -> None:  # outputs keep their NaN poison
        pass

    result = check.check_kernel(nothing, comp, dict(N=16), {}, rng=np.random.default_rng(1))
    assert not result.ok and result.rel_err == np.inf

    def off_by_a_bit(*args: HostArray) -> None:
        tkir.interpret(k, *(a.host for a in args))
        args[1].host[3] *= 1.5

    result = check.check_kernel(off_by_a_bit, comp, dict(N=16), {}, rng=np.random.default_rng(1))
    assert not result.ok and np.isfinite(result.rel_err) and result.rel_err > comp.TOLERANCE


def test_each_output_has_its_own_bound_and_an_element_bound() -> None:
    import types

    from tkir.tools.examples import compare, worst

    comp = types.SimpleNamespace(TOLERANCE={"O": 2e-2, "L": 1e-5})
    ref = np.linspace(1.0, 2.0, 4096)
    assert compare(comp, "O", ref * (1 + 1e-2), ref).ok  # a bf16-sized error in a bf16 output
    bad_l = compare(comp, "L", ref * (1 + 1e-3), ref)  # the same kind of error, 1e-3, in an f32 output
    assert not bad_l.ok and bad_l.bound == 1e-5
    one_off = ref.copy()
    one_off[17] += 0.5  # one element off by a quarter of the largest: the norm hides it (3.5e-3)
    r = compare(comp, "O", one_off, ref)
    assert r.rel_err < 2e-2 and r.max_err == pytest.approx(0.25) and not r.ok
    assert not compare(comp, "O", np.full_like(ref, np.nan), ref).ok
    assert worst(comp, {"O": 1e-2, "L": 1e-6}) == (1e-2, 2e-2, True)  # O is nearer its bound (0.5 vs 0.1)
    assert worst(comp, {"O": 1e-3, "L": 9e-4}) == (9e-4, 1e-5, False)
    with pytest.raises(KeyError, match="no bound for output 'Q'"):
        compare(comp, "Q", ref, ref)
    loose = types.SimpleNamespace(TOLERANCE=2e-2, ELEMENT_TOLERANCE={"O": 0.3})
    assert compare(loose, "O", one_off, ref).ok


def test_load_module_loads_once_and_leaves_no_half_run_module(tmp_path: Path) -> None:
    import sys

    from tkir.tools.examples import load_module

    good = tmp_path / "tkir_test_once.py"
    good.write_text("import dataclasses\n@dataclasses.dataclass\nclass A:\n    x: int = 1\nRUNS = [1]\n")
    try:
        m = load_module(good)
        assert m.A().x == 1 and load_module(good) is m and m.RUNS == [1]  # the dataclass found its module
    finally:
        sys.modules.pop("tkir_test_once", None)
    bad = tmp_path / "tkir_test_broken.py"
    bad.write_text("raise ValueError('broken on purpose')\n")
    with pytest.raises(ValueError, match="broken on purpose"):
        load_module(bad)
    assert "tkir_test_broken" not in sys.modules
