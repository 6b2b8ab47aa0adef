"""backend/runtime.py on the CPU: argument validation with fake CUDA Array Interface objects, the
tensor-map arguments computed from a launch description, and the launch-description checks.
Nothing here touches a GPU (validate() must not)."""

from __future__ import annotations

import copy
import ctypes
import dataclasses
import json
from typing import Any

import ml_dtypes
import numpy as np
import pytest

from tkir.backend import cuda as tkcuda
from tkir.backend import runtime
from tkir.backend.runtime import Kernel, LaunchError, TmaArgs
from tkir.passes.registry import DEFAULT_PIPELINE

GEMM_LAUNCH: dict[str, Any] = {
    "kernel": "gemm",
    "target": "sm_90a",
    "tensors": [{"name": "A", "dtype": "bf16", "dims": ["M", "K"]},
                {"name": "B", "dtype": "bf16", "dims": ["K", "N"]},
                {"name": "C", "dtype": "bf16", "dims": ["M", "N"]}],
    "scalars": [{"name": "alpha", "dtype": "f32"}],
    "params": [{"name": "A_tma", "kind": "tensor_map", "tma": 0},
               {"name": "B_tma", "kind": "tensor_map", "tma": 1},
               {"name": "C", "kind": "pointer", "dtype": "bf16", "tensor": "C"},
               {"name": "M", "kind": "scalar", "dtype": "i32", "size": "M"},
               {"name": "alpha", "kind": "scalar", "dtype": "f32", "scalar": "alpha"}],
    "grid": ["M / 128", "N / 256", "1"],
    "block": [384, 1, 1],
    "dynamic_smem": 197632,
    "requires": [{"expr": "M % 128", "equals": 0, "why": "M must be a multiple of BM=128"},
                 {"expr": "N % 256", "equals": 0, "why": "N must be a multiple of BN=256"},
                 {"expr": "K % 64", "equals": 0, "why": "K must be a multiple of BK=64"}],
    "tma": [{"param": "A_tma", "tensor": "A", "dtype": "bf16", "rank": 2, "dims": ["K", "M"],
             "strides": ["K * 2"], "box": [64, 128], "elem_strides": [1, 1], "swizzle": 128,
             "l2_promotion": 128, "oob_fill": "zero"},
            {"param": "B_tma", "tensor": "B", "dtype": "bf16", "rank": 2, "dims": ["N", "K"],
             "strides": ["N * 2"], "box": [64, 64], "elem_strides": [1, 1], "swizzle": 128,
             "l2_promotion": 256, "oob_fill": "nan"}],
}

FAKE_BASE = 0x7F00_0000_0000  # a made-up device address, 4 KB aligned


class FakeCAI:
    """An object exporting __cuda_array_interface__ v3 over an address that is never dereferenced."""

    def __init__(self, shape: tuple[int, ...], typestr: str = "<V2", ptr: int = FAKE_BASE,
                 strides: tuple[int, ...] | None = None, dtype: Any = None):
        self.__cuda_array_interface__ = {"shape": shape, "typestr": typestr, "data": (ptr, False),
                                         "strides": strides, "version": 3}
        if dtype is not None:
            self.dtype = np.dtype(dtype)


def bf16(*shape: int, **kw: Any) -> FakeCAI:
    return FakeCAI(tuple(shape), "<V2", **kw)


def gemm_args(M: int = 256, N: int = 512, K: int = 128) -> list[Any]:
    return [bf16(M, K), bf16(K, N, ptr=FAKE_BASE + 2**24), bf16(M, N, ptr=FAKE_BASE + 2**26), 1.0]


@pytest.fixture
def gemm() -> Kernel:
    return Kernel("// no PTX needed to validate", copy.deepcopy(GEMM_LAUNCH))


