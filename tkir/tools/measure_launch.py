"""The program `tkc report --measure` runs under Nsight Compute: one launch of a compiled kernel.

    python3 -m tkir.tools.measure_launch DIR

DIR (written by tkir/tools/measure.py) holds the kernel exactly as `tkc report` compiled it: `kernel.ptx`,
`launch.json` (the backend's launch description) and `request.json` = {"sizes": {...}, "consts": {...},
"companion": PATH or null, "seed": N}. The inputs are the companion's `torch_inputs(sizes, consts)` where it
has one (drawn on the GPU, as `tkc bench` draws them), else its `make_inputs(rng, sizes, consts)`
(examples/NAME.py beside the kernel, as `tkc run` draws them), or, without a companion, a random normal
value per element of every tensor the launch description lists (integer tensors zero: an index stays in
range) and 1 for each scalar. The kernel is launched once and waited for; then DIR/info.json gets the
device's name and multiprocessor count, the kernel's name and the grid. Nothing is printed on stdout:
ncu's CSV goes there. A failure prints one line on stderr and exits with status 1 (ncu's output, which
the parent quotes, then ends with it).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from tkir import symexpr

DEVICE_NAME_BYTES = 256  # cuDeviceGetName's buffer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python3 -m tkir.tools.measure_launch DIR", file=sys.stderr)
        return 2
    try:
        info = launch_once(Path(args[0]))
    except Exception as e:  # noqa: BLE001 -- the parent quotes this line from ncu's output
        print(f"tkir.tools.measure_launch: error: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    (Path(args[0]) / "info.json").write_text(json.dumps(info, indent=1) + "\n")
    return 0


def launch_once(folder: Path) -> dict:
    """Launch the kernel in `folder` once on fresh inputs and wait for it; what info.json records."""
    from tkir.backend import cuda as tkcuda
    from tkir.backend.runtime import Kernel

    request = json.loads((folder / "request.json").read_text())
    launch = json.loads((folder / "launch.json").read_text())
    kernel = Kernel((folder / "kernel.ptx").read_text(), launch)
    sizes, consts = request["sizes"], request["consts"]
    rng = np.random.default_rng(request.get("seed"))
    if request.get("companion"):
        from tkir.tools.examples import load_companion

        companion = load_companion(str(Path(request["companion"]).with_suffix(".tk")))
        scalars: list[object] = []
        if hasattr(companion, "torch_inputs"):  # drawn on the GPU, as tkc bench does (make_inputs may run a
            args = list(companion.torch_inputs(sizes, consts))  # float64 reference too large at these sizes)
        else:
            args = [tkcuda.to_device(np.ascontiguousarray(a)) for a in companion.make_inputs(rng, sizes, consts)]
    else:
        host, scalars = generic_inputs(kernel.launch, sizes, rng)
        args = [tkcuda.to_device(np.ascontiguousarray(a)) for a in host]
    args += scalars
    bound = kernel.validate(*args)
    kernel(*args)
    tkcuda.synchronize()
    return {"device": device_name(), "sms": tkcuda.device_attribute("MULTIPROCESSOR_COUNT"),
            "kernel": kernel.name, "grid": list(bound.grid), "block": list(bound.block), "sizes": bound.sizes}


def generic_inputs(launch: object, sizes: dict[str, int], rng: np.random.Generator) -> tuple[list, list]:
    """Random normal tensors of the launch's shapes (integer and boolean ones zero), and 1 per scalar."""
    from tkir.backend import cuda as tkcuda

    arrays = []
    for t in launch.tensors:  # type: ignore[attr-defined]
        shape = tuple(symexpr.evaluate(d, sizes) for d in t.dims)
        dtype = tkcuda.numpy_dtype(t.dtype)
        if t.dtype.startswith(("i", "u")):
            arrays.append(np.zeros(shape, dtype))
        else:
            arrays.append(rng.standard_normal(shape).astype(dtype))
    scalars = [1.0 if s.dtype == "f32" else 1 for s in launch.scalars]  # type: ignore[attr-defined]
    return arrays, scalars


def device_name(device: int = 0) -> str:
    """The GPU's name as the driver gives it ("NVIDIA H100 80GB HBM3"); "unknown" if it will not say."""
    from cuda.bindings import driver as cu

    from tkir.backend import cuda as tkcuda

    try:
        dev = tkcuda.check(cu.cuDeviceGet(device), "cuDeviceGet")
        raw = tkcuda.check(cu.cuDeviceGetName(DEVICE_NAME_BYTES, dev), "cuDeviceGetName")
    except Exception:  # noqa: BLE001 -- a name is a label, never a reason to fail the measurement
        return "unknown"
    text = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
    return text.split("\0", 1)[0].strip() or "unknown"


if __name__ == "__main__":
    sys.exit(main())
