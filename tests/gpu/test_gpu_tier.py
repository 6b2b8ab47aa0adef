"""The GPU tier cannot pass silently: with TKIR_REQUIRE_GPU=1 a driver that does not initialise fails the
run (instead of skipping every GPU test), and a kernel that never finishes fails its own test by the time
limit while the other tests complete (tests/conftest.py). Each runs a child pytest."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 300

pytestmark = pytest.mark.gpu


def _pytest(*args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=ROOT,
                          env={**os.environ, **env}, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)


def test_a_driver_that_does_not_initialise_fails_the_run_under_require_gpu() -> None:
    # CUDA_VISIBLE_DEVICES="" makes cuInit report no device, as a broken driver set-up does
    failed = _pytest("-m", "gpu", "tests/gpu/test_runtime_gpu.py", CUDA_VISIBLE_DEVICES="", TKIR_REQUIRE_GPU="1")
    assert failed.returncode != 0, failed.stdout[-2000:]
    assert "TKIR_REQUIRE_GPU is set but the GPU tests cannot run" in failed.stdout + failed.stderr
    skipped = _pytest("-m", "gpu", "tests/gpu/test_runtime_gpu.py", CUDA_VISIBLE_DEVICES="", TKIR_REQUIRE_GPU="0")
    assert skipped.returncode == 0 and "skipped" in skipped.stdout, skipped.stdout[-2000:]


def test_a_hung_kernel_fails_its_test_and_the_rest_complete() -> None:
    # two workers: the timeout ends the hung test's worker process (a kernel blocks inside the driver,
    # where only ending the process stops it); xdist reports that test failed and runs the rest
    r = _pytest("-n", "2", "tests/data/gpu_tier_probe.py", TKIR_PROBE_TIMEOUT_S="20")
    out = r.stdout + r.stderr
    assert r.returncode == 1, out[-3000:]
    assert "1 failed" in out and "1 passed" in out, out[-3000:]
    assert "FAILED tests/data/gpu_tier_probe.py::test_a_kernel_that_never_finishes" in out, out[-3000:]
    assert "Timeout" in out or "crashed" in out, out[-3000:]  # pytest-timeout's report, or xdist's