def test_validate_binds_sizes_grid_params(gemm: Kernel) -> None:
    b = gemm.validate(*gemm_args())
    assert b.sizes == {"M": 256, "K": 128, "N": 512}
    assert b.grid == (2, 2, 1) and b.block == (384, 1, 1) and b.dynamic_smem == 197632
    kinds = [k for k, _ in b.params]
    assert kinds == ["tensor_map", "tensor_map", "pointer", "i32", "f32"]
    assert b.params[2][1] == FAKE_BASE + 2**26 and b.params[3][1] == 256 and b.params[4][1] == 1.0
    assert b.tensors["A"].kind == "cuda_array_interface" and b.tensors["A"].dtype == "bf16"


def test_tensor_map_arguments_from_shapes(gemm: Kernel) -> None:
    b = gemm.validate(*gemm_args(M=384, N=256, K=192))
    a, bt = b.tma
    assert (a.param, a.tensor, a.address) == ("A_tma", "A", FAKE_BASE)
    assert a.dims == [192, 384] and a.strides == [384] and a.box == [64, 128] and a.rank == 2
    assert bt.dims == [256, 192] and bt.strides == [512] and bt.box == [64, 64]
    assert b.params[0][1] is a and b.params[1][1] is bt
    dtype, rank, address, dims, strides, box, elem, interleave, swizzle, l2, oob = runtime.encode_args(a)
    assert (dtype, rank, address, dims, strides, box, elem) == (9, 2, FAKE_BASE, [192, 384], [384], [64, 128],
                                                                [1, 1])
    assert (interleave, swizzle, l2, oob) == (0, 3, 2, 0)  # NONE, SWIZZLE_128B, L2_128B, FILL_NONE
    assert runtime.encode_args(bt)[8:] == (3, 3, 1)  # L2_256B, NAN_REQUEST_ZERO_FMA


@pytest.mark.parametrize(("dtype", "enum"), [("bf16", 9), ("f16", 6), ("f32", 7), ("i32", 3), ("e4m3", 0)])
def test_tensor_map_dtype_enum(dtype: str, enum: int) -> None:
    t = TmaArgs(param="p", tensor="X", dtype=dtype, address=0, dims=[64], strides=[], box=[16],
                elem_strides=[1], swizzle=0, l2_promotion=0, oob_fill="zero")
    assert runtime.encode_args(t)[0] == enum


def test_wrong_argument_count(gemm: Kernel) -> None:
    with pytest.raises(LaunchError, match=r"gemm takes 4 arguments \(A, B, C, alpha\), got 3"):
        gemm.validate(*gemm_args()[:3])


def test_wrong_dtype_names_argument(gemm: Kernel) -> None:
    args = gemm_args()
    args[1] = FakeCAI((128, 512), "<f4", ptr=FAKE_BASE)
    with pytest.raises(LaunchError, match=r"argument 'B' has dtype f32, expected bf16 \(gl<bf16>\[K, N\]\)"):
        gemm.validate(*args)


def test_f16_is_not_bf16(gemm: Kernel) -> None:
    args = gemm_args()
    args[0] = FakeCAI((256, 128), "<f2")
    with pytest.raises(LaunchError, match="argument 'A' has dtype f16, expected bf16"):
        gemm.validate(*args)


def test_dtype_attribute_disambiguates_void_typestr(gemm: Kernel) -> None:
    args = gemm_args()
    args[0] = FakeCAI((256, 128), "<V2", dtype=ml_dtypes.bfloat16)
    gemm.validate(*args)
    args[0] = FakeCAI((256, 128), "<V1", dtype=ml_dtypes.float8_e4m3fn)
    with pytest.raises(LaunchError, match="argument 'A' has dtype e4m3, expected bf16"):
        gemm.validate(*args)


def test_wrong_rank(gemm: Kernel) -> None:
    args = gemm_args()
    args[2] = bf16(256, 512, 1)
    with pytest.raises(LaunchError, match=r"argument 'C' has 3 dims \[256, 512, 1\], expected 2"):
        gemm.validate(*args)


def test_inconsistent_size_names_both_places(gemm: Kernel) -> None:
    args = gemm_args(M=256, N=512, K=128)
    args[1] = bf16(192, 512, ptr=FAKE_BASE + 2**24)
    message = r"argument 'B' dim 0 \(K\) is 192, but argument 'A' dim 1 gave K = 128"
    with pytest.raises(LaunchError, match=message):
        gemm.validate(*args)


