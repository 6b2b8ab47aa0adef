"""Session 16, issue 13 item 4: how fast can a mature compiler's mma.sync GEMM go on this GPU?

Triton compiles `tl.dot` to mma.sync (its "MMA v2", the Ampere path) instead of wgmma when the
environment has DISABLE_MMA_V3=1; its loads become a cp.async ring of `num_stages` buffers. This
script times such a Triton GEMM (the kernel below, written for this comparison) in several tile
configurations beside tkir's sm_80 gemm (examples/gemm.tk --target sm_80, with pass variants), tkir's
wgmma gemm (sm_90a) and cuBLAS (torch.matmul), all at 4096^3 bf16, interleaved in one process with
tkir.bench.time_pair_ms (L2 flushed before every run, inputs rotated past the L2, medians). Every
kernel is checked against torch.matmul on fresh random inputs first; each Triton kernel's PTX is
checked for mma.sync and for the absence of wgmma (a row that used wgmma is marked so).

    DISABLE_MMA_V3=1 python3 docs/bench/session16_sm80.py --out DIR [--reps 20] [--rows LIST] [--set call1|call2]
        [--cutlass-lib .cutlass/libcutlass_sm80.so [--cutlass-names a,b]] [--size M,N,K]

With --cutlass-lib (session 24), CUTLASS 2.x's Ampere GEMMs (docs/bench/cutlass_sm80/: cp.async multistage,
ldmatrix, mma.sync; built for sm_90a by its build.sh) are timed too, one row per configuration in its names.txt
(or those of --cutlass-names). A tkir row may name a PTX rewrite (PTX_REWRITES, a screen: the compiled kernel's PTX
changed as text before it is loaded; not a product path).

Writes DIR/sm80_peer.json, the best Triton kernel's PTX and cubin (DIR/triton_best.*), and prints a
table last.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SIZE = dict(M=4096, N=4096, K=4096)
# (BM, BN, BK, num_stages, num_warps): the Ampere configurations of Triton's own matmul tutorial and
# of torch.compile's mm templates, plus the 8-warp 64 x 64-per-warp tiles tkir uses
TRITON_CONFIGS = [
    (128, 256, 64, 3, 8), (256, 128, 64, 3, 8), (128, 256, 32, 3, 8), (256, 128, 32, 3, 8),
    (128, 256, 32, 4, 8), (256, 128, 32, 4, 8), (128, 128, 64, 4, 4), (128, 128, 32, 4, 4),
    (128, 128, 64, 3, 8), (128, 256, 64, 4, 8),
]
_G = "examples/gemm.tk"
_W = "docs/bench/variants/gemm_warps/gemm_wg_occ.tk"   # @warpgroups(consumers=WG) @blocks_per_sm(OCC)
_ONE = {"plan-occupancy": "plan-occupancy{producer_warps=0}"}


def _fa(n: int) -> dict:
    return {"plan-occupancy": "plan-occupancy{producer_warps=0}",
            "pipeline-cp-async": f"pipeline-cp-async{{fragments_ahead={n}}}"}


def _rot(n: int, extra: str = "") -> dict:
    return {"plan-occupancy": "plan-occupancy{producer_warps=0}",
            "pipeline-cp-async": f"pipeline-cp-async{{rotate={n}{extra}}}"}


# session 23, call 2: a k16 step's A fragments loaded with the unit before its first (a_ahead), B two units ahead
_AHEAD = {"a_ahead": ",a_ahead=true", "a_ahead f2": ",a_ahead=true,fragments_ahead=2", "f2": ",fragments_ahead=2"}


def _l2_128b(ptx: str) -> str:
    """cp.async with the L2 prefetch-size hint CUTLASS's Ampere copies carry (`.L2::128B`, PTX 7.4; SASS LTC128B)."""
    return ptx.replace("cp.async.cg.shared.global [", "cp.async.cg.shared.global.L2::128B [")


PTX_REWRITES = {"l2_128b": _l2_128b}
# session 25: a row whose rewrite is "file:PATH" loads the PTX in PATH (relative to the repository) in place of
# the compiled kernel's: the same kernel compiled by an earlier commit (its launch must be the same), so the
# commit's change and its parent are timed in one process


