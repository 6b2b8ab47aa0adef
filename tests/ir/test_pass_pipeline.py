"""The pipeline text (`a,b{k=v k2=v2},c`) and typed pass parameters (tkir.pass_pipeline, tkir.passmanager)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tkir.diagnostics import CompileError
from tkir.pass_pipeline import PassSpec, parse_pipeline
from tkir.passes.registry import DEFAULT_PIPELINE, legacy_pipeline, load_registry
from tkir.passmanager import Pass, PassManager, param

NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
KEYS = st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True)
VALUES = st.from_regex(r"[A-Za-z0-9_.+-]{1,6}", fullmatch=True)


@given(st.lists(st.tuples(NAMES, st.dictionaries(KEYS, VALUES, max_size=3)), min_size=1, max_size=5),
       st.sampled_from([" ", ","]))
def test_print_then_parse_is_the_identity(entries: list[tuple[str, dict[str, str]]], sep: str) -> None:
    text = ",".join(n + ("{" + sep.join(f"{k}={v}" for k, v in p.items()) + "}" if p else "") for n, p in entries)
    specs = parse_pipeline(text)
    assert [(s.name, s.params) for s in specs] == entries
    assert all(text[s.col - 1:].startswith(s.name) for s in specs)  # columns point at the names
    assert parse_pipeline(",".join(str(s) for s in specs)) == specs


@pytest.mark.parametrize("text, col, message", [
    ("a,{x=1}", 3, "expected a pass name"),
    ("a{x=1", 2, "never closed"),
    ("a{x}", 3, "expected key=value"),
    ("a{x=1 x=2}", 7, "given twice"),
    ("a}", 2, "'}' without '{'"),
    ("a{x=1}b", 7, "expected ','"),
    ("a,,b", 3, "empty pass name"),
    ("a, ,b", 4, "empty pass name"),
    (",a", 1, "empty pass name"),
    ("a{x=1},,b", 8, "empty pass name"),
    ("a,", 2, "expected a pass name after ','"),
    ("a,b , ", 5, "expected a pass name after ','"),
])
def test_syntax_errors_are_located(text: str, col: int, message: str) -> None:
    with pytest.raises(CompileError) as e:
        parse_pipeline(text)
    assert e.value.loc is not None and (e.value.loc.file, e.value.loc.line, e.value.loc.col) == ("<passes>", 1, col)
    assert message in e.value.message


class Scale(Pass):
    name = "scale-test"
    factor: int = param(2, "how much")
    exact: bool = param(False, "whether exactly")
    label: str | None = param(None, "a name")

    def run(self, module, options) -> None:
        pass


def test_parameters_are_typed_fields() -> None:
    p = Scale.from_spec(parse_pipeline("scale-test{factor=0x10 exact=true label=hi}")[0])
    assert (p.factor, p.exact, p.label) == (16, True, "hi")
    assert p.spec() == "scale-test{factor=16 exact=true label=hi}"
    assert Scale().spec() == "scale-test"
    assert [i.name for i in Scale.params()] == ["factor", "exact", "label"]
    with pytest.raises(CompileError, match="is an int, not '1.5'"):
        Scale.from_spec(parse_pipeline("scale-test{factor=1.5}")[0])
    with pytest.raises(CompileError, match="is a bool, not 'yes'"):
        Scale.from_spec(parse_pipeline("scale-test{exact=yes}")[0])


def test_a_parameter_type_outside_the_scalars_is_refused() -> None:
    with pytest.raises(TypeError, match="must be bool, int, float or str"):
        class Bad(Pass):
            name = "bad-test"
            sizes: list = param(None, "")

        Bad.params()


def test_pass_manager_spells_back_its_pipeline() -> None:
    registry = load_registry()
    text = "canonicalize,persistent{group_m=16 balanced_grid=false},stream-k{max_tail=100},canonicalize"
    pm = PassManager(registry, text)
    assert pm.spec() == text and pm.pipeline == ["canonicalize", "persistent", "stream-k", "canonicalize"]
    assert PassManager(registry, ",".join(DEFAULT_PIPELINE)).spec() == ",".join(DEFAULT_PIPELINE)


def test_every_registered_pass_has_well_formed_parameters() -> None:
    for name, cls in load_registry().items():
        for p in cls.params():  # raises for a parameter type the pipeline text cannot spell
            assert p.help, f"{name}.{p.name} has no help line"
        assert PassManager(load_registry(), name).spec() == name  # defaults print as the bare name


def test_legacy_options_map_onto_parameters() -> None:
    with pytest.warns(DeprecationWarning):
        specs = legacy_pipeline(list(DEFAULT_PIPELINE), {"group_m": 4, "stream_k": 1, "epilogue_chunk": 128})
    by_name = {s.name: s for s in specs}
    assert by_name["persistent"].params == {"group_m": "4", "balanced_grid": "false"}
    assert by_name["create-tma"].params == {"epilogue_chunk": "128"}
    assert [s.name for s in specs].index("stream-k") == [s.name for s in specs].index("persistent") + 1
    with pytest.warns(DeprecationWarning):  # an explicit pipeline is not extended, as before
        explicit = legacy_pipeline("pipeline,persistent", {"stream_k": 1}, explicit=True)
    assert explicit == [PassSpec("pipeline"), PassSpec("persistent", {"balanced_grid": "false"}, 10)]
    with pytest.raises(CompileError, match="unknown pass option 'nope'"):
        legacy_pipeline("persistent", {"nope": 1})
