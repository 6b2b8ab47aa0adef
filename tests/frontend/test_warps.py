"""`@warps(W)`: a block of W warps (ThunderKittens' warp-scope kernels, Triton's num_warps).

The front end records `warps = W` (a compile-time 1..32; 0 records nothing, and W >= 1 takes the place
of `@warpgroups`' consumers), infer-layouts keeps it on sm_90a for kernels without `@` (as it always did
on sm_80) and rewrites a multiple of 4 to `warpgroups = {consumers = W/4}` (the same PTX), a kernel with
`@` and W not a multiple of 4 is refused at the kernel on sm_90a (wgmma runs per warpgroup), and
cluster-rows splits the W warps. tests/filecheck/passes/infer-layouts-warps.tk checks the IR and PTX as text.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tkir
from tkir.api import build_module
from tkir.backend.toolchain import assemble
from tkir.diagnostics import CompileError
from tkir.facts import OccupancyPlan
from tkir.tools.examples import check_interpreted, load_companion

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ROW_KERNELS = ROOT / "tests" / "data" / "rows"  # the row kernels with every schedule knob (@warps(NW) among them)
ROW_NAMES = ("layernorm", "rmsnorm", "softmax")
TARGETS = ("sm_90a", "sm_80")

ROW = """\
@warps({ann})
kernel center<NW=2>(X: gl<bf16>[N, 768], Y: gl<bf16>[N, 768]) grid(N) {{
    reg x: rt<bf16, 1, 768> = X[block.x, 0]
    let xf = f32(x)
    Y[block.x, 0] = bf16(xf - row_sum(xf) / 768)
}}
"""


def _write(tmp_path: Path, text: str, name: str = "k.tk") -> str:
    f = tmp_path / name
    f.write_text(text, encoding="utf-8")
    return str(f)


# --- the front end ---------------------------------------------------------------------------------


def test_annotation_records_warps_and_zero_records_nothing(tmp_path: Path) -> None:
    assert build_module(_write(tmp_path, ROW.format(ann="NW"))).kernel.attrs["warps"] == 2
    assert build_module(_write(tmp_path, ROW.format(ann="NW")), {"NW": 0}).kernel.attrs.get("warps") is None
    assert build_module(_write(tmp_path, ROW.format(ann="32"))).kernel.attrs["warps"] == 32


def test_warps_takes_the_place_of_warpgroups_consumers(tmp_path: Path) -> None:
    """@warps(W >= 1) drops @warpgroups' consumers (a producers= count stays); @warps(0) leaves them."""
    both = _write(tmp_path, "@warpgroups(consumers=2, producers=0)\n" + ROW.format(ann="NW"))
    attrs = build_module(both).kernel.attrs
    assert attrs["warps"] == 2 and attrs["warpgroups"] == {"producers": 0}
    attrs = build_module(both, {"NW": 0}).kernel.attrs
    assert "warps" not in attrs and attrs["warpgroups"] == {"consumers": 2, "producers": 0}
    only = _write(tmp_path, "@warpgroups(consumers=2)\n" + ROW.format(ann="1"), "only.tk")
    attrs = build_module(only).kernel.attrs
    assert attrs["warps"] == 1 and "warpgroups" not in attrs


@pytest.mark.parametrize("ann, msg, col", [
    ("N", "bad argument to '@warps': expected a compile-time integer 0..32 (the block's warps; 0: @warpgroups "
          "decides), got a value known only at run time", 8),
    ("-1", "expected a compile-time integer 0..32", 8),
    ("33", "got 33", 8),
    ("NW * 16 + 1", "got 33", 16),   # a binary expression is located at its operator
    ("1.5", "got 1.5", 8),
    ("", "'@warps' takes one argument", 1),
    ("1, 2", "'@warps' takes one argument", 1),
    ("w=2", "'@warps' takes one argument", 1),
])
def test_bad_arguments_are_located_errors(tmp_path: Path, ann: str, msg: str, col: int) -> None:
    text = ROW.format(ann=ann)
    if not ann:
        text = text.replace("@warps()", "@warps")
    with pytest.raises(CompileError) as e:
        tkir.compile(_write(tmp_path, text))
    assert msg in e.value.message, e.value.format()
    assert (e.value.loc.line, e.value.loc.col) == (1, col)
    assert re.match(r".*k\.tk:1:\d+: error: ", e.value.format().splitlines()[0])


def test_only_on_the_kernel(tmp_path: Path) -> None:
    text = (EXAMPLES / "gemm.tk").read_text(encoding="utf-8").replace("@stages(STAGES)", "@warps(2)")
    with pytest.raises(CompileError, match="'@warps' applies to the kernel, not here"):
        tkir.compile(_write(tmp_path, text))


# --- the passes and the backend --------------------------------------------------------------------


