"""The numpy reference interpreter: it defines what a tile-IR kernel means.

    interpret(module, A, B, C)                   # runs every block of the grid, writes C in place

The kernel's `gl` parameters are bound, in order, to numpy arrays; symbolic dims (`gl<bf16>[M, K]`)
take their sizes from the arrays' shapes. The body runs once per block of the `grid`, blocks in
row-major order (the main loop: run.py). One table, `HANDLERS` (frame.py), maps each op name to a
small function that computes it on whole tiles with numpy: the core ops' in ops.py, the later levels'
in tma.py, pipeline.py and streamk.py (this package imports them all); passes that add ops register
theirs with `register_handler`. Scalar arithmetic means what tkir/scalar.py says.

How values are held:
* float tiles and vectors (register or shared) are float32 arrays whose values are representable in
  the IR dtype: every op computes in f32 and its result is rounded to its result type (bf16, f16,
  fp8 via ml_dtypes, round to nearest even) by `interpret` itself, so handlers never round;
* shared tiles (`st`/`sv`) are mutable buffers: `tk.alloc` makes one, `tk.load`/`tk.store` write
  into it; register values are never modified in place;
* scalars are Python ints (i32/u32: integer division floors, tkir/scalar.py) or floats.

Type attributes the passes add (swizzle, layout, stages, ...) do not change meaning and are ignored.
"""

from tkir.interp import ops, pipeline, streamk, tma  # noqa: F401  (each fills HANDLERS with its level's handlers)
from tkir.interp.frame import HANDLERS, Frame, InterpError, register_handler, round_to_type
from tkir.interp.run import interpret
from tkir.target import NUM_SMS
from tkir.types import NUMPY_DTYPES

__all__ = ["HANDLERS", "NUMPY_DTYPES", "NUM_SMS", "Frame", "InterpError", "interpret", "register_handler",
           "round_to_type"]