def test_requirement_message_has_why_and_values(gemm: Kernel) -> None:
    message = r"M must be a multiple of BM=128 \(M % 128 is 72, must be 0; M = 200\)"
    with pytest.raises(LaunchError, match=message):
        gemm.validate(*gemm_args(M=200))


def test_fixed_and_expression_dims() -> None:
    launch = {"kernel": "rotary", "tensors": [{"name": "X", "dtype": "bf16", "dims": ["T", 128]},
                                              {"name": "Cos", "dtype": "bf16", "dims": ["T", "128 / 2"]}],
              "params": [{"name": "X", "kind": "pointer", "tensor": "X"},
                         {"name": "Cos", "kind": "pointer", "tensor": "Cos"}],
              "grid": ["cdiv(T, 16)"], "block": [128]}
    k = Kernel(b"", launch)
    b = k.validate(bf16(40, 128), bf16(40, 64, ptr=FAKE_BASE + 2**20))
    assert b.sizes == {"T": 40} and b.grid == (3, 1, 1) and b.block == (128, 1, 1)
    with pytest.raises(LaunchError, match=r"argument 'X' dim 1 is 64, expected 128 = 128"):
        k.validate(bf16(40, 64), bf16(40, 64))
    with pytest.raises(LaunchError, match=r"argument 'Cos' dim 1 is 128, expected 128 / 2 = 64"):
        k.validate(bf16(40, 128), bf16(40, 128))


def test_non_contiguous_rejected(gemm: Kernel) -> None:
    args = gemm_args()
    args[2] = bf16(256, 512, strides=(2, 512), ptr=FAKE_BASE + 2**26)  # a transposed view
    with pytest.raises(LaunchError, match=r"argument 'C' is not C-contiguous \(byte strides \[2, 512\]"):
        gemm.validate(*args)


def test_size_one_dims_may_have_any_stride(gemm: Kernel) -> None:
    launch = copy.deepcopy(GEMM_LAUNCH)
    launch["requires"] = []
    k = Kernel("", launch)
    args = gemm_args(M=1)
    args[0] = bf16(1, 128, strides=(12345, 2))
    args[2] = bf16(1, 512, strides=(0, 2), ptr=FAKE_BASE + 2**26)
    with pytest.raises(LaunchError, match="grid dim 0 = M / 128 = 0 is outside"):
        k.validate(*args)


def test_tma_tensor_alignment(gemm: Kernel) -> None:
    args = gemm_args()
    args[0] = bf16(256, 128, ptr=FAKE_BASE + 8)
    with pytest.raises(LaunchError, match="'A' is read by TMA, which needs a 16-byte aligned address"):
        gemm.validate(*args)
    args = gemm_args()
    args[2] = bf16(256, 512, ptr=FAKE_BASE + 2**26 + 2)  # C is a plain pointer: element alignment suffices
    gemm.validate(*args)
    args[2] = bf16(256, 512, ptr=FAKE_BASE + 2**26 + 1)
    with pytest.raises(LaunchError, match="argument 'C' address .* is not aligned to its 2-byte elements"):
        gemm.validate(*args)


