"""Session 9: one launch each of tkir's tuned rmsnorm / layernorm and the sweep's torch.compile peer, for
ncu to compare (small rows lose 1-12% to Inductor in the rows sweep; layernorm N=4096 D=8192 stays at
79% of copy). On the device: ncu --metrics ... python3 docs/bench/session9_small.py"""
import torch

import tkir
from tkir.bench import _to_torch
from tkir.examples import load_companion

CASES = [("rmsnorm", 1, 768, dict(ROWS=1, DC=1024, WG=2, OCC=4)),
         ("rmsnorm", 128, 768, dict(ROWS=1, DC=4096, WG=2, OCC=0)),
         ("layernorm", 4096, 8192, dict(ROWS=1, DC=8192, WG=2, OCC=4))]
for name, n, d, consts in CASES:
    path = f"examples/{name}.tk"
    comp = load_companion(path)
    consts = dict(consts, D=d)
    import numpy as np

    inputs = [_to_torch(torch, a) for a in comp.make_inputs(np.random.default_rng(0), {"N": n}, consts)]
    k = tkir.compile(path, **consts)
    k(*inputs)
    f = comp.extra_peer("compiled", inputs, {"N": n}, consts)
    f()
    f()
    torch.cuda.synchronize()
    print(name, n, d, "done", flush=True)
