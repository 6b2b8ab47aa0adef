"""The README's set-up commands stay true: .ci/run runs exactly the README's test command."""

from __future__ import annotations

from pathlib import Path

from limits import HANG_S  # tests/ is on sys.path under pytest

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    lines = (ROOT / "README.md").read_text().splitlines()
    return [ln for ln in lines if ln.startswith("python3 -m pip install")]


def test_readme_has_exactly_two_setup_commands() -> None:
    cmds = _readme_commands()
    assert len(cmds) == 2, cmds
    assert "tkc compile examples/gemm.tk" in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_the_readme_test_command() -> None:
    ci = [ln for ln in (ROOT / ".ci/run").read_text().splitlines() if ln and not ln.startswith(("#", "set ", "cd "))]
    assert ci == [_readme_commands()[1]]


def _python_snippet() -> str:
    text = (ROOT / "README.md").read_text()
    return text.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_python_snippet_runs_without_a_gpu(tmp_path: Path) -> None:
    """The README's Python snippet, less the lines marked `# GPU`, runs as written (the interpreter
    part checks its own result here; the GPU lines run in tests/gpu/test_readme_gpu.py)."""
    import os
    import subprocess
    import sys

    lines = [ln for ln in _python_snippet().splitlines() if "# GPU" not in ln]
    lines.append("ref = x.astype(np.float32) @ y.astype(np.float32)")
    lines.append("err = np.linalg.norm(z.astype(np.float32) - ref) / np.linalg.norm(ref)")
    lines.append("assert err < 1e-2, err")
    script = tmp_path / "snippet.py"
    script.write_text("\n".join(lines) + "\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=HANG_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "gemm" in proc.stdout and "tk.alloc" in proc.stdout
