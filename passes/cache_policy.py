"""cache-policy: give the global loads of register tiles and vectors an L2 eviction priority.

Matches every `tk.load` from a global tensor (`gl`) into registers (`rt` / `rv`) and sets
`l2 = "<priority>"` on it (the pass parameter `loads`, default `evict_last`). The backend then emits
the load as `ld.global.L2::cache_hint` with a policy register made once per kernel by
`createpolicy.fractional.L2::<priority>.b64 ..., 1.0` (PTX ISA 7.4, sm_80 and later: both targets).
Loads into shared memory (TMA, cp.async) and stores are left alone.

Why evict_last on data a kernel reads once: measured, not derived. On the H200 (docs/experiments.md,
"L2 priorities on register loads") the row kernels ran 1-4% faster with every register-tile
load marked evict_last (13 configurations of layernorm, rmsnorm and softmax, one-read and chunk-loop
kernels, the loads rewritten in the PTX and timed interleaved with the unmarked kernel), and 2-9% in
chunk loops, whose second pass then finds the first pass's lines in L2. Marked evict_first, the same
loads ran 5-25% slower; evict_normal through the same hint gained about half as much as evict_last;
hints on the stores changed nothing beyond noise. Inductor's looped reductions ask Triton for
evict_last on the loads a later pass reads again.

`loads=none` removes nothing and marks nothing (the ablation, same as leaving the pass out of
`--passes`); `loads=evict_first|evict_normal|evict_unchanged` are there for experiments.
"""

from __future__ import annotations

from tkir.ir import Module
from tkir.ops import L2_ATTR as ATTR
from tkir.ops import L2_PRIORITIES as PRIORITIES
from tkir.passes.analysis import register_load_from_global
from tkir.passmanager import Options, ParamError, Pass, param


class CachePolicy(Pass):
    name = "cache-policy"
    loads: str = param("evict_last", "L2 priority of global -> register loads: "
                                     + ", ".join(PRIORITIES) + ", or none")

    def __post_init__(self) -> None:
        if self.loads not in (*PRIORITIES, "none"):
            raise ParamError("loads", f"cache-policy: loads={self.loads}: one of {', '.join(PRIORITIES)}, none")

    def run(self, module: Module, options: Options) -> None:
        if self.loads == "none":
            return
        for kernel in module.kernels():
            for op in kernel.walk():
                if register_load_from_global(op):
                    op.attrs[ATTR] = self.loads
