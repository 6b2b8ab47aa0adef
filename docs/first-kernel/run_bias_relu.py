"""Compile bias_relu.tk and run it from Python on numpy data: on the GPU (tkir's own device arrays,
no torch needed) or, with --interpret, in tkir's numpy interpreter (no GPU needed)."""

import sys
from pathlib import Path

import ml_dtypes
import numpy as np

import tkir

k = tkir.compile(str(Path(__file__).with_name("bias_relu.tk")), D=256)   # -D D=256, as a keyword
rng = np.random.default_rng(0)
x = rng.standard_normal((1000, 256), np.float32).astype(ml_dtypes.bfloat16)
bias = rng.standard_normal(256, np.float32)
y = np.zeros((1000, 256), ml_dtypes.bfloat16)

if "--interpret" in sys.argv:
    tkir.interpret(k, x, bias, y)                 # writes y in place
else:
    from tkir.backend import cuda

    y_dev = cuda.to_device(y)
    k(cuda.to_device(x), cuda.to_device(bias), y_dev)   # checks dtypes, shapes, alignment, then launches
    y = y_dev.numpy()

ref = np.maximum(x.astype(np.float32) + bias, 0.0)
err = np.linalg.norm(y.astype(np.float32) - ref) / np.linalg.norm(ref)
print(f"grid {k.launch.grid}, block {k.launch.block}, rel err {err:.1e}")
