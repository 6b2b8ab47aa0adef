"""tkir kernels as torch ops on the GPU (tkir.torch, docs/torch.md): two ops called from a function
compiled with torch.compile(fullgraph=True) (no graph break, the eager result), the out variant, a
forward/backward pair through tkir.torch.autograd against torch's autograd, and a CUDA graph of two
tkir launches replayed on new inputs (and a first launch during a capture refused)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tkir.torch as tt
from tkir.backend.launch import LaunchError

ROOT = Path(__file__).resolve().parents[2]
SOFTMAX, RMSNORM = str(ROOT / "examples/softmax.tk"), str(ROOT / "examples/rmsnorm.tk")
MUL_FWD, MUL_BWD = str(ROOT / "tests/data/mul_fwd.tk"), str(ROOT / "tests/data/mul_bwd.tk")
N, D = 256, 1024  # rows (a multiple of the examples' ROWS = 16) and the examples' default row length D
EPS = 1e-6  # rmsnorm.tk's epsilon
BF16_TOL = 2e-2  # bf16 outputs (the examples' companions' TOLERANCE)

pytestmark = pytest.mark.gpu


def _ops() -> tuple[tt.TkirOp, tt.TkirOp]:
    return tt.op(SOFTMAX, outputs=["Y"]), tt.op(RMSNORM, outputs=["Y"])


def _reference(torch, x, w):  # noqa: ANN001, ANN202
    y = torch.softmax(x.float(), dim=1).to(torch.bfloat16).float()
    return y * torch.rsqrt((y * y).mean(dim=1, keepdim=True) + EPS) * w.float()


def test_two_ops_under_torch_compile_fullgraph(torch_module) -> None:  # noqa: ANN001
    torch = torch_module
    from torch import _dynamo as dynamo
    from torch._dynamo.utils import counters

    softmax, rmsnorm = _ops()

    def block(x, w):  # noqa: ANN001, ANN202
        return rmsnorm(softmax(x), w) * 2

    gen = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(N, D, device="cuda", dtype=torch.bfloat16, generator=gen)
    w = torch.randn(D, device="cuda", dtype=torch.bfloat16, generator=gen)
    eager = block(x, w)
    torch.cuda.synchronize()
    torch.testing.assert_close(eager.float(), 2 * _reference(torch, x, w), atol=4 * BF16_TOL, rtol=BF16_TOL)

    dynamo.reset()
    explained = dynamo.explain(block)(x, w)
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1
    dynamo.reset()
    counters.clear()
    compiled = torch.compile(block, fullgraph=True)
    got = compiled(x, w)
    x2 = torch.randn(2 * N, D, device="cuda", dtype=torch.bfloat16, generator=gen)  # another N: a new trace
    got2 = compiled(x2, w)
    torch.cuda.synchronize()
    assert sum(counters["graph_break"].values()) == 0, dict(counters["graph_break"])
    torch.testing.assert_close(got, eager, atol=0, rtol=0)
    torch.testing.assert_close(got2, block(x2, w), atol=0, rtol=0)

    # the out variant, compiled too: the outputs passed in are written and returned
    def into(x, w, y):  # noqa: ANN001, ANN202
        return rmsnorm.out(softmax(x), w, y)

    y = torch.full_like(x, float("nan"))
    back = torch.compile(into, fullgraph=True)(x, w, y)
    torch.cuda.synchronize()
    torch.testing.assert_close(y * 2, eager, atol=0, rtol=0)
    torch.testing.assert_close(back, y, atol=0, rtol=0)


def test_wrong_arguments_are_refused_before_launch(torch_module) -> None:  # noqa: ANN001
    torch = torch_module
    softmax, rmsnorm = _ops()
    with pytest.raises(LaunchError, match="dtype f32, expected bf16"):
        softmax(torch.zeros(N, D, device="cuda"))
    with pytest.raises(tt.TorchOpError, match="dim 1 is 512, expected 1024"):
        softmax(torch.zeros(N, 512, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(tt.TorchOpError, match="argument 'W' dim 0 is 1000, expected 1024"):
        rmsnorm(torch.zeros(N, D, device="cuda", dtype=torch.bfloat16), torch.zeros(1000, device="cuda",
                                                                                     dtype=torch.bfloat16))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_autograd_pair_matches_torch_autograd(torch_module, compiled: bool) -> None:  # noqa: ANN001
    torch = torch_module
    mul = tt.autograd(tt.op(MUL_FWD, outputs=["Y"]), tt.op(MUL_BWD, outputs=["DX", "DW"]))

    def loss(x, w, g):  # noqa: ANN001, ANN202
        return (mul.apply(x, w) * g).sum()

    def reference(x, w, g):  # noqa: ANN001, ANN202
        return (x * w * g).sum()

    gen = torch.Generator(device="cuda").manual_seed(1)
    shape = (64, 256)  # mul_fwd.tk's D = 256, rows a multiple of ROWS = 16
    x0, w0, g = (torch.randn(shape, device="cuda", generator=gen) for _ in range(3))
    fn = torch.compile(loss, fullgraph=True) if compiled else loss
    x, w = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    fn(x, w, g).backward()
    xr, wr = x0.clone().requires_grad_(), w0.clone().requires_grad_()
    reference(xr, wr, g).backward()
    torch.cuda.synchronize()
    torch.testing.assert_close(x.grad, xr.grad)  # f32 products: equal up to rounding
    torch.testing.assert_close(w.grad, wr.grad)
    torch.testing.assert_close(mul.apply(x0, w0), x0 * w0)


def test_cuda_graph_replays_two_launches_on_new_inputs(torch_module) -> None:  # noqa: ANN001
    torch = torch_module
    softmax, rmsnorm = _ops()
    gen = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(N, D, device="cuda", dtype=torch.bfloat16, generator=gen)  # the graph's static inputs
    w = torch.randn(D, device="cuda", dtype=torch.bfloat16, generator=gen)
    side = torch.cuda.Stream()  # warm-up on a side stream, as torch.cuda.graph asks: loads the modules
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            rmsnorm(softmax(x), w)
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = rmsnorm(softmax(x), w)  # outputs from the graph's memory pool: new addresses, same signature
    for step in range(3):
        new_x = torch.randn(N, D, device="cuda", dtype=torch.bfloat16, generator=gen)
        new_w = torch.randn(D, device="cuda", dtype=torch.bfloat16, generator=gen)
        x.copy_(new_x)
        w.copy_(new_w)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), _reference(torch, new_x, new_w), atol=2 * BF16_TOL, rtol=BF16_TOL,
                                   msg=lambda m, step=step: f"replay {step}: {m}")


def test_first_launch_during_capture_is_refused(torch_module) -> None:  # noqa: ANN001
    torch = torch_module
    softmax, _ = _ops()
    fresh = tt.op(MUL_FWD, outputs=["Y"], name="mul_fwd_rows8", ROWS=8)  # its module is not loaded yet
    a = torch.randn(64, 256, device="cuda")
    x = torch.randn(N, D, device="cuda", dtype=torch.bfloat16)
    softmax(x)  # warm-up
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    refused = None
    with torch.cuda.graph(graph):
        try:
            fresh(a, a)
        except LaunchError as e:
            refused = e
        y = softmax(x)  # the capture is intact: this launch is captured and replays
    assert refused is not None and "before the capture" in str(refused)
    y.zero_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, torch.softmax(x.float(), dim=1).to(torch.bfloat16), atol=BF16_TOL, rtol=BF16_TOL)
    torch.testing.assert_close(fresh(a, a), a * a)  # and after the capture it launches as usual


ROW_BWD = {name: str(ROOT / f"examples/{name}.tk") for name in
           ("softmax_bwd", "rmsnorm_bwd", "layernorm_bwd", "layernorm", "col_sum")}


def _row_functions() -> dict[str, type]:
    """softmax, rmsnorm and layernorm as autograd Functions of tkir ops: softmax's backward is one op wired
    by names; the norms' are a tkir.torch.backward of two (the row kernel's partial sums, then col_sum)."""
    softmax, rmsnorm = _ops()
    col_sum = tt.op(ROW_BWD["col_sum"], outputs=["SUM"])
    rms_bwd = tt.op(ROW_BWD["rmsnorm_bwd"], outputs=["DX", "DWP"])
    ln_bwd = tt.op(ROW_BWD["layernorm_bwd"], outputs=["DX", "DWBP"])

    @tt.backward(inputs=["X", "W", "DY"], outputs=["DX", "DW"])
    def rmsnorm_backward(x, w, dy):  # noqa: ANN001, ANN202
        dx, part = rms_bwd(x, w, dy)
        return dx, col_sum(part)

    @tt.backward(inputs=["X", "W", "DY"], outputs=["DX", "DW", "DBias"])
    def layernorm_backward(x, w, dy):  # noqa: ANN001, ANN202
        dx, part = ln_bwd(x, w, dy)
        sums = col_sum(part)  # DW and DBias, one launch: [0, D) and [D, 2 D)
        return dx, sums[:D], sums[D:]

    return {"softmax": tt.autograd(softmax, tt.op(ROW_BWD["softmax_bwd"], outputs=["DX"])),
            "rmsnorm": tt.autograd(rmsnorm, rmsnorm_backward),
            "layernorm": tt.autograd(tt.op(ROW_BWD["layernorm"], outputs=["Y"]), layernorm_backward)}


@pytest.mark.parametrize("n", [1, 1000])  # 1000: a ragged last block of every kernel's rows
@pytest.mark.parametrize("name", ["softmax", "rmsnorm", "layernorm"])
def test_row_autograd_matches_torch(torch_module, name: str, n: int) -> None:  # noqa: ANN001
    torch = torch_module
    import torch.nn.functional as F

    fn = _row_functions()[name]
    gen = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn(n, D, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_()
    w = (1 + 0.1 * torch.randn(D, device="cuda", generator=gen)).to(torch.bfloat16).requires_grad_()
    b = torch.randn(D, device="cuda", generator=gen).to(torch.bfloat16).requires_grad_()
    dy = torch.randn(n, D, device="cuda", generator=gen).to(torch.bfloat16)
    args = {"softmax": (x,), "rmsnorm": (x, w), "layernorm": (x, w, b)}[name]
    ref_args = [a.detach().float().requires_grad_() for a in args]
    ref = {"softmax": lambda a: torch.softmax(a[0], dim=1),
           "rmsnorm": lambda a: F.rms_norm(a[0], (D,), a[1], eps=EPS),
           "layernorm": lambda a: F.layer_norm(a[0], (D,), a[1], a[2], eps=1e-5)}[name](ref_args)
    want = torch.autograd.grad(ref, ref_args, dy.float())
    got = torch.autograd.grad(fn.apply(*args), args, dy)
    for i, (g, r) in enumerate(zip(got, want, strict=True)):
        err = float((g.float() - r).norm() / r.norm())
        # bf16 gradients from bf16 inputs against f32 autograd: rounding of dx (2^-9) and of the summed
        # weight gradient (2^-9), with f32 math in between
        assert err < BF16_TOL, f"{name} N = {n}: gradient {i} relative error {err:.3e}"
