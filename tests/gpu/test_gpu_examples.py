"""Examples compiled by tkir and run on the GPU against their references (marked gpu; no torch).

Fresh random inputs every run (the companion's numpy `make_inputs`), outputs poisoned with NaN, copied
to the GPU as tkir DeviceArrays (tkir.tools.check), and ||out - ref|| / ||ref|| against the companion's
float64 numpy `reference` under the example's bound, at three sizes each, including sizes that are
not multiples of the block tile (TMA out-of-bounds fill on loads, masked stores). The references are
checked against the interpreter on the CPU for every configuration here (tests/tools/test_check.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from tkir.tools.check import check_example, check_kernel
from tkir.tools.examples import load_companion

# the row kernels with every schedule knob (@warps, @hoist_loads, DC, REREAD...): the pass-test copies
ROW_KERNELS = ("layernorm", "rmsnorm", "softmax")


def example_path(name: str) -> str:
    """examples/NAME.tk, or tests/data/rows/NAME.tk for the row kernels (their copies with every knob)."""
    return f"tests/data/rows/{name}.tk" if name in ROW_KERNELS else f"examples/{name}.tk"

CASES = [
    ("gemm", dict(M=256, N=512, K=128), {}),
    ("gemm", dict(M=1000, N=744, K=520), {}),      # ragged in M, N and K
    ("gemm", dict(M=2048, N=2048, K=2048), {}),
    ("softmax", dict(N=4096), {}),
    ("softmax", dict(N=1000), {}),                 # a partial last block of rows
    ("softmax", dict(N=777), {"D": 512}),
    ("layernorm", dict(N=4096), {}),
    ("layernorm", dict(N=1001), {}),
    ("layernorm", dict(N=300), {"D": 512}),
    ("rotary", dict(T=8192), {}),
    ("rotary", dict(T=999), {}),
    ("rotary", dict(T=4000), {"D": 64}),
    ("attention_fwd", dict(B=2, H=4, N=512), {}),
    ("attention_fwd", dict(B=1, H=2, N=1024), {"CAUSAL": 1}),
    ("attention_fwd", dict(B=2, H=2, N=256), {"D": 64, "CAUSAL": 1}),
    ("attention_fwd", dict(B=2, H=4, N=512), {"BQ": 128, "BKV": 64, "STAGES": 3}),   # the sm_90a bench tile before auto
    ("attention_fwd", dict(B=1, H=2, N=1024), {"BQ": 128, "BKV": 64, "STAGES": 3, "CAUSAL": 1}),
    ("attention_fwd", dict(B=1, H=2, N=1024), {"BQ": 64, "BKV": 64}),
    # any sequence length (issue 12): TMA zero fill, the key-length mask, clipped O and L stores
    *[("attention_fwd", dict(B=2, H=2, N=n), {"D": d, "CAUSAL": causal, "BQ": "auto", "BKV": "auto"})
      for n in (1, 100, 1000, 4097) for d in (64, 128, 256) for causal in (0, 1)],
    # the same lengths with persistent blocks (@persistent(PERSIST)): launch order, and causal's rotated order
    *[("attention_fwd", dict(B=2, H=3, N=n), {"D": d, "CAUSAL": causal, "BQ": "auto", "BKV": "auto", "PERSIST": 1})
      for n in (1, 100, 1000, 4097) for d in (64, 128, 256) for causal in (0, 1)],
    ("linear", dict(M=256, N=512, K=256), {"ACT": 0}),
    ("linear", dict(M=1000, N=744, K=520), {"ACT": 1}),   # ragged; tanh-GELU
    ("linear", dict(M=512, N=512, K=512), {"ACT": 2}),    # SiLU
    ("transpose", dict(M=1024, N=512), {}),
    ("transpose", dict(M=1024, N=744), {}),               # ragged in N (the rows of Y)
    ("transpose", dict(M=512, N=256), {"SHARED_T": 0}),   # the register transpose
    ("rmsnorm", dict(N=4096), {}),
    ("rmsnorm", dict(N=1001), {}),
    ("rmsnorm", dict(N=300), {"D": 4096}),                # the two-pass (chunked) path
    # rows split over warps (row layout `parts`): short tiles of wide rows, ragged N
    ("rmsnorm", dict(N=1001), {"D": 8192, "DC": 8192, "ROWS": 2, "WG": 2}),
    ("rmsnorm", dict(N=777), {"D": 8192, "DC": 8192, "ROWS": 1, "WG": 2}),   # the bench config
    ("rmsnorm", dict(N=301), {"D": 4096, "DC": 4096, "ROWS": 1, "WG": 1}),
    ("softmax", dict(N=999), {"D": 8192, "DC": 8192, "ROWS": 1, "WG": 1}),
    ("layernorm", dict(N=333), {"D": 4096, "DC": 4096, "ROWS": 2, "WG": 1}),
    # wide rows in chunks (D > DC, two passes): online max and sum; shifted per-position sums (layernorm)
    ("softmax", dict(N=999), {"D": 16384, "DC": 8192, "ROWS": 1, "WG": 1}),
    ("softmax", dict(N=300), {"D": 4096}),
    ("layernorm", dict(N=333), {"D": 16384, "DC": 4096, "ROWS": 2, "WG": 1}),
    ("layernorm", dict(N=300), {"D": 3072}),
    # one row over the warps that would repeat it (infer-layouts' split_idle_warps: 2- and
    # 4-byte chunks at D = 768, 8-byte at 1 x 2048 over 16 warps), W and Bias hoisted (@hoist_loads(1))
    *[(k, dict(N=n), {"D": d, "DC": max(d, 1024), "ROWS": 1, "WG": wg, "HOIST": h})
      for k in ("layernorm", "rmsnorm") for n, d, wg, h in ((1, 768, 2, 1), (129, 768, 1, 1), (130, 768, 2, 0),
                                                            (77, 2048, 4, 1), (3, 16384, 4, 1))],
    ("softmax", dict(N=129), {"D": 768, "DC": 1024, "ROWS": 1, "WG": 2}),
    ("softmax", dict(N=5), {"D": 768, "DC": 1024, "ROWS": 1, "WG": 1}),
    # 8-byte vector accesses (2048-wide chunks over 16 warps, 512 over 4) in the chunk loops,
    # layernorm's shifted per-position sums (an odd chunk count: 1536 = 3 x 512); 4-byte at 768 over 4 warps
    ("layernorm", dict(N=333), {"D": 16384, "DC": 2048, "ROWS": 1, "WG": 4, "OCC": 4}),
    ("layernorm", dict(N=77), {"D": 8192, "DC": 4096, "ROWS": 1, "WG": 4}),
    ("layernorm", dict(N=5), {"D": 1536, "DC": 512, "ROWS": 1, "WG": 1}),
    ("rmsnorm", dict(N=129), {"D": 8192, "DC": 2048, "ROWS": 1, "WG": 4, "OCC": 4}),
    ("softmax", dict(N=33), {"D": 16384, "DC": 2048, "ROWS": 1, "WG": 4}),
    # three blocks per SM (@blocks_per_sm(3)), the statistics from the whole row and the output
    # re-reading X in two chunks: what the tuner picks for layernorm at D = 16384 (ragged N: 333 blocks)
    ("layernorm", dict(N=333), {"D": 16384, "DC": 8192, "ROWS": 1, "WG": 2, "OCC": 3, "REREAD": 1}),
    ("layernorm", dict(N=7), {"D": 16384, "DC": 8192, "ROWS": 1, "WG": 2, "OCC": 3, "REREAD": 1}),
    # blocks of 1, 2 or 3 warps (@warps(NW)), rows split over the warps or a warp per row
    # (ROWS = 2 over 2 warps), ragged N; the 1-warp blocks exchange nothing through shared memory
    *[(k, dict(N=n), {"D": d, "DC": max(d, 1024), "ROWS": r, "NW": nw, **({"HOIST": h} if k != "softmax" else {})})
      for k in ("layernorm", "rmsnorm", "softmax")
      for n, d, r, nw, h in ((1, 768, 1, 1, 1), (129, 768, 2, 2, 0), (33, 768, 1, 3, 0), (5, 2048, 1, 2, 1))],
]


@pytest.mark.gpu
@pytest.mark.parametrize("name, sizes, consts", CASES,
                         ids=[f"{n}-" + "-".join(f"{k}{v}" for k, v in {**s, **c}.items()) for n, s, c in CASES])
def test_example_matches_reference_on_gpu(name: str, sizes: dict, consts: dict) -> None:
    result = check_example(example_path(name), sizes, consts)
    assert result.ok, str(result)


# The row examples themselves (two consts, D and ROWS=auto): compiled for the call's size bucket, as a user's call
# is, so the compiler's per-size choices (rows, warps, hoisted and fenced loads) run; ragged N, both targets.
ROW_EXAMPLE_CASES = [(name, n, d) for name in ROW_KERNELS for n, d in ((1, 768), (37, 4096), (4096, 768), (1001, 16384))]


@pytest.mark.gpu
@pytest.mark.parametrize("target", ["sm_90a", "sm_80"])
@pytest.mark.parametrize("name, n, d", ROW_EXAMPLE_CASES, ids=[f"{c[0]}-{c[1]}x{c[2]}" for c in ROW_EXAMPLE_CASES])
def test_row_example_at_its_defaults_on_gpu(name: str, n: int, d: int, target: str) -> None:
    result = check_example(f"examples/{name}.tk", {"N": n}, {"D": d}, compile_kw={"sizes": {"N": n}, "target": target})
    assert result.ok, str(result)


@pytest.mark.gpu
def test_one_consumer_warpgroup_stores_its_whole_128_row_tile_on_gpu(tmp_path: Path) -> None:
    """Issue 14: the staged epilogue's TMA box had 64 rows, so one warpgroup owning all 128 rows of
    the tile stored rows 0..63 only (the interpreter, which ignores boxes, could not see it)."""
    src = Path("examples/gemm.tk").read_text().replace("kernel gemm", "@warpgroups(consumers=1)\nkernel gemm", 1)
    (tmp_path / "gemm.tk").write_text(src)
    shutil.copy("examples/gemm.py", tmp_path / "gemm.py")
    # BM = 128 pinned (gemm.tk's auto consts at the header's old values): the tile the bug needs
    consts = {**load_companion("examples/gemm.tk").DEFAULT_CONSTS, "BN": 128}
    result = check_example(str(tmp_path / "gemm.tk"), dict(M=1000, N=512, K=256), consts)
    assert result.ok, str(result)


# The sm_80 path (cp.async, ldmatrix, mma.sync; PTX for sm_80 runs on the H200 through the driver's
# JIT) and the no-TMA path on sm_90a (cp.async + wgmma): ragged sizes exercise cp.async's zero fill.
SM80 = {"target": "sm_80"}
NO_TMA = {"no_tma": True}
SWIZZLE_NONE = {"swizzle": "none"}  # wgmma operands in the interleaved layout, TMA boxes 16 B wide
PATH_CASES = [
    ("gemm", dict(M=256, N=512, K=128), {}, SM80),
    ("gemm", dict(M=1000, N=744, K=520), {}, SM80),    # ragged in M, N and K
    ("gemm", dict(M=2048, N=2048, K=2048), {}, SM80),
    ("attention_fwd", dict(B=2, H=4, N=512), {}, SM80),
    ("attention_fwd", dict(B=2, H=2, N=256), {"D": 64, "CAUSAL": 1}, SM80),
    ("attention_fwd", dict(B=1, H=2, N=1024), {"CAUSAL": 1}, SM80),
    ("softmax", dict(N=1000), {}, SM80),
    ("softmax", dict(N=4096), {}, SM80),
    ("softmax", dict(N=777), {"D": 512}, SM80),
    ("layernorm", dict(N=1001), {}, SM80),
    ("layernorm", dict(N=333), {"D": 16384, "DC": 2048, "ROWS": 1, "WG": 4}, SM80),   # 8-byte accesses
    ("layernorm", dict(N=4096), {}, SM80),
    ("layernorm", dict(N=300), {"D": 512}, SM80),
    ("rotary", dict(T=999), {}, SM80),
    ("rotary", dict(T=8192), {}, SM80),
    ("rotary", dict(T=4000), {"D": 64}, SM80),
    ("gemm", dict(M=256, N=512, K=128), {}, NO_TMA),
    ("gemm", dict(M=1000, N=744, K=520), {}, NO_TMA),
    ("gemm", dict(M=2048, N=2048, K=2048), {}, NO_TMA),
    ("attention_fwd", dict(B=2, H=4, N=512), {}, NO_TMA),
    ("attention_fwd", dict(B=1, H=2, N=1024), {"CAUSAL": 1}, NO_TMA),
    ("gemm", dict(M=256, N=512, K=128), {}, SWIZZLE_NONE),
    ("gemm", dict(M=1000, N=744, K=520), {}, SWIZZLE_NONE),
    ("gemm", dict(M=2048, N=2048, K=2048), {}, SWIZZLE_NONE),
    ("gemm", dict(M=1000, N=744, K=520), {}, {**SWIZZLE_NONE, **NO_TMA}),
    ("attention_fwd", dict(B=2, H=4, N=512), {}, SWIZZLE_NONE),
    ("attention_fwd", dict(B=2, H=2, N=256), {"D": 64, "CAUSAL": 1}, SWIZZLE_NONE),
    ("attention_fwd", dict(B=1, H=2, N=1024), {"BQ": 128, "STAGES": 3, "CAUSAL": 1}, SWIZZLE_NONE),
    ("layernorm", dict(N=129), {"D": 768, "DC": 1024, "ROWS": 2, "NW": 2}, SM80),   # @warps(2) on sm_80
    ("rmsnorm", dict(N=33), {"D": 768, "DC": 1024, "ROWS": 1, "NW": 3}, SM80),
]
PATH_NAMES = {str(SM80): "sm80", str(NO_TMA): "notma", str(SWIZZLE_NONE): "swizzle_none",
              str({**SWIZZLE_NONE, **NO_TMA}): "swizzle_none-notma"}


@pytest.mark.gpu
@pytest.mark.parametrize("name, sizes, consts, compile_kw", PATH_CASES,
                         ids=[f"{n}-{PATH_NAMES[str(kw)]}-" + "-".join(f"{k}{v}" for k, v in {**s, **c}.items())
                              for n, s, c, kw in PATH_CASES])
def test_sm80_no_tma_and_unswizzled_paths_match_reference_on_gpu(name: str, sizes: dict, consts: dict, compile_kw: dict) -> None:
    result = check_example(example_path(name), sizes, consts, compile_kw=compile_kw)
    assert result.ok, f"{result} ({compile_kw})"


# stream-K (passes/stream_k.py): shapes whose last partial wave is split along K over all 132 SMs,
# launched several times on fresh inputs, so the flags' launch-count epochs are exercised too.
STREAM_K_CASES = [
    (dict(M=8192, N=8192, K=2048), ""),                               # default heuristic: 68 tiles split
    (dict(M=4096, N=4096, K=4096), "max_tail=100"),                   # 116 tiles split, 56 iterations/SM
    (dict(M=3900, N=1280, K=4000), "max_tail=100 min_iters=4"),       # ragged M and K
    (dict(M=2944, N=1792, K=1024), "max_tail=100 min_iters=1"),       # 29 tiles over 132 SMs: up to 5 partials
]


@pytest.mark.gpu
@pytest.mark.parametrize("sizes, params", STREAM_K_CASES,
                         ids=["-".join(f"{k}{v}" for k, v in s.items()) for s, _ in STREAM_K_CASES])
def test_stream_k_gemm_repeated_launches_on_gpu(sizes: dict, params: str) -> None:
    import tkir

    comp = load_companion("examples/gemm.tk")
    pipeline = tkir.api.default_pipeline()
    at = pipeline.index("persistent") + 1
    k = tkir.compile("examples/gemm.tk", passes=[*pipeline[:at], f"stream-k{{{params}}}" if params else "stream-k",
                                                 *pipeline[at:]])
    assert "stream_k" in k.module.kernel.attrs
    rng = np.random.default_rng()
    for launch in range(3):  # fresh inputs each time; the kernel's workspace and launch count carry over
        result = check_kernel(k, comp, sizes, {}, rng=rng, name="gemm")
        assert result.ok, f"launch {launch + 1}, stream-k{{{params}}}: {result}"
