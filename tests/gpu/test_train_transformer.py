"""The attention training test (examples/train_transformer.py, docs/torch.md): a 2-layer causal transformer
(d_model 256, 4 heads of 64) trained on a copy task with tkir attention, forward and backward, beside the same
model with SDPA from one seed on the same batches. The tkir curve must learn the task and stay within the bf16
noise of SDPA's bf16 curve (the noise: SDPA in f32 against SDPA in bf16, measured in the same run)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STEPS = 300
NOISE_MULTIPLE = 2.0  # tkir's distance from SDPA bf16 may be this multiple of the noise ...
NOISE_FLOOR = 1e-2    # ... or this fraction of the first loss, where that is larger
LEARNS = 0.25         # the last loss is at most this fraction of the first: the copy was learned

pytestmark = pytest.mark.gpu


def _example():  # noqa: ANN202
    if "train_transformer" not in sys.modules:  # registered before it runs: its dataclasses look it up
        spec = importlib.util.spec_from_file_location("train_transformer", ROOT / "examples/train_transformer.py")
        assert spec is not None and spec.loader is not None
        sys.modules["train_transformer"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["train_transformer"])
    return sys.modules["train_transformer"]


@pytest.mark.timeout(900)
def test_tkir_attention_trains_like_sdpa(torch_module) -> None:  # noqa: ANN001, ARG001
    ex = _example()
    curves = ex.run(STEPS, ex.Config(), seed=0)
    noise = curves.distance("sdpa_f32")
    bound = max(NOISE_MULTIPLE * noise, NOISE_FLOOR)
    ls = curves.losses["tkir"]
    assert all(map(math.isfinite, ls)), ls
    assert ls[-1] <= LEARNS * ls[0], f"tkir did not learn the copy: {ls[0]:.3f} -> {ls[-1]:.3f}"
    assert curves.losses["sdpa"][-1] <= LEARNS * curves.losses["sdpa"][0]  # the task is learnable in STEPS
    got = curves.distance("tkir")
    assert got <= bound, f"tkir's curve is {got:.3e} from SDPA's (noise {noise:.3e}, bound {bound:.3e})"
