"""The launch's choice of a kernel or its narrower-piece variant, on the CPU against the stand-in driver.

A tkir.compile kernel's runtime Kernel (CompiledKernel.launcher) launches rows that do not fit its
vector pieces (an odd vocabulary, a base some bytes into a buffer) through its variant with narrower
pieces, compiled on first use and kept, instead of refusing them; aligned rows launch the kernel itself,
on the same fast path as before (no validation again for a seen signature). A Kernel made from PTX and a
description alone has no variants and refuses such rows as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_launch_fast import BASE, MB, Driver, FakeTensor

import tkir
from tkir.backend import runtime
from tkir.backend.runtime import Kernel, LaunchError, UnalignedRowsWarning

ROOT = Path(__file__).resolve().parents[2]
VOCAB = 50257


@pytest.fixture
def softmax() -> tkir.CompiledKernel:
    return tkir.compile(str(ROOT / "examples" / "softmax_vocab.tk"))


@pytest.fixture
def stand_in(make_driver: Any, softmax: tkir.CompiledKernel) -> Driver:
    return make_driver([p.to_json() for p in softmax.launch.params])


@pytest.fixture
def make_driver(monkeypatch: pytest.MonkeyPatch) -> Any:
    from tkir.backend import cuda as tkcuda

    yield lambda params: Driver(monkeypatch, params)
    tkcuda._driver.cache_clear()
    tkcuda._primary_context.cache_clear()


def rows(v: int, base: int = BASE, n: int = 4) -> list[FakeTensor]:
    """X and Y of (n, v) bf16, apart in memory."""
    return [FakeTensor((n, v), base), FakeTensor((n, v), base + 256 * MB)]


def test_choose_takes_the_kernel_for_aligned_rows_and_the_variant_otherwise(softmax: tkir.CompiledKernel) -> None:
    k = softmax.launcher()
    assert k.choose(*rows(VOCAB - 1)) is k  # 100,512-byte rows: 16-byte aligned
    with pytest.warns(UnalignedRowsWarning, match=r"softmax_vocab: rows or base addresses of X, Y do not fit its "
                                                  r"16-byte vector accesses; launching its variant in 2-byte pieces"):
        v = k.choose(*rows(VOCAB))
    assert v is not k and v.launch.aligned == () and v.launch.requires == ()
    assert v is k.choose(*rows(VOCAB)) is softmax.variant(2).launcher()  # made once
    v.validate(*rows(VOCAB))  # the variant takes what the kernel refuses
    with pytest.raises(LaunchError, match=r"rows must start 16-byte aligned \(\(V \* 2\) % 16 is 2"):
        k.validate(*rows(VOCAB))
    assert k.choose(*rows(VOCAB + 1)).launch is softmax.variant(4).launch  # 100,516-byte rows: 4-byte pieces
    assert k.choose(*rows(VOCAB - 1, BASE + 8)) is softmax.variant(8).launcher()  # a base 8 bytes in
    assert k.choose(*rows(VOCAB - 1, BASE + 1)) is k  # not even element-aligned: the kernel, which refuses it


def test_calls_launch_the_variant_for_unaligned_rows(stand_in: Driver, softmax: tkir.CompiledKernel,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    k = softmax.launcher()
    binds: list[str] = []
    real = runtime.bind
    monkeypatch.setattr(runtime, "bind", lambda launch, args, *rest: (binds.append(launch.kernel),
                                                                      real(launch, args, *rest))[1])
    k(*rows(VOCAB - 1))  # aligned: the kernel itself, validated once
    assert set(k._functions) == {0} and not softmax._variants
    seen = len(binds)
    for i in range(3):
        k(*rows(VOCAB - 1, BASE + i * 1024 * MB))  # new pointers, same signature: no validation again
    assert len(binds) == seen and len(stand_in.launches) == 4
    with pytest.warns(UnalignedRowsWarning):
        k(*rows(VOCAB))
    variant = softmax.variant(2).launcher()
    assert set(variant._functions) == {0} and len(stand_in.launches) == 5
    assert stand_in.launches[-1]["params"]["V"] == VOCAB and stand_in.launches[-1]["grid"] == (4, 1, 1)
    seen = len(binds)
    for i in range(3):  # the signature now goes straight to the variant: no validation of either again
        k(*rows(VOCAB, BASE + i * 1024 * MB))
    assert len(binds) == seen and len(stand_in.launches) == 8
    k(*rows(VOCAB - 1, BASE + 2))  # a base 2 bytes in, aligned rows: the 2-byte variant, this call only
    k(*rows(VOCAB - 1))
    assert stand_in.launches[-1]["params"]["X"] == BASE and len(stand_in.launches) == 10
    assert set(softmax._variants) == {2}


def test_what_no_variant_fixes_is_still_refused(stand_in: Driver, softmax: tkir.CompiledKernel) -> None:
    k = softmax.launcher()
    with pytest.raises(LaunchError, match=r"argument 'Y' has dtype f32, expected bf16"):
        k(FakeTensor((4, VOCAB), BASE), FakeTensor((4, VOCAB), BASE + 256 * MB, "torch.float32"))
    with pytest.raises(LaunchError, match=r"argument 'X' address .* is not aligned to its 2-byte elements"):
        k(*rows(VOCAB - 1, BASE + 1))
    assert not stand_in.launches and not softmax._variants  # no variant compiled for them either


def test_a_kernel_without_variants_refuses_unaligned_rows(stand_in: Driver, softmax: tkir.CompiledKernel) -> None:
    bare = Kernel(softmax.asm["ptx"], softmax.launch.to_json())  # PTX and description only, e.g. from disk
    assert bare.choose(*rows(VOCAB)) is bare
    with pytest.raises(LaunchError, match=r"rows must start 16-byte aligned"):
        bare(*rows(VOCAB))
    with pytest.raises(LaunchError, match=r"is copied to or from registers in 16-byte vector accesses, which needs "
                                          r"a 16-byte aligned address"):
        bare(*rows(VOCAB - 1, BASE + 2))
    assert not stand_in.launches
