"""The launch description (backend/launch.py) and the TMA descriptor checks behind it.

JSON assertions on hand-written post-pass IR, and on the examples through the front end and the
tk-level passes up to plan-occupancy; the typed description's JSON round trip (to_json / from_json)
over every example configuration, and from_json's errors naming the bad field.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tkir.backend.launch import (
    LaunchDescription,
    LaunchError,
    PointerParam,
    ScalarParam,
    SizeParam,
    TensorMapParam,
    build_launch,
    read_launch,
)
from tkir.diagnostics import CompileError
from tkir.frontend import compile_file
from tkir.parser import parse_module
from tkir.passes.registry import load_registry
from tkir.passmanager import Options, PassManager
from tkir.tools.examples import load_companion
from tkir.verifier import verify

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
GEMM_CONSTS = load_companion(str(EXAMPLES / "gemm.tk")).DEFAULT_CONSTS  # gemm.tk's auto consts at the header's old values
ROW_KERNELS = Path(__file__).resolve().parents[2] / "tests" / "data" / "rows"  # the row kernels with every knob
UP_TO_OCCUPANCY = ["canonicalize", "infer-layouts", "select-swizzle", "bank-conflicts", "create-tma",
                   "plan-occupancy"]
SMEM_PER_BLOCK = 232_448  # HOPPER.md §7.3

GEMM_AFTER_PASSES = """\
tma.desc @A_tma {tensor = "A", param = 0, dtype = "bf16", rank = 2, dims = ["K", "M"], strides = ["K * 2"], \
box = [64, 128], elem_strides = [1, 1], swizzle = 128, l2_promotion = 128, oob_fill = "zero"}
tma.desc @B_tma {tensor = "B", param = 1, dtype = "bf16", rank = 2, dims = ["N", "K"], strides = ["N * 2"], \
box = [64, 64], elem_strides = [1, 1], swizzle = 128, l2_promotion = 128, oob_fill = "zero"}
tk.kernel @gemm {grid = ["M / 128", "N / 256"], occupancy = {stages = 4, blocks_per_sm = 1, \
smem_bytes = 197696, threads = 384, roles = {producer = {warpgroups = 1, regs = 40}, \
consumer = {warpgroups = 2, regs = 232}}}} {
  ^(%A: gl<bf16>[M, K], %B: gl<bf16>[K, N], %C: gl<bf16>[M, N], %alpha: f32)
  %a = tk.alloc : st<bf16, 128, 64, swizzle=128, align=1024>
  %b = tk.alloc : st<bf16, 64, 256, swizzle=128, align=1024>
  %acc = tk.fill {value = 0.0} : rt<f32, 128, 256>
  %K = tk.size {name = "K"} : i32
  %c64 = arith.const {value = 64} : i32
  %kt = arith.div %K, %c64 : i32
  %c0 = arith.const {value = 0} : i32
  %c1 = arith.const {value = 1} : i32
  %bx = tk.block_id {dim = 0} : i32
  %by = tk.block_id {dim = 1} : i32
  %acc.1 = scf.for %c0, %kt, %c1, %acc {stages = 4} : rt<f32, 128, 256> {
    ^(%k: i32, %acc.2: rt<f32, 128, 256>)
    tma.load %a, %A, %bx, %k {desc = @A_tma, boxes = 1, bytes = 16384}
    tma.load %b, %B, %k, %by {desc = @B_tma, boxes = 4, bytes = 32768}
    %acc.3 = tk.mma %a, %b, %acc.2 : rt<f32, 128, 256>
    scf.yield %acc.3
  }
  %out = tk.cast %acc.1 : rt<bf16, 128, 256>
  tk.store %C, %out, %bx, %by
}
"""


def _kernel(name: str) -> Path:
    """examples/NAME.tk, or for the row kernels their copy with every schedule knob (tests/data/rows)."""
    return (ROW_KERNELS if name in ("layernorm", "rmsnorm", "softmax") else EXAMPLES) / f"{name}.tk"


def launch_of_example(name: str, **consts: int) -> LaunchDescription:
    if name == "gemm":  # the front end cannot choose auto consts: the old header's values
        consts = {**GEMM_CONSTS, **consts}
    if name == "attention_fwd":
        consts = {"BQ": 64, "BKV": 64, **consts}
    module = compile_file(str(_kernel(name)), consts)
    PassManager(load_registry(), UP_TO_OCCUPANCY).run(module, Options())
    return build_launch(module, "sm_90a")


def test_gemm_launch_from_post_pass_ir() -> None:
    described = build_launch(parse_module(GEMM_AFTER_PASSES), "sm_90a")
    launch = described.to_json()
    assert launch["kernel"] == "gemm" and launch["target"] == "sm_90a"
    assert launch["tensors"] == [{"name": "A", "dtype": "bf16", "dims": ["M", "K"]},
                                 {"name": "B", "dtype": "bf16", "dims": ["K", "N"]},
                                 {"name": "C", "dtype": "bf16", "dims": ["M", "N"]}]
    assert launch["scalars"] == [{"name": "alpha", "dtype": "f32"}]
    # the PTX parameter order: tensor maps, pointers, sizes (first appearance in the dims), scalars
    assert launch["params"] == [
        {"name": "A_tma", "kind": "tensor_map", "tma": 0},
        {"name": "B_tma", "kind": "tensor_map", "tma": 1},
        {"name": "A", "kind": "pointer", "dtype": "bf16", "tensor": "A"},
        {"name": "B", "kind": "pointer", "dtype": "bf16", "tensor": "B"},
        {"name": "C", "kind": "pointer", "dtype": "bf16", "tensor": "C"},
        {"name": "M", "kind": "scalar", "dtype": "i32", "size": "M"},
        {"name": "K", "kind": "scalar", "dtype": "i32", "size": "K"},
        {"name": "N", "kind": "scalar", "dtype": "i32", "size": "N"},
        {"name": "alpha", "kind": "scalar", "dtype": "f32", "scalar": "alpha"},
    ]
    assert launch["grid"] == ["M / 128", "N / 256", "1"]
    assert launch["block"] == [384, 1, 1]
    assert launch["dynamic_smem"] == 197696
    assert launch["tma"] == [
        {"param": "A_tma", "tensor": "A", "dtype": "bf16", "rank": 2, "dims": ["K", "M"],
         "strides": ["K * 2"], "box": [64, 128], "elem_strides": [1, 1], "swizzle": 128,
         "l2_promotion": 128, "oob_fill": "zero"},
        {"param": "B_tma", "tensor": "B", "dtype": "bf16", "rank": 2, "dims": ["N", "K"],
         "strides": ["N * 2"], "box": [64, 64], "elem_strides": [1, 1], "swizzle": 128,
         "l2_promotion": 128, "oob_fill": "zero"},
    ]
    req = {r["expr"]: r["why"] for r in launch["requires"]}
    assert all(r["equals"] == 0 for r in launch["requires"])
    # M and N: the grid floors them (C's accumulator store itself is masked by the backend);
    # K: only read through TMA (out-of-bounds fill) but the loop bound K / 64 floors it.
    assert set(req) == {"M % 128", "N % 256", "K % 64", "(K * 2) % 16", "(N * 2) % 16"}
    assert "grid dim 0" in req["M % 128"] and "copied without TMA" not in req["M % 128"]
    assert "loop bound K / 64" in req["K % 64"] and "TMA" not in req["K % 64"]
    assert json.loads(described.to_text()) == launch
    # the same description through its typed records
    assert described.params[0] == TensorMapParam("A_tma", 0) and described.params[2] == PointerParam("A", "bf16", "A")
    assert described.params[5] == SizeParam("M", "i32", "M") and described.params[8] == ScalarParam("alpha", "f32", "alpha")
    assert described.block == (384, 1, 1) and described.tma[1].box == (64, 64) and described.cluster is None


def test_gemm_example_launch() -> None:
    launch = launch_of_example("gemm")
    by_tensor = {t.tensor: t for t in launch.tma}
    assert set(by_tensor) == {"A", "B", "C"}  # C: the staged epilogue's TMA stores
    assert by_tensor["C"].box == (64, 64) and by_tensor["C"].swizzle == 128
    assert by_tensor["A"].swizzle == 128 and by_tensor["B"].swizzle == 128
    assert by_tensor["A"].box == (64, 128) and by_tensor["B"].box == (64, 64)
    assert [p.kind for p in launch.params[:3]] == ["tensor_map"] * 3
    assert launch.block[0] >= 3 * 128  # one producer and at least two consumer warpgroups
    assert launch.dynamic_smem <= SMEM_PER_BLOCK


def test_attention_example_launch() -> None:
    launch = launch_of_example("attention_fwd", D=64, CAUSAL=1)
    assert [t.tensor for t in launch.tma] == ["Q", "K", "V", "O"]
    q = launch.tma[0]
    # rank 4 [B, H, N, 64]: innermost first, fixed head dim folded into ints, box 1 in B and H
    assert q.dims == (64, "N", "H", "B")
    assert q.strides == (128, "N * 128", "H * N * 128")
    assert q.box == (64, 64, 1, 1) and q.swizzle == 128
    assert [p.name for p in launch.params if p.kind == "scalar"] == ["B", "H", "N"]
    assert launch.grid == ("cdiv(N, 64)", "H", "B")
    assert launch.block == (256, 1, 1)


def test_examples_without_tma_launch_their_warpgroups() -> None:
    launch = launch_of_example("softmax")  # @warpgroups(consumers=4): 512 threads
    assert launch.tma == () and launch.dynamic_smem == 0 and launch.block == (512, 1, 1)
    assert launch_of_example("rotary").block == (128, 1, 1)
    assert [p.kind for p in launch.params] == ["pointer", "pointer", "scalar"]
    assert launch.requires == ()  # cdiv grid; rows of register copies are masked by the backend


def test_launch_without_occupancy_plan() -> None:
    text = GEMM_AFTER_PASSES.split("tk.kernel", 1)
    kernel = "tk.kernel" + text[1]
    kernel = kernel[:kernel.index(", occupancy")] + "} {" + kernel[kernel.index("\n"):]
    launch = build_launch(parse_module(text[0] + kernel), "sm_90a")
    # one warpgroup; the allocations at their alignment plus one alignment of base padding
    assert launch.block == (128, 1, 1)
    assert launch.dynamic_smem == 16384 + 32768 + 1024


def test_descriptor_swizzle_must_match_the_tile(tmp_path: Path) -> None:
    bad = GEMM_AFTER_PASSES.replace("st<bf16, 128, 64, swizzle=128, align=1024>",
                                    "st<bf16, 128, 64, swizzle=64, align=512>")
    path = tmp_path / "g.tkir"
    path.write_text(bad)
    with pytest.raises(CompileError) as e:
        build_launch(parse_module(bad, str(path)), "sm_90a")
    msg = e.value.format()
    assert msg.startswith(f"{path}:17:5: error: 'tma.load': @A_tma has swizzle 128, but the shared tile %a is")
    assert "tma.load %a, %A" in msg.splitlines()[1]


@pytest.mark.parametrize("old, new, message", [
    ("box = [64, 128]", "box = [64, 300]", "'tma.desc' box dim 1 is 300, TMA allows 1..256"),
    ('strides = ["K * 2"]', "strides = [200]",
     "'tma.desc' stride 1 is 200 B, TMA needs a positive multiple of 16 B below 2^40"),
    ("swizzle = 128, l2", "swizzle = 64, l2",
     "'tma.desc' inner box is 128 B, wider than the 64 B swizzle span"),
    ("box = [64, 128]", "box = [12, 128]", "'tma.desc' inner box is 24 B, not a multiple of 16 B"),
])
def test_bad_descriptors_are_located_errors(tmp_path: Path, old: str, new: str, message: str) -> None:
    text = GEMM_AFTER_PASSES.replace(old, new, 1)
    path = tmp_path / "bad.tkir"
    path.write_text(text)
    with pytest.raises(CompileError) as e:
        verify(parse_module(text, str(path)))
    out = e.value.format().splitlines()
    assert out[0] == f"{path}:1:1: error: {message}"
    assert out[1].startswith("tma.desc @A_tma") and out[2] == "^"


def test_tma_copy_bytes_are_checked() -> None:
    text = GEMM_AFTER_PASSES.replace("boxes = 1, bytes = 16384", "boxes = 1, bytes = 8192")
    with pytest.raises(CompileError, match="'tma.load' bytes must be the tile's 16384 B"):
        verify(parse_module(text))


def test_no_tma_everywhere_gives_no_descriptors() -> None:
    module = compile_file(str(EXAMPLES / "gemm.tk"), GEMM_CONSTS)
    PassManager(load_registry(), UP_TO_OCCUPANCY).run(module, Options(no_tma=True))
    launch = build_launch(module, "sm_90a")
    assert launch.tma == ()
    assert "pointer" == launch.params[0].kind
    # the shared A and B copies are cp.async now: edge tiles are zero-filled (no whole-tile sizes),
    # but every row must start 16-byte aligned
    exprs = {r.expr for r in launch.requires}
    assert {"(K * 2) % 16", "(N * 2) % 16"} <= exprs
    assert not {"M % 128", "N % 256", "K % 64"} & exprs


def test_tma_copies_mean_the_copies_they_replaced() -> None:
    # The interpreter runs tma.load / tma.store as the tk.load / tk.store they replaced, with the
    # out-of-bounds fill of TMA: a shared -> global round trip through TMA on a partial edge tile.
    import numpy as np

    from tkir.interp import NUMPY_DTYPES, interpret

    text = """\
