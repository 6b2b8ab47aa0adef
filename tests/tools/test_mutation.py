"""scripts/mutate.py, the mutation runner, and scripts/mutants.py, its table: every listed mutation still
applies to the code, its operator mutations are valid Python, and a mutant is run on a copy (against its own
tests where it names them) and reported killed or survived."""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location("mutate", ROOT / "scripts" / "mutate.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mutate"] = mod
    spec.loader.exec_module(mod)
    return mod


mutate = _load()

# the classes of mistake a CPU run used to miss (docs/mutation.md), each with at least one named mutation
ISSUE_CLASSES = {"wgmma descriptor swizzle code", "B-transpose flag", "row-reduction lane count", "shuffle loop",
                 "32B swizzle mask", "TMA box-size boundary", "bank-conflict threshold", "shared-memory reserve"}


def test_named_mutations_apply_to_the_code_and_compile() -> None:
    """Every mutation of the table finds its snippet where it says (once, or its stated occurrence) and the
    mutated file is still valid Python (a .tk example is checked by the tests the mutant names): the list
    cannot rot silently as the code changes."""
    ids = [m.id for m in mutate.NAMED]
    assert len(ids) == len(set(ids))
    for m in mutate.NAMED:
        text = (ROOT / m.path).read_text(encoding="utf-8")
        mutated = m.apply(text)
        assert mutated != text, m.id
        assert len(mutated.splitlines()) == len(text.splitlines()), f"{m.id} changes more than one line"
        if m.path.endswith(".py"):
            compile(mutated, m.path, "exec")
    assert ISSUE_CLASSES <= {m.klass for m in mutate.NAMED}


def test_targeted_mutations_name_test_files_that_exist() -> None:
    """A targeted mutant's tests are pytest arguments whose paths exist (a renamed test file would make its
    mutants 'survive' an empty run: the runner refuses a run that collects nothing, this catches it sooner)."""
    targeted = [m for m in mutate.NAMED if m.tests]
    assert len(targeted) >= 100 and {m.topic for m in targeted} >= {"cluster", "sm80-producers"}
    for m in targeted:
        paths = [a for a in m.tests if a.startswith("tests/")]
        assert paths, m.id
        for a in paths:
            assert (ROOT / a.split("::")[0]).exists(), (m.id, a)


def _selections(runs: list[tuple[str, ...]]) -> dict[tuple[str, ...], int]:
    """How many tests each pytest argument list (paths, then `-k EXPR`) selects, from one collection of all
    the paths: -k matched as pytest matches it, case-insensitively against the test's name and its file's."""
    import subprocess

    from _pytest.mark.expression import Expression

    files = sorted({a.split("::")[0] for r in runs for a in r if a.startswith("tests/")})
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *files],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout
    ids = [ln for ln in out.splitlines() if "::" in ln]
    counts = {}
    for run in runs:
        paths = [a for a in run if a.startswith("tests/")]
        k = run[run.index("-k") + 1] if "-k" in run else None
        n = 0
        for node in ids:
            path, _, name = node.partition("::")
            if not any(path == q or node.startswith(q + "::") for q in paths):
                continue
            names = [Path(path).name.lower(), *(x.lower() for x in name.split("::"))]
            if k is None or Expression.compile(k).evaluate(lambda s, names=names: any(s.lower() in x for x in names)):
                n += 1
        counts[run] = n
    return counts


def test_targeted_selections_select_tests() -> None:
    """Every targeted mutant's CPU run selects at least one test: a `-k` that matches nothing (a test renamed or
    moved to another file) stops the whole --named run with "no tests ran" after the baselines of the others."""
    runs = list(dict.fromkeys(m.tests for m in mutate.NAMED if m.tests))
    empty = [r for r, n in _selections(runs).items() if n == 0]
    assert not empty, f"targeted runs that select no test: {empty}"


