"""The product tree stays a product, not a lab notebook: docs/ and scripts/ hold documentation, current result
tables and general tools, not run records; no file or source comment is named after a work session.

Read from git (`git ls-files`, the blobs' sizes in the index), so it judges what a clone gets, in CI's clean
checkout as here. Raw run records live in git history and are cited by commit
(`git show 5152412:docs/bench/latest/...`), the only place a session's number may appear: as a path component.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

MAX_RECORD_FILES = 120            # tracked files under docs/ and scripts/ (1,163 before the records left)
MAX_FILE_BYTES = 1_000_000        # no tracked file under docs/ or scripts/ is larger (1 MB)
RECORD_DIRS = ("docs", "scripts")
# a path component named after a session or an issue (examples in test_the_name_pattern)
NUMBERED_NAME = re.compile(r"(session|issue)[-_]?\d", re.IGNORECASE)
# a session named by number in prose; not a path component of a commit citation (git show 5152412:PATH);
# examples in test_the_session_pattern
SESSION_TEXT = re.compile(r"(?<![/\w])sessions? ?\d", re.IGNORECASE)
SOURCE_DIRS = ("tkir", "passes", "backend", "frontend", "examples", "scripts", "tests", ".ci")
TEXT_SUFFIXES = (".py", ".tk", ".md", ".toml", ".sh", ".tkir", ".txt", ".cfg", ".yml", ".yaml", "run")

if not (ROOT / ".git").exists():
    pytest.skip("not a git checkout: the tracked files cannot be listed", allow_module_level=True)


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def tracked(*paths: str) -> list[str]:
    return [p for p in _git("ls-files", "-z", "--", *paths).split("\0") if p]


def blob_sizes(*paths: str) -> dict[str, int]:
    """path -> size in bytes of the blob the index holds for it (what a commit would record)."""
    entries = [ln.split("\t", 1) for ln in _git("ls-files", "-s", "-z", "--", *paths).split("\0") if ln]
    if not entries:
        return {}
    hashes = [meta.split()[1] for meta, _ in entries]
    out = subprocess.run(["git", "cat-file", "--batch-check=%(objectsize)"], cwd=ROOT, check=True,
                         capture_output=True, text=True, input="\n".join(hashes) + "\n").stdout.split()
    return {path: int(size) for (_, path), size in zip(entries, out, strict=True)}


def session_mentions(text: str) -> list[str]:
    """Each line of `text` that names a session by number outside a commit citation's path."""
    return [ln.strip()[:120] for ln in text.splitlines() if SESSION_TEXT.search(ln)]


def test_docs_and_scripts_hold_few_files() -> None:
    files = tracked(*RECORD_DIRS)
    assert 0 < len(files) < MAX_RECORD_FILES, (
        f"{len(files)} tracked files under docs/ and scripts/ (at most {MAX_RECORD_FILES - 1}): run records "
        "belong in git history, cited by commit, not in the tree")


def test_no_large_file_under_docs_or_scripts() -> None:
    sizes = blob_sizes(*RECORD_DIRS)
    assert sizes
    big = {p: n for p, n in sizes.items() if n > MAX_FILE_BYTES}
    assert not big, f"tracked files over {MAX_FILE_BYTES} bytes: {big}"


def test_no_session_or_issue_numbered_names_under_docs_or_scripts() -> None:
    named = [p for p in tracked(*RECORD_DIRS) if NUMBERED_NAME.search(p)]
    assert not named, f"name a file for what it does, not for the session or issue that made it: {named}"


def test_no_session_numbers_in_source_or_docs() -> None:
    files = [p for p in tracked(*SOURCE_DIRS) if p.endswith(TEXT_SUFFIXES)]
    files += [p for p in tracked("docs", "README.md", "pyproject.toml") if p.endswith((".md", ".toml"))]
    assert len(files) > 100
    found = {}
    for p in sorted(set(files)):
        hits = session_mentions((ROOT / p).read_text(encoding="utf-8", errors="replace"))
        if hits:
            found[p] = hits[:3]
    assert not found, f"cite the finding (docs/experiments.md's section, a commit), not the session: {found}"


# the examples are split ("se" "ssion") so that a grep of the tree for session numbers does not find them here
@pytest.mark.parametrize(("line", "hit"), [
    ("measured in se" "ssion 25", True), ("Se" "ssion 9's long run", True), ("se" "ssions 21-22", True),
    ("see se" "ssion25 for", True), ("git show 5152412:docs/bench/latest/se" "ssion6/call1/claims.json", False),
    ('@pytest.fixture(scope="session")', False), ("start_new_session=True", False), ("issue 14", False),
])
def test_the_session_pattern(line: str, hit: bool) -> None:
    assert bool(session_mentions(line)) is hit


@pytest.mark.parametrize(("path", "hit"), [
    ("docs/bench/se" "ssion25_call3.sh", True), ("scripts/mutate_se" "ssion12.py", True),
    ("docs/bench/latest/issue10/gemm.json", True), ("scripts/bench/sweep.py", False),
    ("docs/bench/results/sweep/sweep.md", False),
])
def test_the_name_pattern(path: str, hit: bool) -> None:
    assert bool(NUMBERED_NAME.search(path)) is hit


# tests/ is grouped by the floor a test checks (docs/architecture.md); the shared helpers and conftest.py sit
# at its top, the FileCheck files under filecheck/, the conformance matrix under conformance/
TEST_FLOORS = ("ir", "frontend", "passes", "backend", "runtime", "tools", "gpu", "docs", "repo", "filecheck",
               "conformance")


def test_tests_are_grouped_by_floor() -> None:
    files = [p for p in tracked("tests") if Path(p).name.startswith("test_") and p.endswith(".py")]
    assert len(files) > 80
    loose = [p for p in files if len(Path(p).parts) != 3 or Path(p).parts[1] not in TEST_FLOORS]
    assert not loose, f"test modules outside tests/<floor>/ ({', '.join(TEST_FLOORS)}): {loose}"