def _rewrite(name: str, ptx: str) -> str:
    if name.startswith("file:"):
        return (ROOT / name[5:]).read_text()
    return PTX_REWRITES[name](ptx)


_S25 = "docs/bench/variants/session25"  # the parent commit's PTX of session 25's rows (made by session25_base.py)
_MM = dict(BM=128, BN=256, BK=32, STAGES=4)
_MM64 = dict(BM=256, BN=128, BK=64, STAGES=4)


def _cp(**kw: object) -> dict:
    return {"pipeline-cp-async": "pipeline-cp-async{" + ",".join(f"{k}={v}" for k, v in kw.items()) + "}"}
_NOSTAGE = {"stage-epilogue": ""}  # session 24: the pipeline without stage-epilogue (its ablation)
_PW4 = {"plan-occupancy": "plan-occupancy{producer_warps=4}"}  # session 23: the old default's producer warps
TKIR_ROWS = {  # row set -> [(label, file, target, consts, pass replacements)]
    "call1": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        ("tkir sm_80 128x256x64 S4 (default, 4 producer warps)", _G, "sm_80",
         dict(BM=128, BN=256, BK=64, STAGES=4), {}),
        ("tkir sm_80 256x128x64 S4 (4 producer warps)", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), {}),
        ("tkir sm_80 256x128x64 S4 one role", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), _ONE),
        ("tkir sm_80 128x256x64 S4 one role", _G, "sm_80", dict(BM=128, BN=256, BK=64, STAGES=4), _ONE),
    ],
    # call 2: Triton's fastest mma.sync shape (call 1: 128 x 128 blocks of 4 warps, two per SM) in tkir
    "call2": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        ("tkir sm_80 128x256x64 S4 (default, 4 producer warps)", _G, "sm_80",
         dict(BM=128, BN=256, BK=64, STAGES=4), {}),
        *[(f"tkir sm_80 4w 128x128x{bk} S{st} one role", _W, "sm_80",
           dict(BM=128, BN=128, BK=bk, STAGES=st, WG=1), _ONE)
          for bk, st in ((32, 3), (32, 4), (32, 6), (64, 3), (64, 4))],
        *[(f"tkir sm_80 4w 128x128x32 S4 fragments_ahead={n}", _W, "sm_80",
           dict(BM=128, BN=128, BK=32, STAGES=4, WG=1), _fa(n)) for n in (0, 2, 4, 8)],
        ("tkir sm_80 4w 128x128x32 S4 4 producer warps (default plan)", _W, "sm_80",
         dict(BM=128, BN=128, BK=32, STAGES=4, WG=1), {}),
        ("tkir sm_80 4w 128x128x32 S4 OCC=3", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1, OCC=3), {}),
        ("tkir sm_80 4w 128x128x32 S4 OCC=3 fragments_ahead=0", _W, "sm_80",
         dict(BM=128, BN=128, BK=32, STAGES=4, WG=1, OCC=3), _fa(0)),
    ],
    # call 5: after the cp.async changes (ignore-src, round addresses by one add, a tile's copies as one run)
    "call5": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        ("tkir sm_80 128x256x64 S4 (default, 4 producer warps)", _G, "sm_80",
         dict(BM=128, BN=256, BK=64, STAGES=4), {}),
        ("tkir sm_80 256x128x64 S4 one role", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), _ONE),
        *[(f"tkir sm_80 4w 128x128x{bk} S{st} one role", _W, "sm_80",
           dict(BM=128, BN=128, BK=bk, STAGES=st, WG=1), _ONE)
          for bk, st in ((32, 3), (32, 4), (32, 5), (64, 3))],
        *[(f"tkir sm_80 4w 128x128x32 S4 fragments_ahead={n}", _W, "sm_80",
           dict(BM=128, BN=128, BK=32, STAGES=4, WG=1), _fa(n)) for n in (0, 2, 8)],
        *[(f"tkir sm_80 4w 128x128x64 S3 fragments_ahead={n}", _W, "sm_80",
           dict(BM=128, BN=128, BK=64, STAGES=3, WG=1), _fa(n)) for n in (0, 2)],
    ],
    # session 23: the rotated loop (pipeline-cp-async{rotate=R}: the barrier R units before the end of the
    # mma, the next k-tile's first k16 step of fragments carried over the back edge); rotate=0 is the old order
    "session23": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        *[(f"tkir sm_80 4w 128x128x32 S4 rotate={r}", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1),
           _rot(r)) for r in (0, 1, 2, 4, 8)],
        *[(f"tkir sm_80 4w 128x128x32 S3 rotate={r}", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=3, WG=1),
           _rot(r)) for r in (0, 1)],
        *[(f"tkir sm_80 4w 128x128x64 S3 rotate={r}", _W, "sm_80", dict(BM=128, BN=128, BK=64, STAGES=3, WG=1),
           _rot(r)) for r in (0, 1, 4)],
        *[(f"tkir sm_80 4w 128x128x64 S4 rotate={r}", _W, "sm_80", dict(BM=128, BN=128, BK=64, STAGES=4, WG=1),
           _rot(r)) for r in (0, 1)],
        *[(f"tkir sm_80 256x128x64 S4 one role rotate={r}", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4),
           _rot(r)) for r in (0, 1, 8)],
        *[(f"tkir sm_80 256x128x32 S4 one role rotate={r}", _G, "sm_80", dict(BM=256, BN=128, BK=32, STAGES=4),
           _rot(r)) for r in (0, 1)],
    ],
    # session 23, call 2: the rotated loop's default (rotate=1) over 8-warp tiles, stages and BK; other R
    "session23b": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        *[(f"tkir sm_80 256x128x64 S{st} one role rotate={r}", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=st),
           _rot(r)) for st, r in ((3, 1), (4, 1), (4, 2), (4, 4), (4, 16), (4, 0))],
        *[(f"tkir sm_80 256x128x32 S{st} one role rotate=1", _G, "sm_80", dict(BM=256, BN=128, BK=32, STAGES=st),
           _rot(1)) for st in (4, 6, 8)],
        *[(f"tkir sm_80 128x256x{bk} S{st} one role rotate=1", _G, "sm_80", dict(BM=128, BN=256, BK=bk, STAGES=st),
           _rot(1)) for bk, st in ((64, 3), (64, 4), (32, 4), (32, 6))],
        *[(f"tkir sm_80 4w 128x128x32 S4 rotate={r}", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1),
           _rot(r)) for r in (0, 1, 4)],
        ("tkir sm_80 4w 128x128x64 S3 rotate=1", _W, "sm_80", dict(BM=128, BN=128, BK=64, STAGES=3, WG=1), _rot(1)),
        *[(f"tkir sm_80 256x128x64 S4 one role rotate=1 {n}", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4),
           _rot(1, x)) for n, x in _AHEAD.items()],
        *[(f"tkir sm_80 4w 128x128x32 S4 rotate=1 {n}", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1),
           _rot(1, x)) for n, x in _AHEAD.items()],
        *[(f"tkir sm_80 4w 128x128x64 S3 rotate=1 {n}", _W, "sm_80", dict(BM=128, BN=128, BK=64, STAGES=3, WG=1),
           _rot(1, x)) for n, x in _AHEAD.items()],
    ],
    # session 23, call 3: after a_ahead became the backend's rule where the registers allow, the producer warps
    # of gemm.tk's default plan against the one-role (rotated) loop
    "session23c": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        ("tkir sm_80 128x256x64 S4 (default, 4 producer warps)", _G, "sm_80",
         dict(BM=128, BN=256, BK=64, STAGES=4), {}),
        ("tkir sm_80 128x256x64 S4 one role (rotated)", _G, "sm_80", dict(BM=128, BN=256, BK=64, STAGES=4), _ONE),
        ("tkir sm_80 256x128x64 S4 4 producer warps", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), {}),
        ("tkir sm_80 256x128x64 S4 one role (rotated)", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), _ONE),
        ("tkir sm_80 256x128x64 S3 one role (rotated)", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=3), _ONE),
        ("tkir sm_80 256x128x64 S4 one role a_ahead=false", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4),
         _rot(1, ",a_ahead=false")),
        ("tkir sm_80 256x128x64 S4 one role rotate=0 a_ahead=false", _G, "sm_80",
         dict(BM=256, BN=128, BK=64, STAGES=4), _rot(0, ",a_ahead=false")),
        ("tkir sm_80 4w 128x128x32 S4 one role (rotated)", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1),
         _ONE),
    ],
    # session 23, call 4: the defaults after plan-occupancy's automatic choice became one role at equal mma warps
    # (gemm.tk on sm_80 as it compiles with no options, and at BM = 64) against the producer warps they had
    "session23d": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        ("tkir sm_80 gemm.tk default (128x256x64 S4, one role, rotated)", _G, "sm_80", {}, {}),
        ("tkir sm_80 gemm.tk default, producer_warps=4 (the old default)", _G, "sm_80", {}, _PW4),
        ("tkir sm_80 gemm.tk BM=64 (one role, rotated)", _G, "sm_80", dict(BM=64), {}),
        ("tkir sm_80 gemm.tk BM=64 producer_warps=4 (the old default)", _G, "sm_80", dict(BM=64), _PW4),
        ("tkir sm_80 256x128x64 S4 (one role, rotated)", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), {}),
        ("tkir sm_80 256x128x64 S4 rotate=0 a_ahead=false", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4),
         {"pipeline-cp-async": "pipeline-cp-async{rotate=0,a_ahead=false}"}),
    ],
    # session 24: CUTLASS's Ampere GEMMs (--cutlass-lib) beside tkir's best sm_80 tiles
    "session24": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        ("tkir sm_80 gemm.tk default (128x256x64 S4, one role, rotated)", _G, "sm_80", {}, {}),
        ("tkir sm_80 256x128x64 S4 (one role, rotated)", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), {}),
        ("tkir sm_80 256x128x64 S3 (one role, rotated)", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=3), {}),
        ("tkir sm_80 4w 128x128x32 S4 one role (rotated)", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1),
         _ONE),
    ],
    # session 24, call 2: tkir at CUTLASS's fastest tiles (128 x 256 x 32 S4, 128 x 256 x 64 S3), the L2::128B screen
    "session24b": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        ("tkir sm_80 256x128x64 S4 (one role, rotated)", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), {}),
        ("tkir sm_80 256x128x64 S4 +L2::128B", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), {}, "l2_128b"),
        ("tkir sm_80 128x256x32 S4 (one role, rotated)", _G, "sm_80", dict(BM=128, BN=256, BK=32, STAGES=4), {}),
        ("tkir sm_80 128x256x32 S4 +L2::128B", _G, "sm_80", dict(BM=128, BN=256, BK=32, STAGES=4), {}, "l2_128b"),
        ("tkir sm_80 128x256x64 S3 (one role, rotated)", _G, "sm_80", dict(BM=128, BN=256, BK=64, STAGES=3), {}),
    ],
    # session 24, call 3: stage-epilogue (the accumulator store through per-warp shared rows, 16-byte stores)
    # against its ablation (the pass left out: "" drops it from the pipeline)
    "session24c": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        ("tkir sm_80 gemm.tk default (128x256x64 S4), staged", _G, "sm_80", {}, {}),
        ("tkir sm_80 gemm.tk default, no stage-epilogue", _G, "sm_80", {}, _NOSTAGE),
        ("tkir sm_80 256x128x64 S4, staged", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), {}),
        ("tkir sm_80 256x128x64 S4, no stage-epilogue", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), _NOSTAGE),
        ("tkir sm_80 128x256x32 S4, staged", _G, "sm_80", dict(BM=128, BN=256, BK=32, STAGES=4), {}),
        ("tkir sm_80 128x256x32 S4, no stage-epilogue", _G, "sm_80", dict(BM=128, BN=256, BK=32, STAGES=4), _NOSTAGE),
        ("tkir sm_80 256x128x32 S6, staged", _G, "sm_80", dict(BM=256, BN=128, BK=32, STAGES=6), {}),
        ("tkir sm_80 4w 128x128x32 S4, staged", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1), _ONE),
        ("tkir sm_80 4w 128x128x32 S4, no stage-epilogue", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1),
         {**_ONE, **_NOSTAGE}),
    ],
    # session 24, call 4: the main loop's switches again, now that the epilogue is staged
    "session24d": [
        ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
        ("tkir sm_80 256x128x64 S4, staged", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=4), {}),
        *[(f"tkir sm_80 256x128x64 S4, staged, pipeline-cp-async{{{x}}}", _G, "sm_80",
           dict(BM=256, BN=128, BK=64, STAGES=4), {"pipeline-cp-async": f"pipeline-cp-async{{{x}}}"})
          for x in ("rotate=2", "rotate=4", "a_ahead=false", "fragments_ahead=2", "rotate=0")],
        ("tkir sm_80 256x128x64 S3, staged", _G, "sm_80", dict(BM=256, BN=128, BK=64, STAGES=3), {}),
        ("tkir sm_80 128x256x64 S3, staged", _G, "sm_80", dict(BM=128, BN=256, BK=64, STAGES=3), {}),
    ],
}
# session 25, call 1: the cp.async addresses split into a thread part (before the loop) and a uniform tile part,
# against the parent commit's PTX (file:), and the fragment distance at CUTLASS's best tile (128 x 256 x 32 S4)
TKIR_ROWS["session25a"] = [
    ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
    ("tkir sm_80 128x256x32 S4", _G, "sm_80", _MM, {}),
    ("tkir sm_80 128x256x32 S4 parent", _G, "sm_80", _MM, {}, f"file:{_S25}/mm32.ptx"),
    *[(f"tkir sm_80 128x256x32 S4 {k}={v}", _G, "sm_80", _MM, _cp(**{k: v}))
      for k, v in (("fragments_ahead", 2), ("fragments_ahead", 4), ("fragments_ahead", 8), ("rotate", 2),
                   ("rotate", 4), ("a_ahead", "false"))],
    ("tkir sm_80 128x256x32 S4 rotate=4,fragments_ahead=4", _G, "sm_80", _MM, _cp(rotate=4, fragments_ahead=4)),
    ("tkir sm_80 128x256x32 S4 rotate=2,fragments_ahead=4", _G, "sm_80", _MM, _cp(rotate=2, fragments_ahead=4)),
    ("tkir sm_80 128x256x32 S5", _G, "sm_80", dict(_MM, STAGES=5), {}),
    ("tkir sm_80 128x256x32 S4 fragments_ahead=4 parent", _G, "sm_80", _MM, _cp(fragments_ahead=4),
     f"file:{_S25}/mm32_fa4.ptx"),
    ("tkir sm_80 128x256x64 S3", _G, "sm_80", dict(BM=128, BN=256, BK=64, STAGES=3), {}),
    ("tkir sm_80 128x256x64 S3 fragments_ahead=4", _G, "sm_80", dict(BM=128, BN=256, BK=64, STAGES=3),
     _cp(fragments_ahead=4)),
    ("tkir sm_80 256x128x64 S4", _G, "sm_80", _MM64, {}),
    ("tkir sm_80 256x128x64 S4 parent", _G, "sm_80", _MM64, {}, f"file:{_S25}/mm64.ptx"),
    ("tkir sm_80 256x128x64 S4 fragments_ahead=4", _G, "sm_80", _MM64, _cp(fragments_ahead=4)),
]
# session 25, call 2: pipeline-cp-async's step_ahead default (fragments a whole k16 step ahead, rotated by a whole
# step) against its ablation (step_ahead=false: the session 24 default) and the rotate=1 variant measured in call 1
_SA0 = _cp(step_ahead="false")
TKIR_ROWS["session25b"] = [
    ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
    ("tkir sm_80 gemm.tk default (128x256x64 S4)", _G, "sm_80", {}, {}),
    ("tkir sm_80 gemm.tk default, step_ahead=false", _G, "sm_80", {}, _SA0),
    ("tkir sm_80 128x256x32 S4", _G, "sm_80", _MM, {}),
    ("tkir sm_80 128x256x32 S4 step_ahead=false", _G, "sm_80", _MM, _SA0),
    ("tkir sm_80 256x128x64 S4", _G, "sm_80", _MM64, {}),
    ("tkir sm_80 256x128x64 S4 rotate=1 (fragments a step ahead)", _G, "sm_80", _MM64, _cp(rotate=1)),
    ("tkir sm_80 256x128x64 S4 step_ahead=false", _G, "sm_80", _MM64, _SA0),
    ("tkir sm_80 128x256x64 S3", _G, "sm_80", dict(BM=128, BN=256, BK=64, STAGES=3), {}),
    ("tkir sm_80 256x128x32 S4", _G, "sm_80", dict(BM=256, BN=128, BK=32, STAGES=4), {}),
    ("tkir sm_80 256x128x32 S4 rotate=1", _G, "sm_80", dict(BM=256, BN=128, BK=32, STAGES=4), _cp(rotate=1)),
    ("tkir sm_80 gemm.tk BM=64 (64x256x64 S4)", _G, "sm_80", dict(BM=64), {}),
    ("tkir sm_80 gemm.tk BM=64, step_ahead=false", _G, "sm_80", dict(BM=64), _SA0),
    ("tkir sm_80 4w 128x128x32 S4", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1), _ONE),
    ("tkir sm_80 4w 128x128x32 S4 step_ahead=false", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1),
     {**_ONE, **_SA0}),
]
# session 25, call 3: step_ahead with the split cp.async addresses (rules_sm80.py cp_async_rows) against the same
# defaults without the split (file: PTX made by session25_base.py call3 before it), and step_ahead's ablation
TKIR_ROWS["session25c"] = [
    ("tkir wgmma (sm_90a default)", _G, "sm_90a", {}, {}),
    ("tkir sm_80 gemm.tk default (128x256x64 S4)", _G, "sm_80", {}, {}),
    ("tkir sm_80 gemm.tk default, addresses unsplit", _G, "sm_80", {}, {}, f"file:{_S25}/sa_default.ptx"),
    ("tkir sm_80 gemm.tk default, step_ahead=false", _G, "sm_80", {}, _SA0),
    ("tkir sm_80 128x256x32 S4", _G, "sm_80", _MM, {}),
    ("tkir sm_80 128x256x32 S4, addresses unsplit", _G, "sm_80", _MM, {}, f"file:{_S25}/sa_mm32.ptx"),
    ("tkir sm_80 128x256x32 S4 step_ahead=false", _G, "sm_80", _MM, _SA0),
    ("tkir sm_80 256x128x64 S4", _G, "sm_80", _MM64, {}),
    ("tkir sm_80 256x128x64 S4, addresses unsplit", _G, "sm_80", _MM64, {}, f"file:{_S25}/sa_mm64.ptx"),
    ("tkir sm_80 256x128x64 S4 step_ahead=false", _G, "sm_80", _MM64, _SA0),
    ("tkir sm_80 128x256x64 S3", _G, "sm_80", dict(BM=128, BN=256, BK=64, STAGES=3), {}),
    ("tkir sm_80 gemm.tk BM=64 (64x256x64 S4)", _G, "sm_80", dict(BM=64), {}),
    ("tkir sm_80 4w 128x128x32 S4", _W, "sm_80", dict(BM=128, BN=128, BK=32, STAGES=4, WG=1), _ONE),
]
TRITON_SETS = {"session25c": [(128, 128, 32, 4, 4)], "session25b": [(128, 128, 32, 4, 4)],
               "session25a": [(128, 128, 32, 4, 4)], "session24d": [(128, 128, 32, 4, 4)],
               "session24c": [(128, 128, 32, 4, 4)],
               "session24b": [(128, 128, 32, 4, 4)], "call1": TRITON_CONFIGS,
               "session24": [(128, 128, 32, 4, 4), (128, 128, 64, 4, 4)],
               "session23": [(128, 128, 32, 4, 4), (128, 128, 64, 4, 4)],
               "session23d": [(128, 128, 32, 4, 4)],
               "session23c": [(128, 128, 32, 4, 4)],
               "session23b": [(128, 128, 32, 4, 4)],
               "call2": [(128, 128, 32, 4, 4), (128, 128, 64, 4, 4), (256, 128, 64, 3, 8), (128, 128, 32, 3, 4)],
               "call5": [(128, 128, 32, 4, 4), (128, 128, 64, 3, 4), (128, 128, 32, 3, 4)]}