def test_tensors_copied_in_16_byte_pieces_need_an_aligned_base() -> None:
    """The launch description's `aligned` list (tkir.requires.kernel_alignments): the sm_80 gemm copies A
    and B with cp.async (16-byte chunks), softmax reads and writes rows with 16-byte vector accesses. A
    contiguous view that starts one element into a buffer has the right element alignment and row pitch,
    and is still refused before the launch (the copy would fault on the misaligned address)."""
    import tkir

    k = tkir.compile("examples/gemm.tk", target="sm_80")
    assert {a.tensor for a in k.launch.aligned} == {"A", "B"}
    fake = Kernel("", k.launch)
    args = [bf16(256, 128), bf16(128, 512, ptr=FAKE_BASE + 2**24), bf16(256, 512, ptr=FAKE_BASE + 2**26)]
    fake.validate(*args)
    args[0] = bf16(256, 128, ptr=FAKE_BASE + 2)
    with pytest.raises(LaunchError, match="argument 'A' is copied to shared memory in 16-byte cp.async chunks, "
                                          "which needs a 16-byte aligned address"):
        fake.validate(*args)
    args[0] = bf16(256, 128)
    args[2] = bf16(256, 512, ptr=FAKE_BASE + 2**26 + 2)  # C: stored from registers element by element
    fake.validate(*args)
    sm = tkir.compile("tests/data/rows/softmax.tk")
    assert [a.tensor for a in sm.launch.aligned] == ["X", "Y"]
    # with sm_80 producer warps (asked for: the automatic choice keeps one role) the producers copy A and B
    # with cp.async `pipe.copy`s, not pipeline-cp-async's `pipe.async_copy`: the same 16-byte requirement
    pw = ",".join("plan-occupancy{producer_warps=4}" if p == "plan-occupancy" else p for p in DEFAULT_PIPELINE)
    prod = tkir.compile("examples/gemm.tk", target="sm_80", passes=pw)
    assert "pipe.copy" in prod.ir and "cp_async = true" in prod.ir and "pipe.async_copy" not in prod.ir
    assert {a.tensor for a in prod.launch.aligned} == {"A", "B"}


def test_rows_copied_in_4_and_8_byte_pieces_need_that_alignment(tmp_path: Any) -> None:
    """A `row` tile whose lane chunks are 8 bytes (1 x 2048 bf16 over 16 warps: 4 elements a
    lane) or 4 bytes (1 x 768 over 4 warps: 2 a lane) is copied with ld/st.global.v2.b32 / .b32. The
    launch asks for rows and bases aligned to that piece, no more: a view 8 bytes into a buffer runs the
    8-byte kernel, 2 bytes in is refused, and the 4-byte kernel takes a view 4 bytes in. (The
    loads carry an L2 hint, passes/cache_policy.py; 8 bytes of bf16 load as .v4.b16.)"""
    import re

    import tkir

    for cols, warps, piece, ptx in ((2048, 4, 8, r"ld\.global\.nc\.L2::cache_hint\.v4\.b16 "),
                                    (768, 1, 4, r"ld\.global\.nc\.L2::cache_hint\.b32 ")):
        src = tmp_path / f"copy{cols}.tk"
        src.write_text(f"@warpgroups(consumers={warps})\n"
                       f"kernel rowcopy(X: gl<bf16>[N, D], Y: gl<bf16>[N, D])\n    grid(N, D / {cols})\n{{\n"
                       f"    reg x: rt<bf16, 1, {cols}> = X[block.x, block.y]\n    Y[block.x, block.y] = x\n}}\n")
        k = tkir.compile(str(src))
        assert re.search(ptx, k.asm["ptx"]) and ".v4.b32" not in k.asm["ptx"]
        assert "st.global.v4.b32" not in k.asm["ptx"]
        assert {a.tensor: a.bytes for a in k.launch.aligned} == {"X": piece, "Y": piece}
        assert (f"(D * 2) % {piece}", 0) in [(r.expr, r.equals) for r in k.launch.requires]
        fake = Kernel("", k.launch)
        fake.validate(bf16(4, 4 * cols, ptr=FAKE_BASE + piece), bf16(4, 4 * cols, ptr=FAKE_BASE + 2**24))
        with pytest.raises(LaunchError, match=f"argument 'X' is copied to or from registers in {piece}-byte "
                                              f"vector accesses, which needs a {piece}-byte aligned address"):
            fake.validate(bf16(4, 4 * cols, ptr=FAKE_BASE + 2), bf16(4, 4 * cols, ptr=FAKE_BASE + 2**24))


