"""fold-scale leaves what it cannot rewrite exactly alone, and the interpreter agrees with and without it."""

from __future__ import annotations

import numpy as np

from tkir.frontend import compile_file
from tkir.interp import interpret
from tkir.passes.fold_scale import FoldScale
from tkir.passmanager import Options
from tkir.printer import print_module

KERNEL = """
kernel k<R=64, C=64>(X: gl<f32>[M, C], Y: gl<f32>[M, C]) grid(M / R) {
    reg s: rt<f32, R, C> = X[block.x, 0]
    s *= SCALE
    s = where(col_index(s) < 50, s, FILL)
    let m = row_max(s)
    Y[block.x, 0] = exp2(s - m)
}
"""


def _module(tmp_path, scale: str, fill: str):
    f = tmp_path / "k.tk"
    f.write_text(KERNEL.replace("SCALE", scale).replace("FILL", fill))
    return compile_file(str(f))


def _folded(tmp_path, scale: str, fill: str) -> str:
    m = _module(tmp_path, scale, fill)
    FoldScale().run(m, Options())
    return print_module(m)


def test_negative_scale_is_left_alone(tmp_path) -> None:
    text = _folded(tmp_path, "-0.5", "-inf")
    assert "contract" not in text and "tk.reduce %s.2 {kind = max" in text


def test_a_fill_that_scaling_changes_keeps_the_mask_after_the_multiply(tmp_path) -> None:
    text = _folded(tmp_path, "0.5", "1.0")  # 0.5 * 1.0 != 1.0: the mask cannot move
    assert "tk.select %1, %s.1, " in text and "contract" not in text


def test_interpreter_agrees_with_and_without_the_pass(tmp_path) -> None:
    x = np.random.default_rng(0).standard_normal((128, 64)).astype(np.float32) * 8
    outs = []
    for fold in (False, True):
        m = _module(tmp_path, "0.3", "-inf")
        if fold:
            FoldScale().run(m, Options())
        y = np.full((128, 64), np.nan, np.float32)
        interpret(m, x, y)
        outs.append(y)
    assert "contract = true" in _folded(tmp_path, "0.3", "-inf")
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6, atol=0)


def test_a_long_block_where_nothing_folds_is_walked_once(tmp_path, monkeypatch) -> None:
    """fold-scale is linear in the block's length: the reader index of a block is built once when no
    candidate multiply rewrites anything (it scanned the whole block per candidate: 2,000 chained
    `v * c + x` statements took 5.5 s), and again only after a rewrite."""
    import tkir.passes.fold_scale as fs

    builds = []

    class Counting(fs._Readers):
        def __call__(self, v):  # noqa: ANN001, ANN204
            if self._index is None:
                builds.append(len(self.blk.ops))
            return super().__call__(v)

    monkeypatch.setattr(fs, "_Readers", Counting)
    n = 300
    body = "\n".join(f"    let v{i} = v{i - 1} * 1.5 + xf" for i in range(1, n))
    f = tmp_path / "long.tk"
    f.write_text(f"kernel k(X: gl<f32>[M, 64], Y: gl<f32>[M, 64]) grid(M / 16) {{\n"
                 f"    reg xf: rt<f32, 16, 64> = X[block.x, 0]\n    let v0 = xf\n{body}\n"
                 f"    Y[block.x, 0] = v{n - 1}\n}}\n")
    m = compile_file(str(f))
    FoldScale().run(m, Options())
    assert len(builds) == 1 and builds[0] > 2 * n  # one index of the kernel's block, every op in it
    # a rewrite rebuilds it: the kernel above folds (scale, mask, row max, subtraction)
    builds.clear()
    FoldScale().run(_module(tmp_path, "0.5", "-inf"), Options())
    assert len(builds) >= 2