def test_a_mutant_with_its_own_tests_runs_those() -> None:
    plan = mutate.Plan(["tests/test_a.py"], [], cpu_prefix=["-n", "2"])
    own = mutate.Mutation("x", "f.py", "a", "b", "", tests=("tests/test_b.py", "-k", "c"))
    assert plan.cpu_args(own) == ["-n", "2", "tests/test_b.py", "-k", "c"]
    assert plan.cpu_args(mutate.Mutation("y", "f.py", "a", "b", "")) == ["tests/test_a.py"]
    plan.own_tests = False  # --tests: every mutant runs those
    assert plan.cpu_args(own) == ["tests/test_a.py"]


def test_a_mutant_with_its_own_gpu_tests_runs_those_on_the_gpu() -> None:
    """--gpu: a mutant that names gpu_tests runs those GPU runs, the others GPU_RUNS; --gpu-tests overrides
    both; without --gpu there is no GPU run."""
    own = mutate.Mutation("x", "f.py", "a", "b", "", gpu_tests=(("tests/gpu/test_a.py", "-k", "b"),))
    plain = mutate.Mutation("y", "f.py", "a", "b", "")
    plan = mutate.Plan(["tests/test_a.py"], [["tests/gpu/test_b.py"]])
    assert plan.gpu_args(own) == [["tests/gpu/test_a.py", "-k", "b"]]
    assert plan.gpu_args(plain) == [["tests/gpu/test_b.py"]]
    plan.own_gpu_tests = False
    assert plan.gpu_args(own) == [["tests/gpu/test_b.py"]]
    assert mutate.Plan(["tests/test_a.py"], []).gpu_args(own) == []


def test_named_gpu_tests_are_gpu_test_files_that_exist() -> None:
    """A mutant's own GPU runs name test files that exist (a GPU run that collects nothing is refused, but only
    on the device)."""
    for m in mutate.NAMED:
        for run in m.gpu_tests:
            paths = [a for a in run if a.startswith("tests/")]
            assert paths, m.id
            for a in paths:
                assert (ROOT / a.split("::")[0]).exists(), (m.id, a)
                assert "pytest.mark.gpu" in (ROOT / a.split("::")[0]).read_text(encoding="utf-8"), (m.id, a)


def test_apply_refuses_a_snippet_that_is_not_unique() -> None:
    m = mutate.Mutation("x", "f.py", "a = 1", "a = 2", "")
    assert m.apply("a = 1\nb = 2\n") == "a = 2\nb = 2\n"
    with pytest.raises(ValueError, match="2 times"):
        m.apply("a = 1\na = 1\n")
    with pytest.raises(ValueError, match="0 times"):
        m.apply("b = 1\n")
    assert mutate.Mutation("x", "f.py", "a = 1", "a = 2", "", occurrence=2).apply("a = 1\na = 1\n") == "a = 1\na = 2\n"


def test_auto_candidates_mutate_code_not_strings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = tmp_path / "m.py"
    src.write_text('"""doc: a + b < 2"""\n\n\ndef f(a, b):\n    # a + b\n    return a + b < 2 and True\n'
                   'x = f(-1, 3)\ny = "1 + 1"\n', encoding="utf-8")
    monkeypatch.setattr(mutate, "ROOT", tmp_path)
    cands = mutate.auto_candidates([src])
    got = {(m.line, m.old, m.new) for m in cands}
    assert got == {(6, "+", "-"), (6, "<", "<="), (6, "2", "3"), (6, "and", "or"), (6, "True", "False"),
                   (7, "1", "2"), (7, "3", "4")}
    for m in cands:
        compile(m.apply(src.read_text()), "m.py", "exec")
    # the same seed samples the same mutants
    a = random.Random(5).sample(cands, 3)
    b = random.Random(5).sample(cands, 3)
    assert [m.id for m in a] == [m.id for m in b]


def test_auto_candidates_of_passes_and_backend_all_compile() -> None:
    cands = mutate.auto_candidates(mutate.expand(["passes", "backend"]))
    assert len(cands) > 1000
    assert all(m.path.startswith(("passes/", "backend/")) for m in cands)


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return mutate.copy_tree(tmp_path_factory.mktemp("mut") / "tree")