def test_tma_row_stride_multiple_of_16() -> None:
    launch = copy.deepcopy(GEMM_LAUNCH)
    launch["requires"] = []
    k = Kernel("", launch)
    with pytest.raises(LaunchError, match="argument 'A' is read by TMA, which needs row strides"):
        k.validate(*gemm_args(M=256, N=512, K=100))


def test_tma_map_wider_than_tensor_is_rejected() -> None:
    launch = copy.deepcopy(GEMM_LAUNCH)
    launch["tma"][0]["dims"] = ["K", "M * 2"]  # a compiler bug: the map would read past A's end
    k = Kernel("", launch)
    with pytest.raises(LaunchError, match=r"tensor map 'A_tma' of argument 'A': the map spans \d+ bytes"):
        k.validate(*gemm_args())


def test_host_memory_rejected(gemm: Kernel) -> None:
    args = gemm_args()
    args[0] = np.zeros((256, 128), ml_dtypes.bfloat16)
    with pytest.raises(LaunchError, match="argument 'A' is a host array .*tkir.backend.cuda.to_device"):
        gemm.validate(*args)


class FakeDLPack:
    def __init__(self, device_type: int):
        self.device_type = device_type

    def __dlpack__(self, stream: Any = None) -> Any:
        raise AssertionError("validate must not export a host DLPack tensor")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device_type, 0)


def test_host_dlpack_rejected(gemm: Kernel) -> None:
    args = gemm_args()
    args[1] = FakeDLPack(1)  # kDLCPU
    with pytest.raises(LaunchError, match=r"argument 'B' is not in GPU memory \(DLPack device type 1\)"):
        gemm.validate(*args)


def test_not_a_tensor(gemm: Kernel) -> None:
    args = gemm_args()
    args[0] = [[1.0]]
    with pytest.raises(LaunchError, match="argument 'A' must be a GPU tensor .* not list"):
        gemm.validate(*args)


@pytest.mark.parametrize(("value", "message"), [
    ("1.0", "scalar 'alpha' must be a Python float, not str"),
    (True, "scalar 'alpha' must be a Python float, not bool"),
    (None, "scalar 'alpha' must be a Python float, not NoneType"),
])
def test_scalar_types(gemm: Kernel, value: Any, message: str) -> None:
    args = gemm_args()
    args[3] = value
    with pytest.raises(LaunchError, match=message):
        gemm.validate(*args)


def test_int_scalars_checked_for_type_and_range() -> None:
    launch = {"kernel": "k", "scalars": [{"name": "n", "dtype": "i32"}],
              "params": [{"name": "n", "kind": "scalar", "dtype": "i32", "scalar": "n"}],
              "grid": [1], "block": [32]}
    k = Kernel("", launch)
    assert k.validate(np.int32(7)).params == [("i32", 7)]
    with pytest.raises(LaunchError, match=r"scalar 'n' must be an int \(i32\), not float"):
        k.validate(7.0)
    with pytest.raises(LaunchError, match="scalar 'n' = 2147483648 does not fit i32"):
        k.validate(2**31)


def test_f32_scalar_accepts_int(gemm: Kernel) -> None:
    args = gemm_args()
    args[3] = 2
    assert gemm.validate(*args).params[4] == ("f32", 2.0)


