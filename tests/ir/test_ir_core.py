"""The IR core: text round trip, parse errors with locations, the verifier, size expressions."""

from __future__ import annotations

import pytest

from tkir.diagnostics import CompileError
from tkir.ir import Block, Module, Operation, clone_op
from tkir.parser import parse_module
from tkir.printer import print_module, print_op
from tkir.symexpr import SymExprError, evaluate, names
from tkir.verifier import verify

GEMM = """\
tma.desc @A_tma {tensor = "A", param = 0, dtype = "bf16", rank = 2, dims = ["K", "M"], strides = ["K * 2"], box = [64, 128], elem_strides = [1, 1], swizzle = 128, l2_promotion = 128, oob_fill = "zero", note = {fill = -inf, ok = true, f = 1.5e-05}}
tk.kernel @gemm {consts = {BM = 128, BN = 256}, grid = ["M / 128", "cdiv(N, 256)"], warpgroups = {consumers = 2}} {
  ^(%A: gl<bf16>[M, K], %B: gl<bf16>[K, N], %C: gl<bf16>[M, N])
  %a = tk.alloc : st<bf16, 128, 64, swizzle=128, align=1024>
  %b = tk.alloc : st<bf16, 64, 256>
  %acc = tk.fill {value = 0.0} : rt<f32, 128, 256, layout={kind = wgmma_acc, wg = 2}>
  %K = tk.size {name = "K"} : i32
  %c64 = arith.const {value = 64} : i32
  %kt = arith.div %K, %c64 : i32
  %c0 = arith.const {value = 0} : i32
  %c1 = arith.const {value = 1} : i32
  %bx = tk.block_id {dim = 0} : i32
  %by = tk.block_id {dim = 1} : i32
  %acc.1 = scf.for %c0, %kt, %c1, %acc {stages = 4} : rt<f32, 128, 256, layout={kind = wgmma_acc, wg = 2}> {
    ^(%k: i32, %acc.2: rt<f32, 128, 256, layout={kind = wgmma_acc, wg = 2}>)
    tk.load %a, %A, %bx, %k
    tk.load %b, %B, %k, %by
    %acc.3 = tk.mma %a, %b, %acc.2 : rt<f32, 128, 256, layout={kind = wgmma_acc, wg = 2}>
    scf.yield %acc.3
  }
  %out = tk.cast %acc.1 : rt<bf16, 128, 256>
  tk.store %C, %out, %bx, %by
}
"""


def _verify_with_desc(text: str):
    m = parse_module(text)
    verify(m)
    return m


def test_round_trip_is_byte_identical() -> None:
    m = _verify_with_desc(GEMM)
    assert print_module(m) == GEMM
    assert print_module(parse_module(print_module(m))) == GEMM


def test_printer_uniquifies_names_and_clone_keeps_them() -> None:
    m = parse_module(GEMM)
    k = m.kernel
    for op in k.walk():
        for r in op.results:
            r.name = "x"  # every value has the same source name
    text = print_op(k)
    assert "%x.1 = tk.alloc" in text and "%x.2 = tk.fill" in text
    assert print_op(parse_module(text).kernel) == text
    assert print_op(clone_op(k, {})) == print_op(k)


@pytest.mark.parametrize(
    "text, where, words",
    [
        ("tk.kernel @k {grid = [\"1\"]} {\n  %x = tk.add %y, %y : f32\n}\n", "2:15", "undefined value '%y'"),
        ("tk.kernel @k {grid = [\"1\"]} {\n  %x = tk.fill {value = 1.0} : rt<f32, 16, 16\n}\n", "3:1",
         "unexpected"),
        ("tk.kernel @k {grid = [\"1\"]} {\n  %x = arith.const {value = 1} : i32\n"
         "  %x = arith.const {value = 2} : i32\n}\n", "3:3", "redefinition"),
        ("tk.kernel @k {grid = [\"1\"]} {\n  %x = arith.const {value = 1, value = 2} : i32\n}\n", "2:32",
         "duplicate attribute"),
    ],
)
def test_parse_errors_are_located(text: str, where: str, words: str) -> None:
    with pytest.raises(CompileError) as e:
        parse_module(text, "t.tkir")
    msg = e.value.format()
    assert msg.startswith(f"t.tkir:{where}: error:"), msg
    assert words in msg


