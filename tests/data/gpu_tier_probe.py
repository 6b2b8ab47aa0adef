"""Run only by tests/gpu/test_gpu_tier.py, in a child pytest (the name does not match test_*.py, so a
normal run never collects it): a GPU test whose kernel never finishes, beside one that passes. The child
must report the first failed by its time limit and the second passed."""

from __future__ import annotations

import copy
import os
from collections.abc import Callable

import numpy as np
import pytest
from test_runtime_gpu import VADD_LAUNCH as LAUNCH  # the spin kernel keeps vadd's signature
from test_sync_timeout_gpu import SPIN_IR  # spins while a[0] == 0

from tkir.backend import cuda as tkcuda
from tkir.backend.runtime import Kernel

HANG_TIMEOUT_S = float(os.environ.get("TKIR_PROBE_TIMEOUT_S", "20"))
pytestmark = pytest.mark.gpu


@pytest.mark.timeout(HANG_TIMEOUT_S, method="thread")
def test_a_kernel_that_never_finishes(ptx_of: Callable[[str, str], str]) -> None:
    kernel = Kernel(ptx_of(SPIN_IR, "sm_90a"), copy.deepcopy(LAUNCH))
    zeros = tkcuda.to_device(np.zeros(128, np.float32))
    kernel(zeros, zeros, tkcuda.empty((128,), "f32"))
    zeros.numpy()  # waits for the kernel: forever


def test_the_other_test_runs(vadd_ptx: Callable[[str], str]) -> None:
    kernel = Kernel(vadd_ptx("sm_90a"), copy.deepcopy(LAUNCH))
    a = np.arange(256, dtype=np.float32)
    da, dc = tkcuda.to_device(a), tkcuda.empty((256,), "f32")
    kernel(da, da, dc)
    np.testing.assert_array_equal(dc.numpy(), 2 * a)
