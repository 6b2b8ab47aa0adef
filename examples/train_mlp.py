"""A transformer MLP block built from tkir ops, trained beside the same block in eager torch.

    out = x + W2 silu(W1 rmsnorm(x; g) + b1) + b2            (bf16 activations, f32 master weights)

Forward: rmsnorm.tk, linear.tk with SiLU (ACT=2), linear.tk. Backward, all tkir kernels:
linear_wgrad.tk (DW2, DB2), linear_dgrad.tk with the SiLU derivative in its epilogue (dZ1 =
(dOut @ W2) * silu'(Z1), Z1 recomputed by linear.tk without the activation), linear_wgrad.tk (DW1, DB1),
linear_dgrad.tk (dH), rmsnorm_bwd.tk and col_sum.tk (dX, dg); the residual's adds are torch's.
`rmsnorm` is wired with tkir.torch.autograd and a tkir.torch.backward of two kernels; the two linears
with SiLU between them are one torch.autograd.Function (the SiLU derivative crosses the two layers).

Run on a GPU (docs/torch.md):

    python3 examples/train_mlp.py --steps 300 --json loss.json --plot loss.png

trains the block from one seed five ways, each on the same batches: eager torch in f32 (the reference
for "bf16 noise"), eager torch in bf16, and the tkir block eagerly, under torch.compile(fullgraph=True)
and replayed as CUDA graphs (torch.cuda.make_graphed_callables); it prints the losses every 50 steps
and the largest relative difference of each curve from eager bf16's, against the bf16 noise (eager bf16
against f32). tests/gpu/test_train_mlp.py runs the same at fewer steps.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
EPS = 1e-6  # rmsnorm.tk's epsilon (torch.nn.RMSNorm(eps=1e-6))
MODES = ("f32", "eager", "tkir", "tkir_compile", "tkir_graph")


@dataclass
class Shape:
    tokens: int = 4096  # rows of x per step
    dim: int = 1024  # D: rmsnorm.tk's default width
    hidden: int = 2816  # F: the up projection's width (about 2.75 D, as Llama's)


@dataclass
class Curves:
    steps: int
    shape: Shape
    losses: dict[str, list[float]] = field(default_factory=dict)

    def rel_diff(self, mode: str, base: str = "eager") -> float:
        """The largest |loss(mode) - loss(base)| / loss(base) over the steps."""
        return max(abs(a - b) / b for a, b in zip(self.losses[mode], self.losses[base], strict=True))

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "shape": vars(self.shape), "losses": self.losses,
                "rel_diff_from_eager_bf16": {m: self.rel_diff(m) for m in self.losses if m != "eager"}}


class TkirOps:
    """The tkir ops of the block for one (dim, hidden), registered once per process."""

    def __init__(self, shape: Shape):
        import tkir.torch as tt

        d = shape.dim
        self.rmsnorm = tt.op(HERE / "rmsnorm.tk", outputs=["Y"], D=d)
        self.rmsnorm_bwd = tt.op(HERE / "rmsnorm_bwd.tk", outputs=["DX", "DWP"], D=d)
        self.col_sum = tt.op(HERE / "col_sum.tk", outputs=["SUM"])
        self.up = tt.op(HERE / "linear.tk", outputs=["Y"], ACT=2)  # SiLU
        self.linear = tt.op(HERE / "linear.tk", outputs=["Y"], ACT=0)  # the down projection; Z1 again
        self.dgrad_silu = tt.op(HERE / "linear_dgrad.tk", outputs=["DX"], ACT=2)
        self.dgrad = tt.op(HERE / "linear_dgrad.tk", outputs=["DX"], ACT=0)
        self.wgrad = tt.op(HERE / "linear_wgrad.tk", outputs=["DW", "DB"])

        @tt.backward(inputs=["X", "W", "DY"], outputs=["DX", "DW"])
        def rmsnorm_backward(x: Any, w: Any, dy: Any) -> tuple[Any, Any]:
            dx, partial = self.rmsnorm_bwd(x, w, dy)  # DX and G rows of f32 partial sums of DW
            return dx, self.col_sum(partial)

        self.RMSNorm = tt.autograd(self.rmsnorm, rmsnorm_backward)
        self.MLP = _mlp_function(self)


def _mlp_function(ops: TkirOps) -> type:
    """y = W2 silu(W1 h + b1) + b2 as one autograd.Function of tkir ops (the SiLU derivative is applied in
    the down projection's data-gradient epilogue, so the two layers' backward meet in one kernel)."""
    import torch

    class MLP(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, h: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
            a = ops.up(h, w1, b1)
            ctx.save_for_backward(h, w1, b1, w2, a)
            return ops.linear(a, w2, b2)

        @staticmethod
        def backward(ctx: Any, dy: Any) -> Any:
            h, w1, b1, w2, a = ctx.saved_tensors
            dy = dy.contiguous()
            dw2, db2 = ops.wgrad(dy, a)
            z1 = ops.linear(h, w1, b1)  # the pre-activation, recomputed rather than saved
            dz1 = ops.dgrad_silu(dy, w2, z1)  # (dy @ W2) * silu'(z1)
            dw1, db1 = ops.wgrad(dz1, h)
            dh = ops.dgrad(dz1, w1, h)  # ACT=0 reads no Z: h stands in (any [M, D] bf16 tensor)
            return dh, dw1, db1, dw2, db2

    return MLP


class Block:
    """The block's f32 master weights (one seed) and its forward in each mode."""

    def __init__(self, shape: Shape, seed: int, device: str = "cuda"):
        import torch

        gen = torch.Generator(device=device).manual_seed(seed)
        d, f = shape.dim, shape.hidden

        def param(*size: int, scale: float) -> Any:
            return (torch.randn(*size, device=device, generator=gen) * scale).requires_grad_()

        self.g = (1.0 + 0.1 * torch.randn(d, device=device, generator=gen)).requires_grad_()
        self.w1, self.b1 = param(f, d, scale=d ** -0.5), param(f, scale=0.1)
        self.w2, self.b2 = param(d, f, scale=f ** -0.5), param(d, scale=0.1)

    def params(self) -> list[Any]:
        return [self.g, self.w1, self.b1, self.w2, self.b2]

    def bf16(self) -> list[Any]:
        import torch

        return [p.to(torch.bfloat16) for p in self.params()]


