"""multicast on the GPU (marked gpu): gemm.tk and gemm_fp8.tk with `+multicast` (two-CTA clusters sharing B by TMA
multicast) against their companions' torch references at ragged sizes, odd tile-row counts (a cluster's second CTA
past the end) and persistent grids of several rounds; a second launch gives the same bits (no race between the
cluster's CTAs). The interpreter cannot see the cluster (each CTA loads its whole tile there), so this is the
test of the pairing and of the cross-CTA barriers."""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir
from tkir.tools.examples import load_companion

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BOUND = 2e-2  # the companions' bound for C
CASES = [  # (kernel, sizes, consts)
    ("gemm", dict(M=1000, N=1000, K=1000), {}),
    ("gemm", dict(M=900, N=1000, K=1000), {}),
    ("gemm", dict(M=65, N=296, K=136), {"BM": 64, "BN": 128, "STAGES": 3, "SK": 0, "SKI": 16}),
    ("gemm", dict(M=200, N=296, K=136), {"BM": 128, "BN": 128, "STAGES": 2, "SK": 0, "SKI": 16}),
    ("gemm", dict(M=4096, N=4096, K=4096), {}),
    ("gemm", dict(M=1920, N=2048, K=1024), {}),
    ("gemm_fp8", dict(M=4096, N=4096, K=4096), {}),
    ("gemm_fp8", dict(M=1000, N=1024, K=512), {}),
]

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("name", "sizes", "consts"), CASES,
                         ids=[f"{n}-{s['M']}x{s['N']}x{s['K']}" for n, s, _ in CASES])
def test_multicast_matches_torch(name: str, sizes: dict, consts: dict) -> None:
    import torch

    comp = load_companion(str(EXAMPLES / f"{name}.tk"))
    k = tkir.compile(str(EXAMPLES / f"{name}.tk"), pass_edits="+multicast", **consts)
    if hasattr(k, "for_sizes"):
        k = k.for_sizes(sizes)
    assert k.module.kernel.attrs.get("tma_multicast") == {"ctas": 2}, k.module.kernel.attrs.get("multicast_skipped")
    args = comp.torch_inputs(sizes, consts)
    k(*args)
    torch.cuda.synchronize()
    ref = comp.torch_reference(args, sizes, consts)
    (out_name, want), = ref.items()
    got = args[comp.PARAMS.index(out_name)]
    assert not bool(torch.isnan(got.float()).any()), "an element was never written"
    err = float((got.double() - want.double()).norm() / want.double().norm())
    assert err < BOUND, err
    first = got.clone()
    k(*args)
    torch.cuda.synchronize()
    assert torch.equal(first, got)


@pytest.mark.parametrize("sizes", [dict(M=1000, N=1000, K=1000), dict(M=768, N=768, K=768)], ids=["1000", "768"])
def test_a_plain_call_takes_multicast_where_the_rule_says(sizes: dict) -> None:
    """gemm.tk called as a user calls it (auto consts, the default pipeline, the per-size choice): 1000^3 runs
    multicast{auto=true}'s two-CTA clusters, 768^3 (the same bucket, 72 blocks) the same consts without them;
    both correct."""
    import torch

    comp = load_companion(str(EXAMPLES / "gemm.tk"))
    k = tkir.compile(str(EXAMPLES / "gemm.tk"))
    args = comp.torch_inputs(sizes, {})
    k(*args)
    torch.cuda.synchronize()
    chosen = k.for_sizes(sizes).module.kernel.attrs
    assert ("tma_multicast" in chosen) == (sizes["M"] == 1000)
    (out_name, want), = comp.torch_reference(args, sizes, {}).items()
    got = args[comp.PARAMS.index(out_name)]
    assert float((got.double() - want.double()).norm() / want.double().norm()) < BOUND


USER_CASES = [  # user-suite kernels on clusters at one full wave with a short K (SwiGLU only when forced)
    ("gemm_at", dict(T=500, K=1000, N=1000), ""),
    ("gemm_bias_gelu", dict(M=1000, N=1000, K=512), ""),
    ("swiglu", dict(T=1000, DM=512, F=504), "+multicast"),
]


@pytest.mark.parametrize(("name", "sizes", "edits"), USER_CASES, ids=[n for n, _, _ in USER_CASES])
def test_user_kernels_on_clusters_match_torch(name: str, sizes: dict, edits: str) -> None:
    """examples/user/ kernels called plainly at sizes where multicast{auto=true} clusters them (SwiGLU's small
    halves only with `+multicast`): against the companion's torch reference, and the same bits on a second launch."""
    import torch

    path = str(EXAMPLES / "user" / f"{name}.tk")
    comp = load_companion(path)
    k = tkir.compile(path, pass_edits=edits or None)
    assert k.for_sizes(sizes).module.kernel.attrs.get("tma_multicast") == {"ctas": 2}
    args = comp.torch_inputs(sizes, {})
    outs = []
    for _ in range(2):
        k(*args)
        torch.cuda.synchronize()
        ref = comp.torch_reference(args, sizes, {})
        for out_name, want in ref.items():
            got = args[comp.PARAMS.index(out_name)]
            assert not bool(torch.isnan(got.float()).any()), f"{out_name}: an element was never written"
            err = float((got.double() - want.double()).norm() / want.double().norm())
            assert err < BOUND, (out_name, err)
            outs.append(got.clone())
    assert all(torch.equal(a, b) for a, b in zip(outs[: len(outs) // 2], outs[len(outs) // 2:], strict=True))
