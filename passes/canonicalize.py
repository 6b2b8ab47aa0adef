"""canonicalize: fold compile-time scalar arithmetic and remove dead operations.

Rewrites
* `arith.<op>` whose operands are all `arith.const` -> one `arith.const`, computed by tkir/scalar.py
  as the GPU would compute the op (runtime_binary: integers wrap at 32 bits, `div` truncates; a division
  by zero is left alone for the verifier/runtime to report); so is a float math op (`tk.exp`, ...) of a
  constant scalar;
* `arith.cast` of a constant -> a constant of the new type (runtime_convert);
* duplicate `arith.const` of the same value and type in one block -> the first one;
* pure ops whose results are unused -> removed (repeated until nothing changes), including loop
  results that are never read when the loop body has no side effects.
Assumes a verified module; keeps value names of the ops it keeps.
"""

from __future__ import annotations

import math

from tkir import scalar
from tkir.ir import Block, Module, Operation, Value, replace_all_uses
from tkir.ops import OPS
from tkir.passmanager import Options, Pass
from tkir.types import ScalarType


class Canonicalize(Pass):
    name = "canonicalize"

    def run(self, module: Module, options: Options) -> None:
        for top in module.ops:
            for region in top.regions:
                self._fold_block(region.block, module)
        uses = _use_counts(module)
        changed = True
        while changed:
            changed = False
            for top in module.ops:
                for region in top.regions:
                    changed |= self._dce_block(region.block, uses)

    # --- folding ---------------------------------------------------------------------------

    def _fold_block(self, blk: Block, module: Module) -> None:
        consts: dict[tuple[str, object], Value] = {}
        for op in list(blk.ops):
            for region in op.regions:
                self._fold_block(region.block, module)
            value = self._fold(op)
            if value is not None and op.name != "arith.const":
                op.name, op.operands, op.attrs = "arith.const", [], {"value": value}
            if op.name == "arith.const":
                key = (str(op.result.type), op.attrs["value"])
                if isinstance(key[1], float) and math.isnan(key[1]):
                    continue
                if key in consts:
                    replace_all_uses(module, op.result, consts[key])
                    blk.remove(op)
                else:
                    consts[key] = op.result

    def _fold(self, op: Operation) -> object | None:
        vals = []
        for v in op.operands:
            d = v.owner
            if not (isinstance(d, Operation) and d.name == "arith.const"):
                return None
            vals.append(d.attrs["value"])
        if len(op.results) != 1 or not isinstance(op.result.type, ScalarType):
            return None
        dtype = op.result.type.dtype
        try:
            if op.name == "arith.cast" and len(vals) == 1:
                return scalar.runtime_convert(vals[0], dtype)  # what the GPU's cast gives (saturating to i32)
            name = op.name.removeprefix("tk.")
            if op.name.startswith("tk.") and name in scalar.FLOAT_UNARY and len(vals) == 1:
                return float(scalar.FLOAT_UNARY[name](vals[0]))
            name = op.name.removeprefix("arith.")
            if not (op.name.startswith("arith.") and name in scalar.INT_BINARY and len(vals) == 2):
                return None
            if dtype in scalar.INT_DTYPES:  # the GPU's 32-bit arithmetic, which the op would have run
                return scalar.runtime_binary(name, int(vals[0]), int(vals[1]), dtype)
            if dtype in scalar.FLOAT_DTYPES:
                return float(scalar.binary(name, float(vals[0]), float(vals[1])))
        except (ZeroDivisionError, ValueError, OverflowError):  # left for the verifier or the run time
            return None
        return None

    # --- dead code -------------------------------------------------------------------------

    def _dce_block(self, blk: Block, uses: dict[int, int]) -> bool:
        """Remove the dead ops of `blk` (inner blocks first, then this one from its end); `uses` counts
        the module's reads of each value (by id) and is kept current as ops go."""
        changed = False
        for op in list(blk.ops):
            for region in op.regions:
                changed |= self._dce_block(region.block, uses)
        for op in reversed(list(blk.ops)):
            if op.results and all(id(r) not in uses for r in op.results) and _removable(op):
                blk.remove(op)
                _drop_uses(op, uses)
                changed = True
        return changed


def _use_counts(module: Module) -> dict[int, int]:
    """id(value) -> how many operands in the module read it (values nobody reads are absent)."""
    uses: dict[int, int] = {}
    for op in module.walk():
        for v in op.operands:
            uses[id(v)] = uses.get(id(v), 0) + 1
    return uses


def _drop_uses(removed: Operation, uses: dict[int, int]) -> None:
    """Forget the reads of a removed op and of every op nested in it."""
    for op in removed.walk():
        for v in op.operands:
            n = uses[id(v)] - 1
            if n:
                uses[id(v)] = n
            else:
                del uses[id(v)]


def _removable(op: Operation) -> bool:
    d = OPS.get(op.name)
    if d is not None and d.pure and not op.regions:
        return True
    if op.name == "scf.for":  # a loop whose body only computes values nobody reads
        return all(_removable(inner) or OPS[inner.name].terminator for inner in op.body.ops)
    return False
