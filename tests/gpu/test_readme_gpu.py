"""The README's Python snippet runs as written on a GPU, with tkir's own device arrays (no torch)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.gpu
def test_readme_python_snippet_on_gpu(tmp_path: Path) -> None:
    text = (ROOT / "README.md").read_text()
    snippet = text.split("```python\n", 1)[1].split("```", 1)[0]
    script = tmp_path / "snippet.py"
    script.write_text(snippet + "\nref = a.astype(np.float32) @ a.astype(np.float32)\n"
                      "err = np.linalg.norm(c.astype(np.float32) - ref) / np.linalg.norm(ref)\n"
                      "assert err < 1e-2, err\nprint('rel err', err)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.gpu
def test_first_kernel_walkthrough_on_gpu() -> None:
    """docs/first-kernel.md step 6: the numpy + device-array script runs on the GPU and is correct."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "docs/first-kernel/run_bias_relu.py"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    err = float(proc.stdout.rsplit("rel err", 1)[1])
    assert err < 1e-2
