"""A small causal transformer trained on a synthetic copy task with tkir attention (forward and backward), beside
the same model with SDPA, from one seed on the same batches.

    python3 examples/train_transformer.py --steps 300 --json curves.json --plot curves.png

Model: token and position embeddings, LAYERS pre-norm layers (LayerNorm, causal multi-head attention of HEADS
heads of 64 (d_model 256), LayerNorm, a 4x MLP with GELU), a final LayerNorm and an output projection. f32
master weights; the layers run under torch.autocast(bfloat16), so q, k and v reach attention as bf16 (tkir's
kernels take bf16 [B, H, N, D]). Task: each sequence is PREFIX random symbols, a separator and the same symbols
again; the loss is the cross-entropy of the copied half (a model that attends back to the first half predicts it
exactly; two layers are what such a copy, an induction head, needs).

Modes, each trained with AdamW from the same seed on the same batches:
  sdpa_f32  no autocast, SDPA in f32 (the reference for the bf16 noise)
  sdpa      autocast, torch.nn.functional.scaled_dot_product_attention (causal)
  tkir      autocast, examples/attention_autograd.py's attention (attention_fwd.tk; prep, dK/dV, dQ kernels)
A curve's distance from another is the largest |loss difference| over the steps as a fraction of the first
loss (the losses go to near 0, where a relative difference means little). The bf16 noise is sdpa_f32's
distance from sdpa; tests/gpu/test_train_transformer.py asserts tkir's distance from sdpa is within it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MODES = ("sdpa_f32", "sdpa", "tkir")


@dataclass
class Config:
    layers: int = 2
    d_model: int = 256
    heads: int = 4  # head dim d_model / heads = 64
    symbols: int = 64  # the alphabet copied; token `symbols` is the separator
    prefix: int = 64  # symbols per sequence before the separator: N = 2 * prefix tokens in
    batch: int = 64
    lr: float = 3e-3
    warmup: int = 30  # steps of linear learning-rate warm-up


@dataclass
class Curves:
    steps: int
    config: Config
    losses: dict[str, list[float]] = field(default_factory=dict)

    def distance(self, mode: str, base: str = "sdpa") -> float:
        """The largest |loss(mode) - loss(base)| over the steps, as a fraction of base's first loss."""
        a, b = self.losses[mode], self.losses[base]
        return max(abs(x - y) for x, y in zip(a, b, strict=True)) / b[0]

    def to_json(self) -> dict[str, Any]:
        return {"steps": self.steps, "config": vars(self.config), "losses": self.losses,
                "distance_from_sdpa": {m: self.distance(m) for m in self.losses if m != "sdpa"}}


def _attention_autograd() -> Any:
    from tkir.tools.examples import load_module

    return load_module(HERE / "attention_autograd.py")  # once per process (sys.modules)


def attention_fn(mode: str) -> Any:
    """q, k, v [B, H, N, D] -> o, causal, for `mode`."""
    import torch.nn.functional as F

    if mode == "tkir":
        tkir_attention = _attention_autograd().attention
        return lambda q, k, v: tkir_attention(q, k, v, causal=True)
    return lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)


