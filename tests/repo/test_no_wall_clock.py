"""No test of the CI tier (everything outside tests/gpu/) reads a clock or runs hypothesis under a deadline: a
loaded 2-core CI machine stretches wall time (9 s seen against a 3 s limit), and CPU time moves too (CPU time per
IR op grew 1.71-1.80x on CI's machine where it grew 1.22x here, for the same work). A speed belongs in a
benchmark; a test counts work instead (tests/work_count.py). tests/conftest.py loads a hypothesis profile
without a deadline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import settings

ROOT = Path(__file__).resolve().parents[2]
GPU_TIER = ROOT / "tests" / "gpu"
# reading a clock: time.time(), perf_counter(), monotonic(), process_time() (and their _ns forms),
# datetime.now(), resource.getrusage(...)
WALL_CLOCK = re.compile(r"\b(?:time\.(?:time|perf_counter|monotonic|process_time)(?:_ns)?|datetime\.now|perf_counter"
                        r"|process_time)\(\)|\bgetrusage\(")
# a hypothesis deadline other than None, in settings(...) or a profile
DEADLINE = re.compile(r"(?:settings|register_profile)\([^)]*\bdeadline\s*=\s*(?!None\b)")


def _ci_test_sources() -> list[Path]:
    here = Path(__file__).resolve()  # its pattern examples are not reads
    return sorted(p for p in (ROOT / "tests").rglob("*.py") if GPU_TIER not in p.parents and p.resolve() != here)


@pytest.mark.parametrize("line, pattern, hit", [
    ("    t0 = time.perf_counter()", WALL_CLOCK, True),
    ("    assert time.time() - start < 3", WALL_CLOCK, True),
    ("    t = time.process_time()", WALL_CLOCK, True),
    ("    before = resource.getrusage(resource.RUSAGE_CHILDREN)", WALL_CLOCK, True),
    ('    """time.monotonic and time.sleep: sleeping moves the clock"""', WALL_CLOCK, False),
    ("@settings(max_examples=60, deadline=None)", DEADLINE, False),
    ("@settings(max_examples=60, deadline=500)", DEADLINE, True),
    ('settings.register_profile("ci", deadline=timedelta(seconds=1))', DEADLINE, True),
    ("    budget = sw.Budget(deadline=3.5 * 8.0, clock=lambda: now[0])", DEADLINE, False),
])
def test_the_patterns(line: str, pattern: re.Pattern[str], hit: bool) -> None:
    assert bool(pattern.search(line)) == hit


def test_no_wall_clock_reads_or_hypothesis_deadlines_in_the_ci_tier() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}: {line.strip()}" for p in _ci_test_sources()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if WALL_CLOCK.search(line) or DEADLINE.search(line)]
    assert not found, "clock reads or hypothesis deadlines in CPU tests:\n" + "\n".join(found)


def test_hypothesis_runs_without_a_deadline() -> None:
    assert settings.default.deadline is None