tk.kernel @copy {grid = ["cdiv(M, 64)"]} {
  ^(%X: gl<bf16>[M, 64], %Y: gl<bf16>[M, 64])
  %c0 = arith.const {value = 0} : i32
  %bx = tk.block_id {dim = 0} : i32
  %t = tk.alloc : st<bf16, 64, 64, swizzle=128, align=1024>
  tk.load %t, %X, %bx, %c0
  tk.store %Y, %t, %bx, %c0
}
"""
    module = parse_module(text)
    PassManager(load_registry(), ["create-tma"]).run(module, Options())
    assert [op.name for op in module.kernel.body.ops][-2:] == ["tma.load", "tma.store"]
    x = np.arange(100 * 64, dtype=np.float32).reshape(100, 64).astype(NUMPY_DTYPES["bf16"])
    y = np.full_like(x, np.nan)
    interpret(module, x, y)
    assert np.array_equal(x, y)


# --- the typed description: JSON round trip, from_json's checks ---------------------------------------

STREAM_K = ("canonicalize,legalize-mma,infer-layouts,select-swizzle,bank-conflicts,create-tma,plan-occupancy,"
            "pipeline,persistent,stream-k,canonicalize")
# compiled descriptions that hold every kind of entry between them (the test checks that they do)
ROUND_TRIP = [
    ("gemm", {}, {}), ("gemm", {}, {"target": "sm_80"}), ("gemm", {}, {"passes": STREAM_K}),
    ("gemm", {}, {"no_tma": True}), ("attention_fwd", {"D": 64, "CAUSAL": 1}, {}), ("softmax", {}, {}),
    ("layernorm", {}, {}), ("layernorm", {"D": 8192, "DC": 8192, "ROWS": 1, "WG": 2, "CL": 2}, {}),
    ("rotary", {}, {}), ("based", {}, {}),
]


def test_every_kind_of_description_survives_its_json_round_trip() -> None:
    """to_json then from_json gives the same frozen description, through JSON text too, and to_json of
    what from_json read is the JSON it read: the backend's descriptions are a fixed point of the reader."""
    import tkir

    seen: set[str] = set()
    for name, consts, opts in ROUND_TRIP:
        launch = tkir.compile(str(_kernel(name)), **opts, **consts).launch
        data = launch.to_json()
        assert LaunchDescription.from_json(data) == launch, name
        assert LaunchDescription.from_json(json.loads(launch.to_text())) == launch, name
        assert LaunchDescription.from_json(data).to_json() == data and read_launch(launch.to_text()) == launch
        assert list(data) == [f for f in ("kernel", "target", "tensors", "scalars", "params", "grid", "block",
                                          "dynamic_smem", "requires", "aligned", "readonly", "tma", "cluster",
                                          "unaligned")
                              if f in data]
        seen |= {p.kind for p in launch.params} | {k for k in ("aligned", "readonly", "tma", "cluster", "requires",
                                                               "unaligned") if data.get(k)}
    assert seen == {"tensor_map", "pointer", "scalar", "workspace", "launch_count", "aligned", "readonly", "tma",
                    "cluster", "requires", "unaligned"}