@pytest.mark.parametrize(
    "body, words",
    [
        ("%x = tk.fill {value = 1.0} : rt<f32, 16, 16>\n  %y = tk.fill {value = 1.0} : rt<bf16, 16, 32>\n"
         "  %z = tk.mma %x, %y, %x : rt<f32, 16, 16>", "operand dtypes differ"),
        ("%x = tk.fill {value = 1.0} : rt<f32, 16, 16>\n  %y = tk.fill {value = 1.0} : rt<f32, 32, 16>\n"
         "  %z = tk.add %x, %y : rt<f32, 16, 16>", "shape mismatch"),
        ("%x = tk.frobnicate : i32", "unknown op 'tk.frobnicate'"),
        ("%v = tk.fill {value = 1.0} : rv<f32, 16>\n  %x = tk.fill {value = 1.0} : rt<f32, 16, 32>\n"
         "  %y = tk.sub %x, %v {bcast = col} : rt<f32, 16, 32>", "col broadcast needs a vector of 32"),
    ],
)
def test_verifier_rejects_bad_types(body: str, words: str) -> None:
    m = parse_module(f"tk.kernel @k {{grid = [\"1\"]}} {{\n  {body}\n}}\n", "v.tkir")
    with pytest.raises(CompileError) as e:
        verify(m)
    assert words in e.value.format()
    assert e.value.format().startswith("v.tkir:")


def test_size_expressions() -> None:
    assert evaluate("cdiv(M, 128) * 2 + N % 7", {"M": 300, "N": 10}) == 9
    assert evaluate("M / 128", {"M": 300}) == 2
    assert names("cdiv(M, BM) * K") == {"M", "BM", "K"}
    for bad in ("__import__('os')", "M.x", "M ** 2", "open(M)"):
        with pytest.raises(SymExprError):
            evaluate(bad, {"M": 1})
    with pytest.raises(SymExprError, match="unknown"):
        evaluate("Q + 1", {})


def _const(name: str) -> Operation:
    return Operation("arith.const", [], [], {"value": 0}, result_names=[], symbol=name)


def test_block_insert_sets_parent_and_order() -> None:
    blk = Block()
    a, b, c, d = (_const(n) for n in "abcd")
    blk.append(a)
    assert blk.insert(0, b) is b           # before a
    blk.insert(len(blk.ops), c)            # at the end
    blk.insert_after(b, d)                 # between b and a
    assert [o.symbol for o in blk.ops] == ["b", "d", "a", "c"]
    assert all(o.parent is blk for o in blk.ops)
    e = _const("e")
    blk.insert_after(c, e)                 # after the last op: appended
    assert blk.ops[-1] is e and e.parent is blk


def test_block_insert_refuses_a_foreign_anchor_and_an_attached_op() -> None:
    blk, other = Block(), Block()
    a, x = _const("a"), _const("x")
    other.append(a)
    with pytest.raises(ValueError, match="not in this block"):
        blk.insert_after(a, x)
    with pytest.raises(ValueError, match="not in this block"):
        blk.insert_before(a, x)
    assert x.parent is None and blk.ops == []
    with pytest.raises(ValueError, match="already in a block"):
        blk.insert(0, a)               # a still belongs to `other`: remove it first
    other.remove(a)
    blk.insert(0, a)
    assert a.parent is blk and other.ops == []


def test_module_insert_before() -> None:
    k = Operation("tk.kernel", symbol="k")
    m = Module([k])
    desc = _const("d")
    assert m.insert_before(k, desc) is desc
    assert m.ops == [desc, k]
    with pytest.raises(ValueError, match="not in this module"):
        m.insert_before(_const("y"), _const("z"))