def test_a_multiple_of_four_is_the_warpgroups_block(tmp_path: Path) -> None:
    """@warps(4 k) compiles to the PTX of @warpgroups(consumers=k), with and without `@`, on both targets
    (sm_80's `warps` was always 4 k for k consumer warpgroups)."""
    for ex, consts, wg in (("layernorm", {"D": 4096, "DC": 4096, "ROWS": 2}, 2), ("gemm", {}, 2)):
        base = EXAMPLES if ex == "gemm" else ROW_KERNELS
        src = (base / f"{ex}.tk").read_text(encoding="utf-8")
        if ex == "gemm":
            src = src.replace("@stream_k(SK, min_iters=SKI)", "@stream_k(SK, min_iters=SKI)\n@warps(8)")
        else:
            src = src.replace("@warps(NW)", f"@warps({4 * wg})")
        path = _write(tmp_path, src, f"{ex}.tk")
        for target in TARGETS:
            want = tkir.compile(str(base / f"{ex}.tk"), target=target, **consts,
                                **({"WG": wg} if ex != "gemm" else {})).asm["ptx"]
            assert tkir.compile(path, target=target, **consts).asm["ptx"] == want, (ex, target)


def test_matmul_kernel_with_a_partial_warpgroup_is_refused_on_sm90a_only(tmp_path: Path) -> None:
    src = (EXAMPLES / "gemm.tk").read_text(encoding="utf-8")
    path = _write(tmp_path, src.replace("@stream_k(SK, min_iters=SKI)", "@stream_k(SK, min_iters=SKI)\n@warps(2)"))
    with pytest.raises(CompileError, match=r"@warps\(2\): on sm_90a a kernel with '@' \(tile matmul\) runs wgmma") as e:
        tkir.compile(path, BM=64, BN=64).asm["ptx"]
    assert e.value.format().startswith(f"{path}:")
    k = tkir.compile(path, BM=64, BN=64, target="sm_80")  # mma.sync: warps are the unit
    assemble(k.asm["ptx"], "sm_80")


@pytest.mark.parametrize("kernel", ROW_NAMES)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("nw", [1, 2, 3])
def test_row_examples_on_one_to_three_warps(kernel: str, target: str, nw: int) -> None:
    """The row examples at ROWS = 1, 2 on 1-3 warps: ptxas assembles them on both targets, the block is
    32 NW threads, and the interpreter matches the reference at a ragged N."""
    path = str(ROW_KERNELS / f"{kernel}.tk")
    comp = load_companion(path)
    for rows in (1, 2):
        consts = {"D": 768, "DC": 1024, "ROWS": rows, "NW": nw}
        k = tkir.compile(path, target=target, **consts)
        assemble(k.asm["ptx"], target)
        assert re.search(rf"\.maxntid {32 * nw}\b", k.asm["ptx"])
        assert OccupancyPlan.of(k.module.kernel).threads == 32 * nw
        for r in check_interpreted(k.module, comp, {"N": 3}, k.consts, seed=nw):
            assert r.ok, (kernel, target, nw, rows, r)


def test_one_warp_reduces_without_a_barrier() -> None:
    """1 x 768 on one warp: the row reductions are shuffles only (no bar.sync, no shared memory)."""
    ptx = tkir.compile(str(ROW_KERNELS / "layernorm.tk"), D=768, DC=1024, ROWS=1, NW=1).asm["ptx"]
    assert "shfl.sync.bfly" in ptx
    assert "bar.sync" not in ptx and "st.shared" not in ptx


def test_too_many_registers_for_few_warps_is_a_located_error() -> None:
    with pytest.raises(CompileError, match="registers: .* per thread needed > 255 available") as e:
        tkir.compile(str(ROW_KERNELS / "layernorm.tk"), D=4096, DC=4096, ROWS=1, NW=1).asm["ptx"]
    assert e.value.format().startswith(str(ROW_KERNELS / "layernorm.tk") + ":")


def test_cluster_splits_the_warps(tmp_path: Path) -> None:
    """@cluster(2) over @warps(2): two CTAs of one warp; over @warps(3) a located error."""
    src = (ROW_KERNELS / "layernorm.tk").read_text(encoding="utf-8")
    k = tkir.compile(str(ROW_KERNELS / "layernorm.tk"), D=4096, DC=4096, ROWS=1, NW=2, CL=2)
    assert ".reqnctapercluster 2, 1, 1" in k.asm["ptx"] and re.search(r"\.maxntid 32\b", k.asm["ptx"])
    assert "layernorm" in src
    with pytest.raises(CompileError, match=r"needs the block's 3 warps to split into 2 CTAs"):
        tkir.compile(str(ROW_KERNELS / "layernorm.tk"), D=1024, DC=1024, ROWS=1, NW=3, CL=2).asm["ptx"]
