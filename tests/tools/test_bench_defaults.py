"""scripts/bench/defaults.py without a GPU: its rows cover every user-suite kernel at each of its bench points and the
examples' points issue 44 names, each with the issue's bar; the table's verdicts; the dry run and a bad --only."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path

from tkir.tools.examples import load_companion

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "bench" / "defaults.py"


def _load() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("bench_defaults", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_defaults"] = mod
    spec.loader.exec_module(mod)
    return mod


bd = _load()


def test_rows_cover_every_user_kernel_and_the_example_bars() -> None:
    rows = bd.rows()
    for tk in sorted((ROOT / "examples" / "user").glob("*.tk")):
        mine = [r for r in rows if r["name"] == f"user/{tk.stem}"]
        comp = load_companion(str(tk))
        assert [(r["sizes"], r["consts"]) for r in mine] == list(zip(comp.BENCH_SIZES, comp.BENCH_CONSTS, strict=True))
        assert {r["bar"] for r in mine} == {0.95 if tk.stem in bd.BARS_SAME_MATH else 0.90}
    assert set(bd.BARS_SAME_MATH) <= {tk.stem for tk in (ROOT / "examples" / "user").glob("*.tk")}
    gemm = [(r["sizes"]["M"], r["bar"]) for r in rows if r["name"] == "gemm"]
    assert gemm == [(1, 0.85), (16, 0.85), (1000, 0.85)]
    att = [r for r in rows if r["name"] == "attention_fwd"]
    assert {r["sizes"]["N"] for r in att} == {2048, 4096} and {r["bar"] for r in att} == {0.95}
    assert all(r["consts"].keys() <= {"CAUSAL"} for r in att)  # the example's defaults: no tile consts


def test_verdicts() -> None:
    base = dict(name="user/x", sizes={"N": 1}, consts={}, bar=0.9, ok=True, ms=1.0, peer_ms=0.95, ratio=0.95,
                spill_bytes=0, peer="p", rel_err=0.0)
    rows = [dict(base, passed=True), dict(base, ratio=0.8, peer_ms=0.8, passed=False),
            dict(base, spill_bytes=64, passed=False), dict(base, ok=False, passed=False),
            dict(name="gemm", sizes={}, consts={}, bar=0.85, error="RuntimeError: boom", passed=False)]
    table = bd.format_table(rows)
    assert [line.split()[-1] for line in table.splitlines()[1:5]] == ["pass", "bar", "spills", "WRONG"]
    assert "ERROR RuntimeError: boom" in table and table.splitlines()[-1] == "1 of 5 rows pass"


def test_dry_run_and_a_bad_only(capsys: object) -> None:
    assert bd.main(["--dry-run", "--only", "gemm"]) == 0
    out = capsys.readouterr().out
    assert out.count("gemm M=") == 3 and "attention_fwd" not in out
    assert bd.main(["--dry-run", "--only", "nope"]) == 2