def triton_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def mm(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
           BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
        pid = tl.program_id(0)
        num_m = tl.cdiv(M, BM)
        num_n = tl.cdiv(N, BN)
        in_group = GROUP_M * num_n
        first_m = (pid // in_group) * GROUP_M
        size_m = min(num_m - first_m, GROUP_M)
        pid_m = first_m + (pid % in_group) % size_m
        pid_n = (pid % in_group) // size_m
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + (rm % M)[:, None] * sam + rk[None, :] * sak
        b_ptrs = b_ptr + rk[:, None] * sbk + (rn % N)[None, :] * sbn
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, tl.cdiv(K, BK)):   # K % BK == 0 at the sizes timed here
            acc = tl.dot(tl.load(a_ptrs), tl.load(b_ptrs), acc)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        c_ptrs = c_ptr + rm[:, None] * scm + rn[None, :] * scn
        tl.store(c_ptrs, acc.to(tl.bfloat16), mask=(rm[:, None] < M) & (rn[None, :] < N))

    return mm, triton


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--rows", default="triton,tkir")
    ap.add_argument("--set", default="call1", choices=sorted(TKIR_ROWS))
    ap.add_argument("--cutlass-lib", default=None, help="libcutlass_sm80.so from docs/bench/cutlass_sm80/build.sh")
    ap.add_argument("--cutlass-names", default=None, help="comma-separated configurations (default: all of names.txt)")
    ap.add_argument("--size", default="4096,4096,4096", help="M,N,K")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    import torch

    import tkir
    from tkir.bench import L2_BYTES, MAX_ROTATE_SETS, ROTATE_FACTOR, _rel_err, time_pair_ms

    SIZE.update(zip("MNK", (int(v) for v in args.size.split(",")), strict=True))
    M, N, K = SIZE["M"], SIZE["N"], SIZE["K"]
    flops = 2 * M * N * K
    nbytes = 2 * (M * K + K * N + M * N)
    nsets = max(2, min(MAX_ROTATE_SETS, math.ceil(ROTATE_FACTOR * L2_BYTES / nbytes)))
    sets = [(torch.randn(M, K, device="cuda").bfloat16(), torch.randn(K, N, device="cuda").bfloat16(),
             torch.full((M, N), float("nan"), device="cuda", dtype=torch.bfloat16)) for _ in range(nsets)]
    ref = (sets[0][0].float() @ sets[0][1].float())
    rows: list[dict] = []
    fns: list = []

    def add(label: str, run_for_set, info: dict) -> None:
        a, b, c = sets[0]
        c.fill_(float("nan"))
        run_for_set(0)()
        torch.cuda.synchronize()
        err = _rel_err(torch, c.float(), ref)
        info = dict(label=label, err=err, ok=err <= 2e-2, **info)
        rows.append(info)
        fns.append(run_for_set)
        print(info, flush=True)

    add("cuBLAS (torch.matmul)", lambda i: (lambda: torch.matmul(sets[i][0], sets[i][1], out=sets[i][2])), {})
    if "tkir" in args.rows:
        for label, path, target, consts, repl, *rewrite in TKIR_ROWS[args.set]:
            passes = ",".join(x for x in (repl.get(p, p) for p in tkir.api.default_pipeline()) if x) if repl else None
            try:
                k = tkir.compile(str(ROOT / path), target=target, **({"passes": passes} if passes else {}), **consts)
                if rewrite:
                    k.lower()
                    new = _rewrite(rewrite[0], k.asm["ptx"])
                    if new == k.asm["ptx"]:
                        raise ValueError(f"PTX rewrite {rewrite[0]} changed nothing")
                    k.asm["ptx"] = new
            except Exception as e:  # noqa: BLE001 - a configuration that does not compile is a row
                rows.append(dict(label=label, error=f"{type(e).__name__}: {e}"))
                print(rows[-1], flush=True)
                continue
            add(label, lambda i, k=k: (lambda: k(*sets[i])), dict(target=target))
    if "triton" in args.rows:
        mm, triton = triton_kernel()
        best_ptx = {}
        for bm, bn, bk, st, nw in TRITON_SETS[args.set]:
            label = f"triton mma.sync {bm}x{bn}x{bk} S{st} W{nw}"
            grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)

            def launch(i, bm=bm, bn=bn, bk=bk, st=st, nw=nw, grid=grid):
                a, b, c = sets[i]
                return lambda: mm[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                        c.stride(0), c.stride(1), BM=bm, BN=bn, BK=bk, GROUP_M=8,
                                        num_stages=st, num_warps=nw)
            try:
                compiled = launch(0)()
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory
                rows.append(dict(label=label, error=f"{type(e).__name__}: {str(e)[:200]}"))
                print(rows[-1], flush=True)
                continue
            ptx = getattr(compiled, "asm", {}).get("ptx", "")
            info = dict(mma_sync="mma.sync" in ptx, wgmma="wgmma" in ptx, regs=getattr(compiled, "n_regs", None),
                        spills=getattr(compiled, "n_spills", None), cp_async="cp.async" in ptx,
                        ldmatrix="ldmatrix" in ptx)
            best_ptx[label] = compiled
            add(label, launch, info)
    if args.cutlass_lib:
        import ctypes
        lib = ctypes.CDLL(str(Path(args.cutlass_lib).resolve()))
        names = (args.cutlass_names.split(",") if args.cutlass_names
                 else (Path(args.cutlass_lib).parent / "names.txt").read_text().split())
        for name in names:
            fn = getattr(lib, name)
            fn.restype = ctypes.c_int
            fn.argtypes = [ctypes.c_int] * 3 + [ctypes.c_void_p] * 4

            def launch(i, fn=fn):
                a, b, c = sets[i]
                ptrs = (a.data_ptr(), b.data_ptr(), c.data_ptr(), torch.cuda.current_stream().cuda_stream)

                def go():
                    rc = fn(M, N, K, *ptrs)
                    if rc:
                        raise RuntimeError(f"{fn.__name__}: status {rc}")
                return go
            try:
                add(name.replace("cutlass_", "cutlass mma.sync "), launch, dict(cutlass=name))
            except Exception as e:  # noqa: BLE001 - a configuration that cannot run is a row
                rows.append(dict(label=name, error=f"{type(e).__name__}: {str(e)[:200]}"))
                print(rows[-1], flush=True)
    print(f"timing {len(fns)} kernels interleaved, {args.reps} reps, {nsets} input sets", flush=True)
    ms = time_pair_ms(torch, fns, nsets, args.reps, 5)
    for r, t in zip([r for r in rows if "error" not in r], ms, strict=True):
        r["ms"] = t
        r["tflops"] = flops / t / 1e9
    by = {r["label"]: r for r in rows}
    wg = by.get("tkir wgmma (sm_90a default)", {}).get("tflops")
    for r in rows:
        if wg and "tflops" in r:
            r["x_wgmma"] = r["tflops"] / wg
    if "triton" in args.rows:
        tri = [r for r in rows if r["label"].startswith("triton") and "tflops" in r and r.get("ok")]
        if tri:
            best = max(tri, key=lambda r: r["tflops"])
            compiled = best_ptx[best["label"]]
            (out / "triton_best.ptx").write_text(compiled.asm["ptx"])
            (out / "triton_best.cubin").write_bytes(compiled.asm["cubin"])
            (out / "triton_best.txt").write_text(best["label"] + "\n")
    (out / "sm80_peer.json").write_text(json.dumps(dict(size=SIZE, reps=args.reps, rows=rows), indent=1))
    print(f"\n== {M}x{N}x{K} bf16, TFLOP/s (median of {args.reps}, interleaved; x_wgmma: x tkir's wgmma gemm)")
    for r in rows:
        if "error" in r:
            print(f"{r['label']:58s} ERROR {r['error'][:90]}")
            continue
        flags = "" if not r["label"].startswith("triton") else (
            f" regs={r['regs']} spills={r['spills']} mma.sync={r['mma_sync']} wgmma={r['wgmma']}")
        print(f"{r['label']:58s} {r['tflops']:7.1f}  x_wgmma={r.get('x_wgmma', 0):.3f}  err={r['err']:.1e} "
              f"{'ok' if r['ok'] else 'FAIL'}{flags}")
    return 0


if __name__ == "__main__":
    if os.environ.get("DISABLE_MMA_V3") != "1":
        print("set DISABLE_MMA_V3=1 (Triton then compiles tl.dot to mma.sync)", file=sys.stderr)
        sys.exit(2)
    sys.exit(main())