def eager_forward(x: Any, g: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
    """The block in torch ops (any dtype)."""
    import torch.nn.functional as F

    h = F.rms_norm(x, (x.shape[-1],), g, eps=EPS)
    return x + F.linear(F.silu(F.linear(h, w1, b1)), w2, b2)


def tkir_forward(ops: TkirOps) -> Callable[..., Any]:
    def forward(x: Any, g: Any, w1: Any, b1: Any, w2: Any, b2: Any) -> Any:
        return x + ops.MLP.apply(ops.RMSNorm.apply(x, g), w1, b1, w2, b2)

    return forward


def batches(shape: Shape, steps: int, seed: int) -> tuple[list[Any], Block]:
    """The inputs of every step and the teacher block whose outputs are the targets (f32)."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    xs = [torch.randn(shape.tokens, shape.dim, device="cuda", generator=gen) for _ in range(steps)]
    return xs, Block(shape, seed + 2)


def train(mode: str, shape: Shape, steps: int, seed: int = 0, lr: float = 1e-3,
          ops: TkirOps | None = None) -> list[float]:
    """Losses of `steps` AdamW steps of the block in `mode` (MODES), from `seed`."""
    import torch

    torch.manual_seed(seed)
    xs, teacher = batches(shape, steps, seed)
    with torch.no_grad():
        targets = [eager_forward(x, *teacher.params()) for x in xs]
    block = Block(shape, seed)
    opt = torch.optim.AdamW(block.params(), lr=lr)
    if mode == "f32":
        fwd: Callable[..., Any] = eager_forward
    elif mode == "eager":
        fwd = eager_forward
    else:
        ops = ops or TkirOps(shape)
        fwd = tkir_forward(ops)
        if mode == "tkir_compile":
            fwd = torch.compile(fwd, fullgraph=True)
    graphed = None
    losses = []
    for step in range(steps):
        x = xs[step] if mode == "f32" else xs[step].to(torch.bfloat16)
        if mode == "tkir_graph":
            if graphed is None:
                graphed = _graphed(fwd, x, block)
            out = graphed(x, *block.params())
        else:
            out = fwd(x, *(block.params() if mode == "f32" else block.bf16()))
        loss = torch.nn.functional.mse_loss(out.float(), targets[step])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses).cpu()]


def _graphed(fwd: Callable[..., Any], x: Any, block: Block) -> Callable[..., Any]:
    """The block's forward and backward captured as CUDA graphs (torch.cuda.make_graphed_callables: a few
    warm-up runs on a side stream, then one capture of each; later calls replay them)."""
    import torch

    class Casted(torch.nn.Module):  # the f32 -> bf16 casts of the weights inside the graph
        def forward(self, x: Any, *params: Any) -> Any:
            return fwd(x, *(p.to(torch.bfloat16) for p in params))

    sample = (x.detach().clone(), *(p.detach().clone().requires_grad_() for p in block.params()))
    return torch.cuda.make_graphed_callables(Casted(), sample)


def run(steps: int, shape: Shape, seed: int = 0, modes: tuple[str, ...] = MODES) -> Curves:
    curves = Curves(steps, shape)
    ops = TkirOps(shape) if any(m.startswith("tkir") for m in modes) else None
    for mode in modes:
        curves.losses[mode] = train(mode, shape, steps, seed, ops=ops)
    return curves


def plot(curves: Curves, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    labels = {"f32": "eager torch, f32", "eager": "eager torch, bf16", "tkir": "tkir ops, eager",
              "tkir_compile": "tkir ops, torch.compile", "tkir_graph": "tkir ops, CUDA graphs"}
    for m, ls in curves.losses.items():
        ax.plot(range(1, len(ls) + 1), ls, label=labels[m], lw=1)
        if m != "eager":
            base = curves.losses["eager"]
            bx.plot(range(1, len(ls) + 1), [(a - b) / b for a, b in zip(ls, base, strict=True)], label=labels[m], lw=1)
    s = curves.shape
    ax.set(title=f"MLP block, {s.tokens} tokens, D = {s.dim}, F = {s.hidden}", xlabel="step", ylabel="MSE loss",
           yscale="log")
    bx.set(title="relative difference from eager torch (bf16)", xlabel="step")
    ax.legend()
    bx.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--tokens", type=int, default=Shape.tokens)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the curves here")
    p.add_argument("--plot", help="write the loss curves (PNG) here")
    args = p.parse_args(argv)
    curves = run(args.steps, Shape(tokens=args.tokens), args.seed)
    for step in [*range(0, args.steps, 50), args.steps - 1]:
        print(f"step {step + 1:4d}  " + "  ".join(f"{m} {ls[step]:.5f}" for m, ls in curves.losses.items()))
    noise = curves.rel_diff("f32")
    for m in curves.losses:
        if m != "eager":
            print(f"largest relative difference from eager bf16: {m:13s} {curves.rel_diff(m):.2e}"
                  + ("  (the bf16 noise)" if m == "f32" else f"  ({curves.rel_diff(m) / noise:.2f}x the noise)"))
    if args.json:
        Path(args.json).write_text(json.dumps(curves.to_json(), indent=1))
    if args.plot:
        plot(curves, args.plot)
    bad = [m for m in curves.losses if math.isnan(curves.losses[m][-1])]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