def test_a_description_is_frozen() -> None:
    import dataclasses

    launch = build_launch(parse_module(GEMM_AFTER_PASSES), "sm_90a")
    with pytest.raises(dataclasses.FrozenInstanceError):
        launch.dynamic_smem = 0  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        launch.tma[0].box = (1, 1)  # type: ignore[misc]
    assert hash(launch.params) == hash(build_launch(parse_module(GEMM_AFTER_PASSES), "sm_90a").params)


def test_from_json_fills_a_foreign_descriptions_defaults() -> None:
    """What docs/runtime.md lets another toolchain leave out: target, the lists, dynamic_smem, grid and
    block entries past the first, a pointer's dtype and a tma entry's dtype, rank, elem_strides, swizzle,
    L2 promotion and fill."""
    launch = LaunchDescription.from_json({
        "kernel": "copy", "tensors": [{"name": "X", "dtype": "bf16", "dims": ["N", 64]}],
        "params": [{"name": "m", "kind": "tensor_map", "tma": 0}, {"name": "X", "kind": "pointer", "tensor": "X"}],
        "grid": ["cdiv(N, 64)"], "block": [128],
        "tma": [{"param": "m", "tensor": "X", "dims": [64, "N"], "strides": [128], "box": [64, 64]}]})
    assert launch.target == "sm_90a" and launch.scalars == () and launch.requires == () and launch.readonly == ()
    assert launch.grid == ("cdiv(N, 64)", 1, 1) and launch.block == (128, 1, 1) and launch.dynamic_smem == 0
    assert launch.params[1] == PointerParam("X", "bf16", "X")
    t = launch.tma[0]
    assert (t.dtype, t.rank, t.elem_strides, t.swizzle, t.l2_promotion, t.oob_fill) == ("bf16", 2, (1, 1), 0, 128,
                                                                                        "zero")
    assert LaunchDescription.from_json(launch.to_json()) == launch