def build_model(cfg: Config, attend: Any, seed: int) -> Any:
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d = cfg.d_model
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x: Any) -> Any:
            b, n, d = x.shape
            h = cfg.heads
            q, k, v = self.qkv(self.ln1(x)).view(b, n, 3, h, d // h).permute(2, 0, 3, 1, 4).unbind(0)
            o = attend(q, k, v)  # [B, H, N, D]
            x = x + self.proj(o.transpose(1, 2).reshape(b, n, d))
            return x + self.down(torch.nn.functional.gelu(self.up(self.ln2(x))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            vocab = cfg.symbols + 1
            self.tok = nn.Embedding(vocab, cfg.d_model)
            self.pos = nn.Embedding(2 * cfg.prefix, cfg.d_model)
            self.layers = nn.ModuleList(Layer() for _ in range(cfg.layers))
            self.ln = nn.LayerNorm(cfg.d_model)
            self.out = nn.Linear(cfg.d_model, vocab)

        def forward(self, tokens: Any) -> Any:
            x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
            for layer in self.layers:
                x = layer(x)
            return self.out(self.ln(x))

    torch.manual_seed(seed)
    return Model().cuda()


def batches(cfg: Config, steps: int, seed: int) -> list[Any]:
    """The token sequences of every step: [batch, 2 * prefix + 1] (prefix symbols, the separator, the copy)."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed + 1)
    out = []
    for _ in range(steps):
        s = torch.randint(0, cfg.symbols, (cfg.batch, cfg.prefix), device="cuda", generator=gen)
        sep = torch.full((cfg.batch, 1), cfg.symbols, device="cuda", dtype=s.dtype)
        out.append(torch.cat([s, sep, s], dim=1))
    return out


def train(mode: str, cfg: Config, steps: int, seed: int = 0) -> list[float]:
    """The copy loss at each of `steps` AdamW steps of the model in `mode` (MODES), from `seed`."""
    import torch

    model = build_model(cfg, attention_fn(mode), seed)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / cfg.warmup))
    losses = []
    for seq in batches(cfg, steps, seed):
        inp, tgt = seq[:, :-1], seq[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode != "sdpa_f32"):
            logits = model(inp)
        copied = logits[:, cfg.prefix:].float()  # the predictions of the copy (after the separator)
        loss = torch.nn.functional.cross_entropy(copied.reshape(-1, copied.shape[-1]),
                                                 tgt[:, cfg.prefix:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        losses.append(loss.detach())
    return [float(v) for v in torch.stack(losses).cpu()]


def run(steps: int, cfg: Config, seed: int = 0, modes: tuple[str, ...] = MODES) -> Curves:
    curves = Curves(steps, cfg)
    for mode in modes:
        curves.losses[mode] = train(mode, cfg, steps, seed)
    return curves


def plot(curves: Curves, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(11, 4))
    labels = {"sdpa_f32": "SDPA, f32", "sdpa": "SDPA, bf16 autocast", "tkir": "tkir attention, bf16 autocast"}
    base = curves.losses["sdpa"]
    for m, ls in curves.losses.items():
        ax.plot(range(1, len(ls) + 1), ls, label=labels[m], lw=1)
        if m != "sdpa":
            bx.plot(range(1, len(ls) + 1), [(a - b) / base[0] for a, b in zip(ls, base, strict=True)], label=labels[m],
                    lw=1)
    c = curves.config
    ax.set(title=f"copy task: {c.layers} layers, d_model {c.d_model}, {c.heads} heads, N = {2 * c.prefix}",
           xlabel="step", ylabel="cross-entropy of the copy", yscale="log")
    bx.set(title="difference from SDPA (bf16), as a fraction of the first loss", xlabel="step")
    ax.legend()
    bx.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the curves here")
    p.add_argument("--plot", help="write the loss curves (PNG) here")
    args = p.parse_args(argv)
    curves = run(args.steps, Config(), args.seed)
    for step in [*range(0, args.steps, 50), args.steps - 1]:
        print(f"step {step + 1:4d}  " + "  ".join(f"{m} {ls[step]:.4f}" for m, ls in curves.losses.items()))
    noise = curves.distance("sdpa_f32")
    for m in curves.losses:
        if m != "sdpa":
            print(f"largest loss difference from SDPA bf16 (fraction of the first loss): {m:9s} "
                  f"{curves.distance(m):.2e}" + ("  (the bf16 noise)" if m == "sdpa_f32"
                                                 else f"  ({curves.distance(m) / noise:.2f}x the noise)"))
    if args.json:
        Path(args.json).write_text(json.dumps(curves.to_json(), indent=1))
    if args.plot:
        plot(curves, args.plot)
    return 1 if any(math.isnan(ls[-1]) for ls in curves.losses.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
