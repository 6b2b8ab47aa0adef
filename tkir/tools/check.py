"""An example on the GPU against its companion's numpy reference, without torch.

    result = check_example("examples/gemm.tk", {"M": 1000, "N": 744, "K": 520}, {}, compile_kw={"target": "sm_80"})
    assert result.ok, result

The inputs are the companion's `make_inputs` (fresh random numpy arrays, outputs poisoned with NaN),
copied to `device` as tkir DeviceArrays (tkir.backend.cuda); the kernel runs once; each output comes
back and is compared with the companion's float64 `reference` by ||out - ref|| / ||ref|| and by
max|out - ref| / max|ref| (tkir.tools.examples.compare; an output still holding NaN fails). It needs the
CUDA driver and a GPU, not torch: the GPU tests (tests/gpu/test_gpu_examples.py) use it. `tkc bench` and `tkc run` keep
torch (tkir/tools/bench.py) for the peers and the timing. The backend is imported only when a check runs,
so importing this module loads none of it (tests/repo/test_import_layers.py).
"""

from __future__ import annotations

import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tkir.tools.examples import CheckResult, compare, load_companion


@dataclass
class GpuCheck:
    """The outcome of one example run on the GPU: one CheckResult per output."""

    kernel: str
    sizes: dict
    consts: dict
    device: int
    results: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.ok for r in self.results)

    @property
    def rel_err(self) -> float:
        """The worst output's relative error (inf when an output holds NaN)."""
        errs = [r.rel_err if np.isfinite(r.rel_err) else np.inf for r in self.results]
        return max(errs, default=np.inf)

    def __str__(self) -> str:
        size = " ".join(f"{k}={v}" for k, v in {**self.sizes, **self.consts}.items())
        return f"{self.kernel} [{size}] on GPU {self.device}: " + "; ".join(str(r) for r in self.results)


def check_example(path: str, sizes: dict, consts: dict, *, compile_kw: dict | None = None, device: int = 0,
                  seed: int | None = None, companion: types.ModuleType | None = None) -> GpuCheck:
    """Compile `path` with `consts` (and `compile_kw`: keyword arguments of tkir.compile) and check it
    on `device` at `sizes` against its companion (examples/NAME.py beside it, or `companion`)."""
    from tkir import api

    companion = companion or load_companion(path)
    kernel = api.compile(path, **(compile_kw or {}), **consts)
    return check_kernel(kernel, companion, sizes, consts, device=device, rng=np.random.default_rng(seed),
                        name=Path(path).stem)


def check_kernel(kernel: Any, companion: types.ModuleType, sizes: dict, consts: dict, *, device: int = 0,
                 rng: np.random.Generator | None = None, name: str = "") -> GpuCheck:
    """Run a compiled kernel (tkir.compile's result, or anything called with the companion's PARAMS in
    order) once on fresh inputs on `device` and compare its outputs with the reference."""
    from tkir.backend import cuda as tkcuda

    rng = rng if rng is not None else np.random.default_rng()
    host = companion.make_inputs(rng, sizes, consts)
    args = [tkcuda.to_device(a, device=device) for a in host]
    kernel(*args)
    expected = companion.reference(host, sizes, consts)  # on the host while the GPU runs
    result = GpuCheck(name or getattr(kernel, "name", "kernel"), dict(sizes), dict(consts), device)
    for output in companion.OUTPUTS:
        got = args[companion.PARAMS.index(output)].numpy()  # waits for the kernel
        result.results.append(compare(companion, output, got, expected[output]))
    return result
