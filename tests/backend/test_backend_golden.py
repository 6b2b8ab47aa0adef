"""The backend golden tests (tests/filecheck/backend/*.tkir) hold the tile IR the passes produce today.

Each golden runs the backend alone on IR text (its RUN lines: `tkc compile %s --passes=verify --emit ...`);
scripts/gen_backend_golden.py wrote that IR from the .tk source and flags its `golden-from` line names.
Here `--check` runs over every golden (a pass change shows as a stale golden, regenerated on purpose), and
the checker itself is shown to catch a stale IR, a header that lowers for another target or runs passes,
and a source that feeds no golden. CPU only: the passes run, the backend does not.
"""

from __future__ import annotations

import importlib.util
import io
import shlex
import sys
from pathlib import Path

import pytest
from test_filecheck import FILES

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gen_backend_golden.py"
_spec = importlib.util.spec_from_file_location("gen_backend_golden", SCRIPT)
gen = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = gen  # dataclasses look their module up there
_spec.loader.exec_module(gen)

GOLDENS = gen.goldens()
SOURCE = "tests/filecheck/backend/src/core.tk"
HEADER = ("// RUN: tkc compile %s --passes={passes} --emit ptx{run_flags} | filecheck %s\n"
          f"// golden-from: tkc compile {SOURCE}{{from_flags}} --emit tkir\n"
          "// CHECK: .entry core\n")


def _header(run_flags: str = "", from_flags: str = "", passes: str = "verify") -> str:
    return HEADER.format(run_flags=run_flags, from_flags=from_flags, passes=passes)


def test_every_backend_golden_is_current() -> None:
    out = io.StringIO()
    rc = gen.check(GOLDENS, out)
    assert rc == 0, out.getvalue()
    assert f"{len(GOLDENS)} of {len(GOLDENS)} backend goldens current" in out.getvalue()


def test_the_goldens_are_filecheck_tests() -> None:
    """tests/filecheck/test_filecheck.py runs every golden (its glob reaches the folder)."""
    assert len(GOLDENS) >= 21
    assert set(GOLDENS) <= {p.resolve() for p in FILES}


def test_every_source_feeds_a_golden() -> None:
    """A kernel under backend/src/ that no golden names would be tested by nothing."""
    named = {gen.parse(p).command[2] for p in GOLDENS}
    sources = {str(p.relative_to(ROOT)) for p in (gen.GOLDEN_DIR / "src").glob("*.tk")}
    assert sources and sources <= named, sorted(sources - named)


def test_a_stale_golden_is_reported(tmp_path: Path) -> None:
    stale = tmp_path / "core.tkir"
    text = (gen.GOLDEN_DIR / "core.tkir").read_text(encoding="utf-8")
    assert "{dim = 1}" in text
    stale.write_text(text.replace("{dim = 1}", "{dim = 0}", 1), encoding="utf-8")
    out = io.StringIO()
    assert gen.check([stale], out) == 1
    assert "stale" in out.getvalue() and "-  %by = tk.block_id {dim = 0}" in out.getvalue()


def test_write_fills_a_new_golden_and_keeps_its_header(tmp_path: Path) -> None:
    new = tmp_path / "new.tkir"
    new.write_text(_header(), encoding="utf-8")
    out = io.StringIO()
    assert gen.check([new], out) == 1 and "no tile IR yet" in out.getvalue()
    assert gen.write([new], io.StringIO()) == 0
    text = new.read_text(encoding="utf-8")
    assert text.startswith(_header() + gen.MARKER + "\n")
    assert text.endswith(gen.produce(shlex.split(f"tkc compile {SOURCE} --emit tkir")))
    assert gen.check([new], io.StringIO()) == 0


@pytest.mark.parametrize("run_flags, from_flags, passes, says", [
    (" --target sm_80", "", "verify", "target sm_80 differs from the IR's (sm_90a)"),
    ("", " --target sm_80", "verify", "target sm_90a differs from the IR's (sm_80)"),
    (" --target=sm_80", " --target sm_80", "verify", None),
    ("", "", "canonicalize", "want --passes=verify"),
])
def test_a_backend_run_line_must_match_the_ir(tmp_path: Path, run_flags: str, from_flags: str, passes: str,
                                              says: str | None) -> None:
    """The IR does not record its target: a RUN line lowering it for another one is refused, as is one that
    runs passes (then the golden would not test the backend alone)."""
    g = tmp_path / "g.tkir"
    g.write_text(_header(run_flags, from_flags, passes), encoding="utf-8")
    errs = gen.problems(gen.parse(g))
    assert (says is None and not errs) or (says is not None and any(says in e for e in errs)), errs


@pytest.mark.parametrize("edit, says", [
    (lambda t: t.replace("// golden-from:", "// from:"), "0 '// golden-from:' lines"),
    (lambda t: t.replace("src/core.tk", "src/nothing.tk"), "not a .tk file of the repository"),
    (lambda t: t.replace(" --emit tkir", ""), "is not `tkc compile SOURCE.tk"),
    (lambda t: t + gen.MARKER + "\n// CHECK: below\n", "a comment below the marker"),
])
def test_a_malformed_header_is_refused(tmp_path: Path, edit, says: str) -> None:
    g = tmp_path / "g.tkir"
    g.write_text(edit(_header()), encoding="utf-8")
    errs = gen.problems(gen.parse(g))
    assert any(says in e for e in errs), errs
    out = io.StringIO()
    assert gen.write([g], out) == 1 and says in out.getvalue()