@pytest.mark.parametrize(("edit", "message"), [
    (lambda d: d.pop("grid"), "missing 'grid'"),
    (lambda d: d["params"].append({"name": "X", "kind": "pointer", "tensor": "X"}), "unknown tensor 'X'"),
    (lambda d: d["params"].append({"name": "t", "kind": "tensor_map", "tma": 5}), "tma entry 5"),
    (lambda d: d["params"].append({"name": "q", "kind": "blob"}), "unknown kind 'blob'"),
    (lambda d: d["tma"][0].update(swizzle=96), "swizzle 96"),
    (lambda d: d["tma"][0].update(box=[128, 128]), "wider than the 128B swizzle span"),
    (lambda d: d["tma"][0].update(box=[4, 128], swizzle=0), "not a multiple of 16 bytes"),
    (lambda d: d["tma"][0].update(box=[64, 512]), "entries must be 1..256"),
    (lambda d: d["tma"][0].update(strides=[]), "has 1 strides, not 0"),
    (lambda d: d["tma"][0].update(dtype="f32"), "differs from tensor 'A'"),
    (lambda d: d.update(block=[2048]), "is not 1..1024 threads"),
    (lambda d: d["tensors"][0].pop("name"), r"tensors\[0\]: missing 'name'"),
    (lambda d: d["tma"][0].update(box=None), r"tma\[0\].box is not a list: None"),
    # issue 14: checked when the description is read, not at bind time or by the driver
    (lambda d: d.update(grid=["cdiv(M, 128"]), "grid dim 0: bad size expression"),
    (lambda d: d.update(grid=["cdiv(Q, 128)"]), r"grid dim 0 \(cdiv\(Q, 128\)\) uses Q"),
    (lambda d: d.update(grid=[1, 65536]), "grid dim 1 is 65536 blocks, not 1..65535"),
    (lambda d: d.update(grid=["2**31"]), "unsupported size expression"),
    (lambda d: d.update(grid=[0]), "grid dim 0 is 0 blocks"),
    (lambda d: d.update(dynamic_smem=300_000), "dynamic_smem 300000 is not 0..232448 bytes"),
    (lambda d: d.update(aligned=[{"tensor": "Z", "bytes": 16}]), "aligned entry .* names no tensor"),
    (lambda d: d.update(aligned=[{"tensor": "C", "bytes": 12}]), "needs 'bytes', a power of two"),
    (lambda d: d.update(aligned=["C"]), r"aligned\[0\] is not an object: 'C'"),
])
def test_bad_launch_descriptions(edit: Any, message: str) -> None:
    launch = copy.deepcopy(GEMM_LAUNCH)
    edit(launch)
    with pytest.raises(LaunchError, match=message):
        Kernel("", launch)


def test_launch_json_text_accepted() -> None:
    k = Kernel("", json.dumps(GEMM_LAUNCH))
    assert k.name == "gemm" and k.validate(*gemm_args()).grid == (2, 2, 1)


def test_aligned_tensor_map_buffer() -> None:
    maps = [runtime.aligned_tensor_map() for _ in range(8)]
    for m in maps:
        assert ctypes.addressof(m) % runtime.TENSOR_MAP_ALIGN == 0
        assert ctypes.sizeof(m) == 128 and isinstance(m, ctypes.Structure)
        assert list(m.opaque) == [0] * 16


def test_stream_handles() -> None:
    class TorchStream:
        cuda_stream = 0x1234

    class ProtocolStream:
        def __cuda_stream__(self) -> tuple[int, int]:
            return (0, 0x5678)

    assert runtime._stream_handle(None) == 0 and runtime._stream_handle(7) == 7
    assert runtime._stream_handle(TorchStream()) == 0x1234
    assert runtime._stream_handle(ProtocolStream()) == 0x5678
    with pytest.raises(LaunchError, match="stream must be"):
        runtime._stream_handle("default")


def test_device_array_dtypes_without_gpu() -> None:
    assert tkcuda.numpy_dtype("bf16") == np.dtype(ml_dtypes.bfloat16)
    assert tkcuda.numpy_dtype("e5m2").str == "|f1" or tkcuda.numpy_dtype("e5m2").str == "<f1"
    assert tkcuda.numpy_dtype(np.float32) == np.dtype(np.float32)
    with pytest.raises(TypeError, match="unknown dtype 'bf17'"):
        tkcuda.numpy_dtype("bf17")
    empty = tkcuda.DeviceArray((0, 16), "bf16")  # zero bytes: no allocation, so no GPU needed
    cai = empty.__cuda_array_interface__
    assert cai["version"] == 3 and cai["typestr"] == "<V2" and cai["shape"] == (0, 16)
    assert runtime.describe_array(empty, "x").dtype == "bf16"
    assert empty.numpy().shape == (0, 16)


# --- backend/cache.py -----------------------------------------------------------------------------

