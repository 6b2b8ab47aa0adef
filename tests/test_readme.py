"""The README's set-up commands stay true: .ci/run runs exactly the README's test command."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).parent.parent


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