GOOD = {"kernel": "k", "tensors": [{"name": "X", "dtype": "f32", "dims": ["N"]}],
        "scalars": [{"name": "s", "dtype": "f32"}],
        "params": [{"name": "X", "kind": "pointer", "dtype": "f32", "tensor": "X"},
                   {"name": "N", "kind": "scalar", "dtype": "i32", "size": "N"},
                   {"name": "s", "kind": "scalar", "dtype": "f32", "scalar": "s"}],
        "grid": ["cdiv(N, 128)"], "block": [128], "requires": [{"expr": "N % 4", "equals": 0, "why": "rows"}],
        "aligned": [{"tensor": "X", "bytes": 16, "why": "vectors"}]}


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("kernel"), "launch description of '?': missing 'kernel'"),
    (lambda d: d.update(dynamic_shmem=0), "the description: unknown field 'dynamic_shmem'"),
    (lambda d: d["tensors"][0].pop("dims"), "tensors[0]: missing 'dims'"),
    (lambda d: d["tensors"][0].update(dims="N"), "tensors[0].dims is not a list: 'N'"),
    (lambda d: d["tensors"][0].update(dims=["N", 1.5]), "tensors[0].dims[1] is not a size expression or an int"),
    (lambda d: d["scalars"].append("t"), "scalars[1] is not an object: 't'"),
    (lambda d: d["params"][0].update(tensor=3), "params[0].tensor is not a string: 3"),
    (lambda d: d["params"][1].update(scalar="s"), "scalar param 'N' names both a size and a user scalar"),
    (lambda d: d["params"][0].update(shape=[1]), "params[0]: unknown field 'shape'"),
    (lambda d: d.update(block=["128"]), "block[0] is not an int: '128'"),
    (lambda d: d.update(grid=[1, 1, 1, 1]), "grid has 4 entries"),
    (lambda d: d.update(dynamic_smem=1.0), "dynamic_smem is not an int: 1.0"),
    (lambda d: d["requires"][0].update(equals="0"), "requires[0].equals is not an int: '0'"),
    (lambda d: d["aligned"][0].pop("bytes"), "aligned[0]: missing 'bytes'"),
    (lambda d: d.update(readonly=[1]), "readonly[0] is not a name: 1"),
    (lambda d: d.update(tma=[{"param": "m", "tensor": "Y"}]), "tma[0]: unknown tensor 'Y'"),
    (lambda d: d.update(cluster=[0]), "cluster [0, 1, 1] must be positive"),
])
def test_from_json_names_the_bad_field(edit, message: str) -> None:  # noqa: ANN001 (a lambda)
    data = json.loads(json.dumps(GOOD))
    LaunchDescription.from_json(data)
    edit(data)
    with pytest.raises(LaunchError, match=re.escape(message)):
        LaunchDescription.from_json(data)


def test_read_launch_takes_json_text_and_says_when_it_is_not() -> None:
    assert read_launch(json.dumps(GOOD)).kernel == "k"
    with pytest.raises(LaunchError, match="a launch description is JSON text"):
        read_launch("{'kernel': 'k'}")
    with pytest.raises(LaunchError, match="a launch description is a JSON object, not list"):
        read_launch("[]")


def test_the_runtime_maps_every_value_the_description_accepts() -> None:
    """The value sets of backend/launch.py are the keys of the runtime's driver tables."""
    from tkir.backend import launch, runtime
    from tkir.types import NUMPY_DTYPES

    assert set(launch.TENSOR_DTYPES) == set(NUMPY_DTYPES)
    assert set(launch.SCALAR_DTYPES) == set(runtime.SCALAR_CTYPES)
    assert set(launch.TMA_DTYPES) == set(runtime.TMA_DTYPES)
    assert set(launch.TMA_SWIZZLES) == set(runtime.TMA_SWIZZLES)
    assert set(launch.TMA_L2_PROMOTIONS) == set(runtime.TMA_L2_PROMOTIONS)
    assert set(launch.TMA_OOB_FILLS) == set(runtime.TMA_OOB_FILLS)