VERSIONS = {"tkir": "0.1.0", "llvmlite": "0.50.0", "ptxas": "release 13.0"}


@pytest.fixture
def cache_env(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("TKIR_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TKIR_CACHE", raising=False)
    return tmp_path / "cache"


def _key(**over: Any) -> str:
    from tkir.backend import cache
    from tkir.passmanager import Options

    args: dict[str, Any] = {"source": "kernel k() grid(1) {}", "consts": {"BM": 128, "BN": 256},
                            "options": Options(), "target": "sm_90a", "versions": VERSIONS}
    args.update(over)
    return cache.make_key(**args)


def test_cache_key_depends_on_every_input() -> None:
    from tkir.passmanager import Options

    base = _key()
    assert len(base) == 64 and base == _key(consts={"BN": 256, "BM": 128})  # order of consts is irrelevant
    variants = [_key(source="kernel k() grid(2) {}"), _key(consts={"BM": 64, "BN": 256}),
                _key(options=Options(no_tma=True)), _key(target="sm_80"),
                _key(versions={**VERSIONS, "ptxas": "release 13.5"}),
                _key(versions={**VERSIONS, "llvmlite": "0.51.0"}),
                _key(versions={**VERSIONS, "tkir": "0.2.0"})]
    assert len({base, *variants}) == len(variants) + 1


def test_cache_key_includes_real_tool_versions() -> None:
    from tkir.backend import cache

    versions = cache.tool_versions()
    assert set(versions) == {"tkir", "llvmlite", "ptxas"} and "release" in versions["ptxas"]


def test_cache_round_trip_with_bytes(cache_env: Any) -> None:
    from tkir.backend import cache

    key = _key()
    assert cache.get(key) is None
    art = {"ptx": ".version 8.0\n", "launch": {"kernel": "k", "params": [], "grid": [1], "block": [32]},
           "sass": "EXIT ;",
           "cubin": b"\x7fELF\x00\x01\xff"}
    cache.put(key, art)
    assert cache.get(key) == art
    assert [p.name for p in cache_env.iterdir()] == [f"{key}.json"]  # no temporary files left behind


def test_cache_corrupt_entry_is_ignored_and_rewritten(cache_env: Any) -> None:
    from tkir.backend import cache

    key = _key()
    cache.put(key, {"ptx": "good"})
    path = cache_env / f"{key}.json"
    bad_art = {"cubin": {"__base64__": "!!"}}
    bad_base64 = json.dumps({"format": cache.FORMAT, "key": key, "sha256": cache.content_hash(bad_art),
                             "artifacts": bad_art})
    wrong_key = json.dumps({"format": cache.FORMAT, "key": "other", "sha256": cache.content_hash({}),
                            "artifacts": {}})
    for junk in ['{"format": 2, "key": "', "[]", wrong_key, bad_base64, ""]:
        path.write_text(junk)
        with pytest.warns(cache.CacheWarning, match="ignoring"):
            assert cache.get(key) is None
    path.write_bytes(b"\xff\xfe binary garbage")
    with pytest.warns(cache.CacheWarning, match="unreadable"):
        assert cache.get(key) is None
    cache.put(key, {"ptx": "rewritten"})
    assert cache.get(key) == {"ptx": "rewritten"}


def test_cache_disabled(cache_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from tkir.backend import cache

    monkeypatch.setenv("TKIR_CACHE", "0")
    cache.put(_key(), {"ptx": "x"})
    assert not cache_env.exists() and cache.get(_key()) is None


def test_cache_write_is_atomic(cache_env: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write that fails midway leaves the previous entry intact and no temporary file behind."""
    from tkir.backend import cache

    key = _key()
    cache.put(key, {"ptx": "old"})

    def failing_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(cache.os, "replace", failing_replace)
    with pytest.warns(UserWarning, match="disk full"):
        cache.put(key, {"ptx": "new"})
    assert cache.get(key) == {"ptx": "old"}
    assert [p.name for p in cache_env.iterdir()] == [f"{key}.json"]


def test_cache_default_location(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from tkir.backend import cache

    monkeypatch.delenv("TKIR_CACHE_DIR", raising=False)
    assert cache.cache_dir() == Path.home() / ".cache" / "tkir"


def test_cache_rejects_non_hex_keys(cache_env: Any) -> None:
    from tkir.backend import cache

    with pytest.raises(ValueError, match="hex digest"):
        cache.get("../../etc/passwd")


def test_missing_driver_is_a_clear_cuda_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_driver(flags: int) -> Any:
        raise RuntimeError('"cuda" is an NVIDIA driver library and can only be found via system search')

    monkeypatch.setattr(tkcuda.cu, "cuInit", no_driver)
    tkcuda._driver.cache_clear()
    tkcuda._primary_context.cache_clear()
    try:
        with pytest.raises(tkcuda.CudaError, match="the CUDA driver is not available"):
            Kernel(".version 8.0", copy.deepcopy(GEMM_LAUNCH))(*gemm_args())
    finally:
        tkcuda._driver.cache_clear()
        tkcuda._primary_context.cache_clear()


def test_image_kind_detection() -> None:
    assert runtime._looks_like_ptx(b"//\n// Generated by LLVM NVPTX Back-End\n.version 8.0\n.target sm_90a\n")
    assert not runtime._looks_like_ptx(b"\x7fELF\x02\x01.version")
    assert not runtime._looks_like_ptx(b"\x50\xed\x55\xba fatbin")


def test_wrong_arguments_are_reported_before_the_driver_is_needed() -> None:
    """k(...) with a wrong argument count or host arrays says so even where no CUDA driver exists
    (it used to report the missing driver first; issue 14)."""
    import tkir

    k = tkir.compile("examples/softmax.tk")
    x = np.zeros((16, 1024), np.float32)
    with pytest.raises(LaunchError, match=r"softmax takes 2 arguments \(X, Y\), got 1"):
        k(x)
    with pytest.raises(LaunchError, match="argument 'X' is a host array"):
        k(x, x)


def test_a_tensor_read_through_the_readonly_path_may_not_overlap_another_argument() -> None:
    """readonly-loads: layernorm reads X, W and Bias with ld.global.nc, so the launch lists
    them under `readonly` and bind refuses a call where Y shares a byte with any of them (in place, or a
    view one row in), before anything reaches the GPU; Y right after X is fine, and so are two read-only
    tensors on the same memory (W is Bias). The launch description itself must name real tensors."""
    import tkir

    k = tkir.compile("tests/data/rows/layernorm.tk")
    assert k.launch.readonly == ("X", "W", "Bias")
    fake = Kernel("", k.launch)
    n, d = 64, 1024
    x, w, b = bf16(n, d), bf16(d, ptr=FAKE_BASE + 2**24), bf16(d, ptr=FAKE_BASE + 2**25)
    row = d * 2
    with pytest.raises(LaunchError, match="argument 'Y' overlaps 'X', which the kernel only reads"):
        fake.validate(x, w, b, bf16(n, d))                                  # in place
    with pytest.raises(LaunchError, match="argument 'Y' overlaps 'X'"):
        fake.validate(x, w, b, bf16(n, d, ptr=FAKE_BASE + row))            # one row in
    with pytest.raises(LaunchError, match="argument 'Y' overlaps 'Bias'"):
        fake.validate(x, w, b, bf16(n, d, ptr=FAKE_BASE + 2**25 - row))    # ends inside Bias
    fake.validate(x, w, b, bf16(n, d, ptr=FAKE_BASE + n * row))            # right after X
    fake.validate(x, w, w, bf16(n, d, ptr=FAKE_BASE + 2**26))               # W is Bias: both read only
    bad = dict(k.launch.to_json(), readonly=["Z"])
    with pytest.raises(LaunchError, match="readonly"):
        Kernel("", bad)
    with pytest.raises(LaunchError, match="readonly"):  # a typed description is checked too
        Kernel("", dataclasses.replace(k.launch, readonly=("Z",)))