def test_copy_has_the_sources_and_the_package_links(tree: Path) -> None:
    assert (tree / "backend" / "wgmma_desc.py").read_text() == (ROOT / "backend" / "wgmma_desc.py").read_text()
    for link in mutate.PACKAGE_LINKS:
        assert (tree / link / "__init__.py").exists(), link
    assert not (tree / ".git").exists()


def test_a_mutant_is_killed_or_survives_and_the_file_is_restored(tree: Path) -> None:
    """One mutation that the chosen test sees (descriptor layout codes vs the ISA table) and one it
    cannot see; the worktree is untouched and the copy is restored after each."""
    before = (ROOT / "backend" / "wgmma_desc.py").read_text()
    tests = ["tests/backend/test_wgmma_desc.py", "-k", "layout_type_codes"]
    seen = mutate.Mutation("codes", "backend/wgmma_desc.py", "128: 1, 64: 2, 32: 3", "128: 1, 64: 3, 32: 2", "")
    unseen = mutate.Mutation("lbo", "backend/wgmma_desc.py", "UNUSED_LBO = 16", "UNUSED_LBO = 32", "")
    r1 = mutate.run_mutant(tree, seen, mutate.Plan(tests, []))
    r2 = mutate.run_mutant(tree, unseen, mutate.Plan(tests, []))
    assert (r1.status, r2.status) == ("killed", "survived"), (r1, r2)
    assert "layout_type_codes" in r1.killed_by
    assert (tree / "backend" / "wgmma_desc.py").read_text() == before
    assert (ROOT / "backend" / "wgmma_desc.py").read_text() == before


def test_a_snippet_that_moved_is_an_error_not_a_survivor(tree: Path) -> None:
    gone = mutate.Mutation("gone", "backend/wgmma_desc.py", "NOT IN THE FILE", "x", "")
    r = mutate.run_mutant(tree, gone, mutate.Plan(["tests/backend/test_wgmma_desc.py"], []))
    assert r.status == "error" and "0 times" in r.summary


def test_gpu_runs_refuse_to_start_without_a_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """--gpu on a machine whose driver reports no device stops before any mutant: GPU tests that only
    skip would let every mutant 'survive' the GPU stage."""
    monkeypatch.setattr(mutate, "gpu_count", lambda tree: 0)
    with pytest.raises(SystemExit, match="needs a CUDA device"):
        mutate.main(["--named", "--only", "desc-code-bit-61", "--gpu"])


def test_gpu_after_skips_the_cpu_run_of_earlier_cpu_survivors(tree: Path, tmp_path: Path) -> None:
    """--gpu-after: the CPU verdict comes from an earlier --json and is not rerun; a mutant the earlier
    run killed is not taken."""
    unseen = mutate.Mutation("lbo", "backend/wgmma_desc.py", "UNUSED_LBO = 16", "UNUSED_LBO = 32", "")
    plan = mutate.Plan(["tests/does_not_exist.py"], [], cpu_verdicts={"lbo": "275 passed"})
    r = mutate.run_mutant(tree, unseen, plan)
    assert (r.status, r.stage, r.seconds) == ("survived", "cpu", 0.0) and "earlier CPU run: 275 passed" in r.summary
    earlier = tmp_path / "cpu.json"
    earlier.write_text('{"results": [{"id": "x", "status": "killed", "stage": "cpu", "summary": ""}]}')
    with pytest.raises(SystemExit):
        mutate.main(["--named", "--gpu", "--gpu-after", str(earlier)])
    with pytest.raises(SystemExit):
        mutate.main(["--named", "--gpu-after", str(earlier)])


def test_the_copy_comes_first_and_the_callers_pythonpath_stays(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/tmp/site")
    assert mutate._pythonpath(Path("/tmp/tree")) == "/tmp/tree:/tmp/site"
    monkeypatch.delenv("PYTHONPATH")
    assert mutate._pythonpath(Path("/tmp/tree")) == "/tmp/tree"
