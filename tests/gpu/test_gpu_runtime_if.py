"""Run-time ifs nested on an mma accumulator (tests/frontend/test_ctrl_flow.py IF_GEMM, docs/language.md's
`if ... else if` example) on the GPU, both targets, against numpy (marked gpu; no torch: tkir's own device
arrays). The CPU test checks the interpreter on the same compiled IR."""

from __future__ import annotations

import numpy as np
import pytest
from test_ctrl_flow import IF_CHAINS, IF_GEMM, if_gemm_inputs, if_gemm_reference  # tests/frontend on sys.path

import tkir
from tkir.backend import cuda as tkcuda


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("chain", list(IF_CHAINS))
def test_nested_runtime_ifs_on_an_accumulator_match_numpy_on_gpu(tmp_path, chain: str, target: str) -> None:
    f = tmp_path / "g.tk"
    f.write_text(IF_GEMM.replace("$IF", IF_CHAINS[chain]))
    k = tkir.compile(str(f), target=target)
    a, b = if_gemm_inputs(np.random.default_rng(5))
    dev = [tkcuda.to_device(x) for x in (a, b, np.full((128, 128), np.nan, np.float32),
                                         np.full(128, np.nan, np.float32))]
    k(*dev)
    want_c, want_v = if_gemm_reference(chain, a.astype(np.float64), b.astype(np.float64))
    for got, want in ((dev[2].numpy(), want_c), (dev[3].numpy(), want_v)):
        assert not np.isnan(got).any(), f"{chain} {target}: an output not fully written"
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-4, atol=1e-3)
