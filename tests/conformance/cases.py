"""The conformance table: constructs x contexts x dtypes x targets, each a small generated kernel.

A construct is a few statements of `.tk` source plus a numpy reference. `kernel_source` wraps the
statements in one of four CONTEXTS, because the same statement meets different layouts and roles
there: straight-line code, a plain run-time loop, the code after a pipelined GEMM loop (the kernel
is warp-specialized on sm_90a: the construct runs in the consumer after the producer is done) and
the body of that pipelined loop (the consumer role itself).

Templates: `{dt}` is the case's dtype, `{r}` the row-tile index the construct reads and writes
(block.x, or the loop index in the `loop` context). Names the contexts use (GA GB G ga gb gacc k i)
are reserved. Shapes are 64x64 tiles over N = 128 rows (two row tiles), so every case is small.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import ml_dtypes
import numpy as np

DTYPES = ("bf16", "f16", "f32")
TARGETS = ("sm_90a", "sm_80")
CONTEXTS = ("top", "loop", "after_pipelined_loop", "in_pipelined_loop")
MMA_DTYPES = ("bf16", "f16")  # wgmma / mma.sync operand dtypes the language has (no tf32)
FP8_DTYPES = ("e4m3", "e5m2")
TILE = 64  # rows and cols of every generated tile
DEFAULT_SIZES = {"N": 128, "K": 128}  # two row tiles; the pipelined GEMM runs two K steps

NP_DTYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32,
             "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2}
INT_DTYPES = ("i32", "u32")  # integer tiles and vectors (the `integers` family)
NP_DTYPES |= {"i32": np.int32, "u32": np.uint32}
INT_POISON = 12345  # what an integer output holds before the kernel writes it (NaN for floats)
# Relative tolerance of a result computed in a dtype: a few units in the last place
# (bf16 has 8 significant bits, f16 11, f32 24).
TOLERANCE = {"bf16": 3e-2, "f16": 4e-3, "f32": 2e-5, "e4m3": 0.25, "e5m2": 0.5, "i32": 0.0, "u32": 0.0}

Arrays = dict[str, np.ndarray]
Reference = Callable[[Arrays, str], Arrays]


@dataclass(frozen=True)
class Construct:
    """One construct: source text templates, which params it writes, and what they must hold."""

    name: str
    family: str
    params: str                  # extra kernel parameters, comma separated
    body: str                    # statements, one per line
    outputs: tuple[str, ...]     # the parameters the kernel writes; the rest are inputs
    reference: Reference         # float64 inputs (already rounded to their dtypes) -> outputs
    shared: str = ""             # shared declarations: always at the kernel's top level
    dtypes: tuple[str, ...] = DTYPES
    contexts: tuple[str, ...] = CONTEXTS
    refused_dtypes: dict[str, str] = field(default_factory=dict)  # dtype -> why refusal is right
    refused_targets: dict[str, str] = field(default_factory=dict)  # target -> why refusal is right
    positive: bool = False       # inputs in [0.5, 2.5): for log, sqrt, rsqrt
    sizes: dict[str, int] = field(default_factory=dict)
    consts: str = ""             # const parameters, e.g. "W=16"
    note: str = ""
    rows: int = TILE             # rows of the tile {r} counts: the grid (and the loop) is cdiv(N, rows)


@dataclass(frozen=True)
class Case:
    construct: Construct
    context: str
    dtype: str
    target: str

    @property
    def id(self) -> str:
        return f"{self.construct.name}-{self.context}-{self.dtype}-{self.target}"

    @property
    def expect_refused(self) -> bool:
        return self.refusal_reason is not None

    @property
    def refusal_reason(self) -> str | None:
        """Why a located refusal is the right outcome of this case, or None when it must work."""
        c = self.construct
        return c.refused_dtypes.get(self.dtype) or c.refused_targets.get(self.target)

    @property
    def sizes(self) -> dict[str, int]:
        return {**DEFAULT_SIZES, **self.construct.sizes}


# ---------------------------------------------------------------------------------------------
# numpy helpers for references: inputs are float64, tiles are rows [64 r, 64 r + 64).


def rnd(x: np.ndarray, dt: str) -> np.ndarray:
    """x rounded to dt (as the kernel's stores round), back in float64."""
    return np.asarray(x, np.float64).astype(NP_DTYPES[dt]).astype(np.float64)


def tiles(x: np.ndarray) -> np.ndarray:
    """(N, 64) -> (N / 64, 64, 64): one entry per row tile."""
    return x.reshape(-1, TILE, x.shape[-1])


def per_tile(x: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """Apply fn to each 64-row tile of x and stack the results along rows."""
    return np.concatenate([fn(t) for t in tiles(x)], axis=0)


def erf(x: np.ndarray) -> np.ndarray:
    import math

    return np.vectorize(math.erf)(x)


# ---------------------------------------------------------------------------------------------
# Contexts.

GEMM_PARAMS = "GA: gl<bf16>[N, K], GB: gl<bf16>[K, 64], G: gl<bf16>[N, 64]"
GEMM_SHARED = "shared ga: st<bf16, 64, 64>\nshared gb: st<bf16, 64, 64>\nreg gacc: rt<f32, 64, 64> = 0"
GEMM_LOOP_HEAD = "@stages(2)\nfor k in 0 .. cdiv(K, 64) {\n    ga = GA[block.x, k]\n    gb = GB[k, 0]\n    gacc += ga @ gb"
GEMM_STORE = "G[block.x, 0] = bf16(gacc)"


def _indent(text: str, n: int = 4) -> str:
    return "\n".join((" " * n + line) if line.strip() else "" for line in text.strip("\n").splitlines())


def _fill(template: str, dt: str, r: str) -> str:
    """Substitute {dt} and {r} (not str.format: .tk bodies hold braces)."""
    return template.replace("{dt}", dt).replace("{r}", r)


def kernel_source(case: Case) -> str:
    """The .tk text of a case: the construct's statements placed in the case's context."""
    c, ctx = case.construct, case.context
    r = "i" if ctx == "loop" else "block.x"
    body = _fill(c.body, case.dtype, r).strip("\n")
    params = _fill(c.params, case.dtype, r)
    shared = _fill(c.shared, case.dtype, r)
    grid = f"cdiv(N, {c.rows})"
    if ctx == "top":
        stmts = body
    elif ctx == "loop":
        grid = "1"
        stmts = f"for i in 0 .. cdiv(N, {c.rows}) {{\n" + _indent(body) + "\n}"
    else:
        params = f"{params}, {GEMM_PARAMS}"
        shared = f"{shared}\n{GEMM_SHARED}"
        if ctx == "after_pipelined_loop":
            stmts = f"{GEMM_LOOP_HEAD}\n}}\n{GEMM_STORE}\n{body}"
        else:
            stmts = f"{GEMM_LOOP_HEAD}\n{_indent(body)}\n}}\n{GEMM_STORE}"
    consts = f"<{c.consts}>" if c.consts else ""
    head = f"kernel {c.name}{consts}({params})\n    grid({grid})\n{{\n"
    return head + _indent(shared) + "\n" + _indent(stmts) + "\n}\n"


_PARAM = re.compile(r"(\w+)\s*:\s*gl<(\w+)>\[([^\]]*)\]")


def global_params(source: str) -> list[tuple[str, str, list[str]]]:
    """(name, dtype, dims) of each gl parameter in the kernel header, in launch order."""
    header = source.split("grid(", 1)[0]
    return [(m[1], m[2], [d.strip() for d in m[3].split(",")]) for m in _PARAM.finditer(header)]


def _extent(dim: str, sizes: dict[str, int]) -> int:
    return sizes[dim] if dim in sizes else int(dim)


def make_inputs(case: Case, source: str, seed: int = 0) -> tuple[list[str], Arrays]:
    """Random inputs (rounded to their dtypes) and NaN-filled outputs, by parameter name."""
    rng = np.random.default_rng(seed)
    names, arrays = [], {}
    outputs = set(case.construct.outputs) | ({"G"} if "pipelined" in case.context else set())
    for name, dt, dims in global_params(source):
        shape = tuple(_extent(d, case.sizes) for d in dims)
        if name in outputs:
            a = np.full(shape, INT_POISON if dt in INT_DTYPES else np.nan, np.float32)
        elif dt in INT_DTYPES:  # integers of either sign (u32: the low half); `positive`: 1 .. 999 (divisors)
            lo = 1 if case.construct.positive else (0 if dt == "u32" else -1000)
            a = rng.integers(lo, 1000, shape)
        elif case.construct.positive:
            a = rng.uniform(0.5, 2.5, shape)
        else:
            a = rng.standard_normal(shape)
        names.append(name)
        arrays[name] = np.asarray(a).astype(NP_DTYPES[dt])
    return names, arrays


def expected(case: Case, arrays: Arrays) -> Arrays:
    """The reference outputs (float64) for the given input arrays."""
    inputs = {k: v.astype(np.float64) for k, v in arrays.items()}
    out = dict(case.construct.reference(inputs, case.dtype))
    if "pipelined" in case.context:
        out["G"] = rnd(inputs["GA"] @ inputs["GB"], "bf16")
    return out


# ---------------------------------------------------------------------------------------------
# The constructs.

CONSTRUCTS: list[Construct] = []


def construct(**kw: object) -> None:
    CONSTRUCTS.append(Construct(**kw))  # type: ignore[arg-type]


TILE_IO = "X: gl<{dt}>[N, 64], Y: gl<{dt}>[N, 64]"
VEC_IO = "X: gl<{dt}>[N], Y: gl<{dt}>[N]"
F32_REFUSED = {"f32": "'@' takes bf16 or f16 operands (no tf32): a located refusal is right"}


def _copy(i: Arrays, dt: str) -> Arrays:
    return {"Y": i["X"]}


# copies --------------------------------------------------------------------------------------
construct(name="g2r_tile", family="copies", params=TILE_IO, outputs=("Y",), reference=_copy,
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nY[{r}, 0] = x",
          note="global -> register tile -> global")
construct(name="g2r_vec", family="copies", params=VEC_IO, outputs=("Y",), reference=_copy,
          body="reg v: rv<{dt}, 64> = X[{r}]\nY[{r}] = v",
          note="global -> register vector -> global")
construct(name="g2s_s2g", family="copies", params=TILE_IO, outputs=("Y",), reference=_copy,
          shared="shared a: st<{dt}, 64, 64>", body="a = X[{r}, 0]\nY[{r}, 0] = a",
          note="global -> shared -> global")
construct(name="s2r", family="copies", params=TILE_IO, outputs=("Y",), reference=_copy,
          shared="shared a: st<{dt}, 64, 64>",
          body="a = X[{r}, 0]\nreg x: rt<{dt}, 64, 64>\nx = a\nY[{r}, 0] = x",
          note="shared -> register (`x = a`)")
construct(name="r2s", family="copies", params=TILE_IO, outputs=("Y",), reference=_copy,
          shared="shared a: st<{dt}, 64, 64>",
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\na = x\nY[{r}, 0] = a",
          note="register -> shared (`a = r`) -> global")
construct(name="r2s_mma", family="copies", params="X: gl<{dt}>[N, 64], B: gl<{dt}>[64, 64], Y: gl<{dt}>[N, 64]",
          outputs=("Y",), reference=lambda i, dt: {"Y": rnd(i["X"] @ i["B"], dt)},
          shared="shared a: st<{dt}, 64, 64>\nshared b: st<{dt}, 64, 64>",
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\na = x\nb = B[0, 0]\nreg acc: rt<f32, 64, 64> = 0\n"
               "acc += a @ b\nY[{r}, 0] = {dt}(acc)",
          refused_dtypes=F32_REFUSED, note="register -> shared -> wgmma / mma operand")
construct(name="sv_copy", family="copies", params=VEC_IO, outputs=("Y",), reference=_copy,
          shared="shared s: sv<{dt}, 64>", body="s = X[{r}]\nreg v: rv<{dt}, 64> = s\nY[{r}] = v",
          note="global -> shared vector -> register vector -> global")
construct(name="rv2sv", family="copies", params=VEC_IO, outputs=("Y",), reference=_copy,
          shared="shared s: sv<{dt}, 64>", body="reg v: rv<{dt}, 64> = X[{r}]\ns = v\nY[{r}] = s",
          note="register vector -> shared vector -> global")

# broadcasts ----------------------------------------------------------------------------------
construct(name="bcast_row", family="broadcast", params="X: gl<{dt}>[N, 64], V: gl<{dt}>[N], Y: gl<{dt}>[N, 64]",
          outputs=("Y",), reference=lambda i, dt: {"Y": rnd(i["X"] * i["V"][:, None], dt)},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nreg v: rv<{dt}, 64> = V[{r}]\nY[{r}, 0] = x * row(v)",
          note="a global vector, one value per tile row")
construct(name="bcast_col", family="broadcast", params="X: gl<{dt}>[N, 64], V: gl<{dt}>[64], Y: gl<{dt}>[N, 64]",
          outputs=("Y",), reference=lambda i, dt: {"Y": rnd(i["X"] + i["V"][None, :], dt)},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nreg v: rv<{dt}, 64> = V[0]\nY[{r}, 0] = x + col(v)",
          note="a global vector, one value per tile column")

_MMA_IO = "A: gl<{dt}>[N, 64], B: gl<{dt}>[64, 64]"
_ACC = "shared a: st<{dt}, 64, 64>\nshared b: st<{dt}, 64, 64>"
_ACC_BODY = "a = A[{r}, 0]\nb = B[0, 0]\nreg acc: rt<f32, 64, 64> = 0\nacc += a @ b\n"
construct(name="acc_bias", family="broadcast", params=f"{_MMA_IO}, V: gl<f32>[64], Y: gl<{{dt}}>[N, 64]",
          outputs=("Y",), shared=_ACC, refused_dtypes=F32_REFUSED,
          reference=lambda i, dt: {"Y": rnd(i["A"] @ i["B"] + i["V"][None, :], dt)},
          body=_ACC_BODY + "reg v: rv<f32, 64> = V[0]\nY[{r}, 0] = {dt}(acc + col(v))",
          note="bias over an mma accumulator: acc + col(bias)")
construct(name="acc_scale_col", family="broadcast", params=f"{_MMA_IO}, V: gl<f32>[64], Y: gl<{{dt}}>[N, 64]",
          outputs=("Y",), shared=_ACC, refused_dtypes=F32_REFUSED,
          reference=lambda i, dt: {"Y": rnd((i["A"] @ i["B"]) * i["V"][None, :], dt)},
          body=_ACC_BODY + "reg v: rv<f32, 64> = V[0]\nY[{r}, 0] = {dt}(acc * col(v))",
          note="per-channel scale of an mma accumulator: acc * col(v)")
construct(name="acc_scale_row", family="broadcast", params=f"{_MMA_IO}, V: gl<f32>[N], Y: gl<{{dt}}>[N, 64]",
          outputs=("Y",), shared=_ACC, refused_dtypes=F32_REFUSED,
          reference=lambda i, dt: {"Y": rnd((i["A"] @ i["B"]) * i["V"][:, None], dt)},
          body=_ACC_BODY + "reg v: rv<f32, 64> = V[{r}]\nY[{r}, 0] = {dt}(acc * row(v))",
          note="per-row scale of an mma accumulator: acc * row(v)")

# matrix products -----------------------------------------------------------------------------
# A: (N, 64) row tiles; At: (64, N) = A stored transposed; B (64, 64); Bt = B stored transposed.
_MMA_PARAMS = "A: gl<{dt}>[N, 64], At: gl<{dt}>[64, N], B: gl<{dt}>[64, 64], Y: gl<{dt}>[N, 64]"


def _mma_ref(a_t: bool, b_t: bool) -> Reference:
    def ref(i: Arrays, dt: str) -> Arrays:
        a = i["At"].T if a_t else i["A"]
        b = i["B"].T if b_t else i["B"]
        return {"Y": rnd(a @ b, dt)}
    return ref


def _mma(name: str, expr: str, a_t: bool, b_t: bool, regs: bool, note: str, a_reg: bool | None = None) -> None:
    a_reg = regs if a_reg is None else a_reg
    a_src = "At[0, {r}]" if a_t else "A[{r}, 0]"
    shared, body = [], []
    if a_reg:
        body.append(f"reg a: rt<{{dt}}, 64, 64> = {a_src}")
    else:
        shared.append("shared a: st<{dt}, 64, 64>")
        body.append(f"a = {a_src}")
    if regs:
        body.append("reg b: rt<{dt}, 64, 64> = B[0, 0]")
    else:
        shared.append("shared b: st<{dt}, 64, 64>")
        body.append("b = B[0, 0]")
    body += ["reg acc: rt<f32, 64, 64> = 0", f"acc += {expr}", "Y[{r}, 0] = {dt}(acc)"]
    construct(name=name, family="mma", params=_MMA_PARAMS, outputs=("Y",), reference=_mma_ref(a_t, b_t),
              shared="\n".join(shared), body="\n".join(body), refused_dtypes=F32_REFUSED, note=note)


_mma("mma_ss", "a @ b", False, False, False, "shared @ shared")
_mma("mma_ss_tA", "a.T @ b", True, False, False, "shared.T @ shared")
_mma("mma_ss_tB", "a @ b.T", False, True, False, "shared @ shared.T")
_mma("mma_rs", "a @ b", False, False, False, "register @ shared (attention's P @ V)", a_reg=True)
_mma("mma_rr", "a @ b", False, False, True, "register @ register")
_mma("mma_rr_tA", "a.T @ b", True, False, True, "register.T @ register")
_mma("mma_rr_tB", "a @ b.T", False, True, True, "register @ register.T")

# Ragged M, K and N: 100 rows, a K loop over 200 (three full 64-wide steps and one of 8) and 56 output columns, so the
# operand loads fill past K and P with zeros (TMA boxes or masked register loads) and the store is masked.
_RAGGED_MMA_PARAMS = "A: gl<{dt}>[N, K], B: gl<{dt}>[K, P], Y: gl<{dt}>[N, P]"
for _name, _shared in (("mma_ragged_kn", True), ("mma_ragged_kn_regs", False)):
    construct(name=_name, family="mma", params=_RAGGED_MMA_PARAMS, outputs=("Y",),
              reference=lambda i, dt: {"Y": rnd(i["A"] @ i["B"], dt)}, sizes={"N": 100, "K": 200, "P": 56},
              shared="shared a: st<{dt}, 64, 64>\nshared b: st<{dt}, 64, 64>" if _shared else "",
              body=("reg acc: rt<f32, 64, 64> = 0\nfor k in 0 .. cdiv(K, 64) {\n"
                    + ("    a = A[{r}, k]\n    b = B[k, 0]\n" if _shared else
                       "    reg a: rt<{dt}, 64, 64> = A[{r}, k]\n    reg b: rt<{dt}, 64, 64> = B[k, 0]\n")
                    + "    acc += a @ b\n}\nY[{r}, 0] = {dt}(acc)"),
              contexts=("top", "loop"), refused_dtypes=F32_REFUSED,
              note="ragged K (200) and N (56) in a K loop: " + ("shared" if _shared else "register") + " operands")

_T_IO = "X: gl<{dt}>[N, 32], Y: gl<{dt}>[32, N]"
_T_REF: Reference = lambda i, dt: {"Y": i["X"].T}  # noqa: E731
construct(name="transpose_reg", family="mma", params=_T_IO, outputs=("Y",), reference=_T_REF,
          body="reg x: rt<{dt}, 64, 32> = X[{r}, 0]\nY[0, {r}] = x.T", note="x.T of a 64x32 register tile")
construct(name="transpose_s2r", family="mma", params=_T_IO, outputs=("Y",), reference=_T_REF,
          shared="shared a: st<{dt}, 64, 32>",
          body="a = X[{r}, 0]\nreg x: rt<{dt}, 32, 64>\nx = a.T\nY[0, {r}] = x",
          note="NEW: x = a.T, a shared 64x32 tile read transposed into registers")

# reductions ----------------------------------------------------------------------------------
_RED_IO = "X: gl<{dt}>[N, 64], Y: gl<{dt}>[N]"
for _kind, _fn in (("sum", np.sum), ("max", np.max), ("min", np.min)):
    construct(name=f"row_{_kind}", family="reductions", params=_RED_IO, outputs=("Y",),
              reference=(lambda fn: lambda i, dt: {"Y": rnd(fn(i["X"], axis=1), dt)})(_fn),
              body=f"reg x: rt<{{dt}}, 64, 64> = X[{{r}}, 0]\nY[{{r}}] = row_{_kind}(x)")
    construct(name=f"col_{_kind}", family="reductions", params=_RED_IO, outputs=("Y",),
              reference=(lambda fn: lambda i, dt: {"Y": rnd(fn(tiles(i["X"]), axis=1).reshape(-1), dt)})(_fn),
              body=f"reg x: rt<{{dt}}, 64, 64> = X[{{r}}, 0]\nY[{{r}}] = col_{_kind}(x)",
              note="one value per column of each row tile")

# row statistics: row_mean / row_var (tk.reduce {kind = mean|var}; the variance one Welford pass, a
# mean and a variance of one tile fused into one exchange by fuse-row-stats) ---------------------
_STATS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"mean": lambda x: x.mean(axis=1),
                                                         "var": lambda x: x.var(axis=1)}
for _kind, _fn in _STATS.items():
    construct(name=f"row_{_kind}", family="reductions", params=_RED_IO, outputs=("Y",),
              reference=(lambda fn: lambda i, dt: {"Y": rnd(fn(i["X"]), dt)})(_fn),
              body=f"reg x: rt<{{dt}}, 64, 64> = X[{{r}}, 0]\nY[{{r}}] = row_{_kind}(x)",
              note="the population (biased) variance" if _kind == "var" else "")


def _row_stats(cols: int) -> Reference:
    """Mean and variance of each row of the case's 64-column tile (the tile's columns past the tensor's
    `cols` read as 0, as every load past an extent does), and the row normalised by them."""
    def ref(i: Arrays, dt: str) -> Arrays:
        x = i["X"][:, -cols:] if cols < TILE else i["X"]
        x = np.pad(x, ((0, 0), (0, TILE - x.shape[1])))
        mean, var = x.mean(axis=1), x.var(axis=1)
        return {"M": rnd(mean, dt), "V": rnd(var, dt),
                "Y": rnd((x - mean[:, None]) / np.sqrt(var[:, None] + 1e-5), dt)[:, :cols]}
    return ref


_STATS_BODY = ("reg x: rt<{dt}, 64, 64> = X[{r}, C]\nlet xf = f32(x)\nlet mean = row_mean(xf)\nlet var = row_var(xf)\n"
               "M[{r}] = {dt}(mean)\nV[{r}] = {dt}(var)\nY[{r}, 0] = {dt}((xf - row(mean)) * row(rsqrt(var + 1e-5)))")
construct(name="row_stats", family="reductions", outputs=("M", "V", "Y"), reference=_row_stats(TILE),
          params="X: gl<{dt}>[N, 64], M: gl<{dt}>[N], V: gl<{dt}>[N], Y: gl<{dt}>[N, 64]",
          body=_STATS_BODY.replace("C", "0"),
          note="row_mean and row_var of one f32 tile (one fused exchange), a layer norm of the rows")
construct(name="row_stats_ragged", family="reductions", outputs=("M", "V", "Y"), reference=_row_stats(40),
          params="X: gl<{dt}>[N, L], M: gl<{dt}>[N], V: gl<{dt}>[N], Y: gl<{dt}>[N, P]",
          sizes={"N": 100, "L": 104, "P": 40},
          body=_STATS_BODY.replace("C", "1"),
          note="N = 100 (a partial last row tile) and L = 104 (the tile at column 64 holds 40 columns; the rest "
               "read as 0 and count in the statistics); masked vector stores and a tile store 40 columns wide")
construct(name="row_var_shifted", family="reductions", params=_RED_IO, outputs=("Y",),
          reference=lambda i, dt: {"Y": rnd(i["X"].var(axis=1), dt)},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nY[{r}] = {dt}(row_var(f32(x) + 100))",
          note="rows with a mean of 100: the f32 sum of squares less the squared mean loses the variance "
               "(about 6e-4 off), the Welford pass keeps it")

# wide rows: short register tiles (fewer rows than warps) whose rows infer-layouts splits over
# several warps (`parts`), so row reductions combine partial results across warps -------------
_WIDE = 4096


def _wide_norm(i: Arrays, dt: str) -> Arrays:
    x = i["X"]
    rstd = 1.0 / np.sqrt((x * x).sum(axis=1, keepdims=True) / _WIDE + 1e-6)
    return {"Y": rnd(x * rstd * i["W"][None, :] + x.max(axis=1, keepdims=True), dt)}


for _rows in (1, 2):
    construct(name=f"wide_rows{_rows}", family="reductions", sizes={"N": _rows},
              params=f"X: gl<{{dt}}>[N, {_WIDE}], W: gl<{{dt}}>[{_WIDE}], Y: gl<{{dt}}>[N, {_WIDE}]",
              outputs=("Y",), reference=_wide_norm,
              body=(f"reg x: rt<{{dt}}, {_rows}, {_WIDE}> = X[{{r}}, 0]\nlet xf = f32(x)\n"
                    f"let rstd = rsqrt(row_sum(xf * xf) / {_WIDE} + 1e-6)\n"
                    f"reg w: rv<{{dt}}, {_WIDE}> = W[0]\n"
                    f"Y[{{r}}, 0] = {{dt}}(xf * row(rstd) * col(f32(w)) + row(row_max(xf)))"),
              note=f"{_rows} x {_WIDE}: more elements per thread than one warp per row allows, so the "
                   "rows are split over warps (row layout `parts`) and reduced across them")

def _wide_stats(i: Arrays, dt: str) -> Arrays:
    x = i["X"]
    mean, var = x.mean(axis=1, keepdims=True), x.var(axis=1, keepdims=True)
    return {"Y": rnd((x - mean) / np.sqrt(var + 1e-5), dt)}


for _rows in (1, 2):
    construct(name=f"wide_stats_rows{_rows}", family="reductions", sizes={"N": _rows},
              params=f"X: gl<{{dt}}>[N, {_WIDE}], Y: gl<{{dt}}>[N, {_WIDE}]", outputs=("Y",), reference=_wide_stats,
              body=(f"reg x: rt<{{dt}}, {_rows}, {_WIDE}> = X[{{r}}, 0]\nlet xf = f32(x)\n"
                    "let mean = row_mean(xf)\nlet var = row_var(xf)\n"
                    "Y[{r}, 0] = {dt}((xf - row(mean)) * row(rsqrt(var + 1e-5)))"),
              note=f"{_rows} x {_WIDE}: row_mean and row_var of rows split over warps, the Welford sums "
                   "merged across them (Chan et al.)")


construct(name="short_rows8", family="reductions", sizes={"N": 8},
          params="X: gl<{dt}>[N, 64], YT: gl<{dt}>[64, N], S: gl<{dt}>[64]", outputs=("YT", "S"),
          reference=lambda i, dt: {"YT": rnd(i["X"].T, dt), "S": rnd(i["X"].sum(axis=0), dt)},
          body="reg x: rt<{dt}, 8, 64> = X[{r}, 0]\nYT[0, {r}] = x.T\nS[0] = col_sum(x)",
          note="a register tile of 8 rows (fewer than a base tile): transposed and column-summed")

# element-wise --------------------------------------------------------------------------------
_UNARY = {
    "exp": (np.exp, False), "exp2": (np.exp2, False), "log": (np.log, True), "log2": (np.log2, True),
    "sqrt": (np.sqrt, True), "rsqrt": (lambda x: 1 / np.sqrt(x), True), "abs": (np.abs, False),
    "tanh": (np.tanh, False), "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), False), "erf": (erf, False),
}
_NEW = ("tanh", "sigmoid", "erf")
for _op, (_fn, _pos) in _UNARY.items():
    construct(name=f"ew_{_op}", family="elementwise", params=TILE_IO, outputs=("Y",), positive=_pos,
              reference=(lambda fn: lambda i, dt: {"Y": rnd(fn(i["X"]), dt)})(_fn),
              body=f"reg x: rt<{{dt}}, 64, 64> = X[{{r}}, 0]\nY[{{r}}, 0] = {_op}(x)",
              note="NEW" if _op in _NEW else "")

_BIN_IO = "X: gl<{dt}>[N, 64], W: gl<{dt}>[N, 64], Y: gl<{dt}>[N, 64]"
_BINARY = {"add": ("x + w", np.add), "sub": ("x - w", np.subtract), "mul": ("x * w", np.multiply),
           "div": ("x / w", np.divide), "max": ("max(x, w)", np.maximum), "min": ("min(x, w)", np.minimum)}
for _op, (_expr, _fn) in _BINARY.items():
    construct(name=f"ew_{_op}", family="elementwise", params=_BIN_IO, outputs=("Y",), positive=_op == "div",
              reference=(lambda fn: lambda i, dt: {"Y": rnd(fn(i["X"], i["W"]), dt)})(_fn),
              body=f"reg x: rt<{{dt}}, 64, 64> = X[{{r}}, 0]\nreg w: rt<{{dt}}, 64, 64> = W[{{r}}, 0]\n"
                   f"Y[{{r}}, 0] = {_expr}")

for _to in DTYPES:
    construct(name=f"cast_to_{_to}", family="elementwise", params=f"X: gl<{{dt}}>[N, 64], Y: gl<{_to}>[N, 64]",
              outputs=("Y",), reference=(lambda to: lambda i, dt: {"Y": rnd(i["X"], to)})(_to),
              body=f"reg x: rt<{{dt}}, 64, 64> = X[{{r}}, 0]\nY[{{r}}, 0] = {_to}(x)",
              note=f"cast from the case's dtype to {_to}")

construct(name="where_relu", family="elementwise", params=TILE_IO, outputs=("Y",),
          reference=lambda i, dt: {"Y": np.where(i["X"] > 0, i["X"], 0.0)},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nY[{r}, 0] = where(x > 0, x, 0)",
          note="NEW: comparison and where")

# masks ---------------------------------------------------------------------------------------


def _causal(fill: float) -> Reference:
    def ref(i: Arrays, dt: str) -> Arrays:
        r = np.arange(i["X"].shape[0])[:, None] % TILE
        c = np.arange(TILE)[None, :]
        return {"Y": np.where(c > r, fill, i["X"])}
    return ref


construct(name="mask_causal", family="masks", params=TILE_IO, outputs=("Y",), reference=_causal(-np.inf),
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nY[{r}, 0] = mask_causal(x, {r} * 64, {r} * 64)",
          note="mask_causal(s, r0, c0): -inf above the diagonal")
construct(name="mask_causal_fill", family="masks", params=TILE_IO, outputs=("Y",), reference=_causal(0.0),
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nY[{r}, 0] = mask_causal(x, {r} * 64, {r} * 64, 0)",
          note="NEW: mask_causal(s, r0, c0, 0), fill 0")


def _ragged_max(i: Arrays, dt: str) -> Arrays:
    return {"Y": rnd(np.max(i["X"][:, 64:], axis=1), dt)}


construct(name="mask_cols_ragged", family="masks", params="X: gl<{dt}>[N, L], Y: gl<{dt}>[N]",
          outputs=("Y",), reference=_ragged_max, sizes={"L": 104},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 1]\nY[{r}] = row_max(where(col_index(x) + 64 < L, x, -inf))",
          note="index mask; L = 104 is not a multiple of the tile (rows stay 16-byte aligned, as register vector loads need); the row max must skip the fill")


def _window(i: Arrays, dt: str) -> Arrays:
    r = np.arange(i["X"].shape[0])[:, None] % TILE
    c = np.arange(TILE)[None, :]
    return {"Y": np.where(r - c < 16, i["X"], -np.inf)}


construct(name="mask_window", family="masks", params=TILE_IO, outputs=("Y",), reference=_window,
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nY[{r}, 0] = where(row_index(x) - col_index(x) < 16, x, -inf)",
          note="NEW: sliding window of 16 with row_index / col_index")

# control flow --------------------------------------------------------------------------------


def _if_ref(i: Arrays, dt: str) -> Arrays:
    y = rnd(i["X"] + i["X"], dt)
    y[:TILE] = i["X"][:TILE]
    return {"Y": y}


construct(name="if_runtime", family="control", params=TILE_IO, outputs=("Y",), reference=_if_ref,
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nif {r} == 0 {\n    Y[{r}, 0] = x\n} else {\n"
               "    Y[{r}, 0] = x + x\n}",
          note="NEW: run-time if / else on the tile index")
construct(name="if_runtime_carried", family="control", params=TILE_IO, outputs=("Y",), reference=_if_ref,
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nif {r} != 0 {\n    x = x + x\n}\nY[{r}, 0] = x",
          note="NEW: run-time if that assigns a register variable (carried)")


def _cols_sum(step: int) -> Reference:
    def ref(i: Arrays, dt: str) -> Arrays:
        x = i["X"]
        return {"Y": rnd(sum(x[:, j * TILE:(j + 1) * TILE] for j in range(0, x.shape[1] // TILE, step)), dt)}
    return ref


_SUM_IO = "X: gl<{dt}>[N, W], Y: gl<{dt}>[N, 64]"
construct(name="loop_runtime_bound", family="control", params=_SUM_IO, outputs=("Y",), reference=_cols_sum(1),
          sizes={"W": 256}, dtypes=("bf16", "f32"),
          body="reg s: rt<f32, 64, 64> = 0\nfor j in 0 .. cdiv(W, 64) {\n    reg t: rt<{dt}, 64, 64> = X[{r}, j]\n"
               "    s += f32(t)\n}\nY[{r}, 0] = {dt}(s)",
          note="a loop with a run-time bound carrying a register tile")
construct(name="loop_step", family="control", params=_SUM_IO, outputs=("Y",), reference=_cols_sum(2),
          sizes={"W": 256}, dtypes=("bf16", "f32"),
          body="reg s: rt<f32, 64, 64> = 0\nfor j in 0 .. cdiv(W, 64) step 2 {\n"
               "    reg t: rt<{dt}, 64, 64> = X[{r}, j]\n    s += f32(t)\n}\nY[{r}, 0] = {dt}(s)",
          note="NEW: for j in 0 .. n step 2")

# outer products (tk.outer: row_outer / col_outer; Based linear attention's feature map) -------
def _row_outer_ref(i: Arrays, dt: str) -> Arrays:
    x = i["X"]
    return {"Y": rnd(np.einsum("ri,rj->rij", x, x).reshape(x.shape[0], -1), dt)}


def _col_outer_ref(i: Arrays, dt: str) -> Arrays:
    x = i["X"]
    return {"Y": rnd(np.einsum("ic,jc->ijc", x, x).reshape(-1, x.shape[1]), dt)}


construct(name="row_outer", family="outer", params="X: gl<{dt}>[N, 16], Y: gl<{dt}>[N, 256]", outputs=("Y",),
          reference=_row_outer_ref, body="reg x: rt<{dt}, 64, 16> = X[{r}, 0]\nY[{r}, 0] = row_outer(x, x)",
          note="NEW: row_outer(x, x): r[i, 16p + q] = x[i, p] x[i, q], stored")
construct(name="col_outer", family="outer", params="X: gl<{dt}>[16, N], Y: gl<{dt}>[256, N]", outputs=("Y",),
          reference=_col_outer_ref, body="reg x: rt<{dt}, 16, 64> = X[0, {r}]\nY[0, {r}] = col_outer(x, x)",
          note="NEW: col_outer(x, x): r[16p + q, j] = x[p, j] x[q, j], stored")
construct(name="row_outer_mma", family="outer", params="A: gl<{dt}>[N, 16], B: gl<{dt}>[256, 64], Y: gl<{dt}>[N, 64]",
          outputs=("Y",), shared="shared b: st<{dt}, 256, 64>", refused_dtypes=F32_REFUSED,
          reference=lambda i, dt: {"Y": rnd(rnd(np.einsum("ri,rj->rij", i["A"], i["A"]).reshape(-1, 256), dt)
                                            @ i["B"], dt)},
          body="reg a: rt<{dt}, 64, 16> = A[{r}, 0]\nb = B[0, 0]\nreg acc: rt<f32, 64, 64> = 0\n"
               "acc += row_outer(a, a) @ b\nY[{r}, 0] = {dt}(acc)",
          note="NEW: a row_outer product as the register A of an mma (sliced wgmma, shuffles in the quad)")
construct(name="col_outer_mma", family="outer", params="K: gl<{dt}>[N, 16], V: gl<{dt}>[N, 64], Y: gl<{dt}>[256, N]",
          outputs=("Y",), shared="shared k: st<{dt}, 64, 16>\nshared v: st<{dt}, 64, 64>", refused_dtypes=F32_REFUSED,
          contexts=("top", "loop"),
          reference=lambda i, dt: {"Y": rnd(np.concatenate(
              [rnd(np.einsum("ci,cj->ijc", kk, kk).reshape(256, -1), dt) @ vv
               for kk, vv in zip(tiles(i["K"]), tiles(i["V"]), strict=True)], axis=1), dt)},
          body="k = K[{r}, 0]\nv = V[{r}, 0]\nlet kt = k.T\nreg acc: rt<f32, 256, 64> = 0\n"
               "acc += col_outer(kt, kt) @ v\nY[0, {r}] = {dt}(acc)",
          note="NEW: col_outer of a transposed shared read as the A of a 256-row mma (Based's state update)")

# integers: i32 / u32 tiles and vectors, row_argmax, gathers ---------------------------------------


def wrap(x: np.ndarray, dt: str) -> np.ndarray:
    """Exact integer results (float64 holding integers) reduced to 32 bits: two's complement for i32."""
    bits = np.asarray(x, np.float64).astype(np.int64) % 2**32
    return (bits - (bits >= 2**31) * 2**32 if dt == "i32" else bits).astype(np.float64)


def _tdiv(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(quotient, remainder) truncating toward zero, as tile `/` and `%` on integers."""
    q = np.trunc(a / b)
    return q, a - b * q


def _int_arith(i: Arrays, dt: str) -> Arrays:
    x, w = i["X"], i["W"]
    q, r = _tdiv(x, w)
    return {"Y": wrap(x * w + q - r + np.maximum(x, w) - np.minimum(x, 3), dt)}


def _bits_of(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """int_bits' expression on exact integers (the inputs are float64 holding 32-bit integers)."""
    x, w = x.astype(np.int64), w.astype(np.int64)
    return ((x & w | x ^ 1000) + (x << (w & 7)) ^ w >> 2).astype(np.float64)


def _cvt(x: np.ndarray, dt: str) -> np.ndarray:
    """float -> integer as PTX cvt.rzi: toward zero, saturating at the integer's range, NaN giving 0."""
    lo, hi = (-(2**31), 2**31 - 1) if dt == "i32" else (0, 2**32 - 1)
    return np.where(np.isnan(x), 0.0, np.trunc(np.clip(np.nan_to_num(x), lo, hi)))


_INT_IO = "X: gl<{dt}>[N, 64], Y: gl<{dt}>[N, 64]"
construct(name="int_copy", family="integers", params=_INT_IO, outputs=("Y",), reference=_copy, dtypes=INT_DTYPES,
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nY[{r}, 0] = x",
          note="NEW: an integer tile declared, loaded and stored")
construct(name="int_vec_copy", family="integers", params="X: gl<{dt}>[N], Y: gl<{dt}>[N]", outputs=("Y",),
          reference=_copy, dtypes=INT_DTYPES, body="reg v: rv<{dt}, 64> = X[{r}]\nY[{r}] = v",
          note="NEW: an integer vector declared, loaded and stored")
construct(name="int_shared", family="integers", params=_INT_IO, outputs=("Y",), reference=_copy, dtypes=INT_DTYPES,
          shared="shared a: st<{dt}, 64, 64>",
          body="a = X[{r}, 0]\nreg x: rt<{dt}, 64, 64> = a\na = x\nY[{r}, 0] = a",
          note="NEW: global -> shared (TMA on sm_90a, cp.async on sm_80) -> registers -> shared -> global")
construct(name="int_arith", family="integers", params="X: gl<{dt}>[N, 64], W: gl<{dt}>[N, 64], Y: gl<{dt}>[N, 64]",
          outputs=("Y",), reference=_int_arith, dtypes=INT_DTYPES, positive=True,
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nreg w: rt<{dt}, 64, 64> = W[{r}, 0]\n"
               "Y[{r}, 0] = x * w + x / w - x % w + max(x, w) - min(x, 3)",
          note="NEW: + - * / % min max on 32 bits (u32: unsigned; a result below 0 wraps)")
construct(name="int_bits", family="integers", params="X: gl<{dt}>[N, 64], W: gl<{dt}>[N, 64], Y: gl<{dt}>[N, 64]",
          outputs=("Y",), dtypes=INT_DTYPES,
          # in exact Python integers with the kernel's precedence (Python's), then reduced to 32 bits: and, or, xor,
          # +, << have low bits that depend only on the operands' low bits; >> is of an input (signed for i32)
          reference=lambda i, dt: {"Y": wrap(_bits_of(i["X"], i["W"]), dt)},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nreg w: rt<{dt}, 64, 64> = W[{r}, 0]\n"
               "Y[{r}, 0] = (x & w | x ^ 1000) + (x << (w & 7)) ^ w >> 2",
          note="NEW: the bit operators & | ^ << >> (a count from a tile; u32: logical >>)")
def _scalar_bits(r: int) -> int:
    """int_scalar_bits' s for row tile r, as the GPU computes it on i32 (shl by 32 or more gives 0)."""
    b = r + 5
    shl = lambda a, n: 0 if n >= 32 else a << n  # noqa: E731 - counts here are 0 .. 42, never negative
    return ((shl(b, 3)) | (b & 1)) ^ ((~b >> 1) + shl(b, b * 7))


construct(name="int_scalar_bits", family="integers", params=_INT_IO, outputs=("Y",), dtypes=INT_DTYPES,
          reference=lambda i, dt: {"Y": wrap(i["X"] + np.array([[_scalar_bits(row // TILE)] for row in
                                                                  range(i["X"].shape[0])], np.float64), dt)},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nlet b = {r} + 5\n"
               "let s = ((b << 3) | (b & 1)) ^ ((~b >> 1) + (b << (b * 7)))\nY[{r}, 0] = x + {dt}(s)",
          note="NEW: the bit operators on run-time i32 scalars (a count of 35 and 42: 0), cast to the tile's dtype")

construct(name="int_where", family="integers",
          params="X: gl<{dt}>[N, 64], V: gl<{dt}>[64], Y: gl<{dt}>[N, 64]", outputs=("Y",), dtypes=INT_DTYPES,
          reference=lambda i, dt: {"Y": np.where(i["X"] < i["V"][None, :], i["X"], wrap(i["X"] * 2 - 7, dt))},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nreg v: rv<{dt}, 64> = V[0]\n"
               "Y[{r}, 0] = where(x < col(v), x, x * 2 - 7)",
          note="NEW: a comparison with a broadcast vector (unsigned for u32) and where")
construct(name="int_from_float", family="integers", params="X: gl<f32>[N, 64], Y: gl<{dt}>[N, 64]", outputs=("Y",),
          dtypes=INT_DTYPES, reference=lambda i, dt: {"Y": _cvt(i["X"].astype(np.float32) * np.float32(300), dt)},
          body="reg x: rt<f32, 64, 64> = X[{r}, 0]\nY[{r}, 0] = {dt}(x * 300.0)",
          note="NEW: float -> integer toward zero, saturating (u32: negatives give 0)")
construct(name="int_to_float", family="integers", params="X: gl<{dt}>[N, 64], Y: gl<f32>[N, 64], Z: gl<bf16>[N, 64]",
          outputs=("Y", "Z"), dtypes=INT_DTYPES,
          reference=lambda i, dt: {"Y": i["X"], "Z": rnd(i["X"], "bf16")},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nY[{r}, 0] = f32(x)\nZ[{r}, 0] = bf16(x)",
          note="NEW: integer -> f32 and bf16 (to nearest even)")
construct(name="row_argmax", family="integers", params="X: gl<{dt}>[N, 64], Y: gl<i32>[N], Z: gl<i32>[N]",
          outputs=("Y", "Z"),
          reference=lambda i, dt: {"Y": np.argmax(i["X"], axis=1).astype(np.float64),
                                   "Z": np.argmin(i["X"], axis=1).astype(np.float64)},
          body="reg x: rt<{dt}, 64, 64> = X[{r}, 0]\nY[{r}] = row_argmax(x)\nZ[{r}] = row_argmin(f32(x))",
          note="NEW: row_argmax / row_argmin of a float tile: rv<i32> (first occurrence on ties, as torch)")
construct(name="gather_rows", family="integers",
          params="X: gl<{dt}>[N, 64], I: gl<u32>[N], Y: gl<{dt}>[N, 64]", outputs=("Y",),
          reference=lambda i, dt: {"Y": i["X"][i["I"].astype(np.int64) % i["X"].shape[0]]},
          body="reg ids: rv<u32, 64> = I[{r}]\nlet rows = ids % u32(N)\nreg e: rt<{dt}, 64, 64> = X[rows, 0]\n"
               "Y[{r}, 0] = e",
          note="NEW: a gather X[idx, 0]: rows picked by a vector of (u32) indices")

# dtypes: fp8 (e4m3, e5m2) -------------------------------------------------------------------------
FP8_MMA_SM80 = {"sm_80": "fp8 '@' needs sm_90a's wgmma (legalize-mma's located refusal)"}


def sat(x: np.ndarray, dt: str) -> np.ndarray:
    """x rounded to fp8 dt as e4m3(x) / e5m2(x) round: saturated to the largest finite value, then nearest
    even (tkir/scalar.py round_fp8), back in float64."""
    top = float(ml_dtypes.finfo(NP_DTYPES[dt]).max)
    return rnd(np.clip(x, -top, top), dt)


construct(name="fp8_mma", family="dtypes", params="A: gl<{dt}>[N, 64], B: gl<{dt}>[64, 64], Y: gl<bf16>[N, 64]",
          outputs=("Y",), shared=_ACC, dtypes=FP8_DTYPES, refused_targets=FP8_MMA_SM80,
          reference=lambda i, dt: {"Y": rnd(i["A"] @ i["B"].T, "bf16")},
          body="a = A[{r}, 0]\nb = B[0, 0]\nreg acc: rt<f32, 64, 64> = 0\nacc += a @ b.T\nY[{r}, 0] = bf16(acc)",
          note="fp8 `a @ b.T` (A M x K, B N x K: both K-major, 64-byte rows: 64B swizzle): wgmma k32 on sm_90a")
construct(name="fp8_mma_mixed", family="dtypes",
          params="A: gl<{dt}>[N, 128], B: gl<e5m2>[64, 128], S: gl<f32>[64], Y: gl<bf16>[N, 64]",
          outputs=("Y",), shared="shared a: st<{dt}, 64, 128>\nshared b: st<e5m2, 64, 128>", dtypes=FP8_DTYPES,
          refused_targets=FP8_MMA_SM80,
          reference=lambda i, dt: {"Y": rnd((i["A"] @ i["B"].T) * i["S"][None, :], "bf16")},
          body="a = A[{r}, 0]\nb = B[0, 0]\nreg acc: rt<f32, 64, 64> = 0\nacc += a @ b.T\n"
               "reg s: rv<f32, 64> = S[0]\nY[{r}, 0] = bf16(acc * col(s))",
          note="{dt} A x e5m2 B (128-byte rows: 128B swizzle), scaled per column: the fp8 GEMM's epilogue")
construct(name="fp8_mma_register_a", family="dtypes",
          params="A: gl<{dt}>[N, 64], B: gl<{dt}>[64, 64], C: gl<{dt}>[64, 64], Y: gl<bf16>[N, 64]",
          outputs=("Y",), shared="shared a: st<{dt}, 64, 64>\nshared b: st<{dt}, 64, 64>\nshared c: st<{dt}, 64, 64>",
          dtypes=FP8_DTYPES, refused_targets=FP8_MMA_SM80,
          reference=lambda i, dt: {"Y": rnd(sat((i["A"] @ i["B"].T) * 0.125, dt) @ i["C"].T, "bf16")},
          body="a = A[{r}, 0]\nb = B[0, 0]\nc = C[0, 0]\nreg s: rt<f32, 64, 64> = 0\ns += a @ b.T\n"
               "reg y: rt<f32, 64, 64> = 0\ny += {dt}(s * 0.125) @ c.T\nY[{r}, 0] = bf16(y)",
          note="NEW: a product's result cast to fp8 as the next product's register A (attention's P · V): "
               "shuffled into the 8-bit A fragment, wgmma's RS form")
construct(name="fp8_cast_down", family="dtypes", params="X: gl<f32>[N, 64], Y: gl<{dt}>[N, 64], Z: gl<bf16>[N, 64]",
          outputs=("Y", "Z"), dtypes=FP8_DTYPES,
          reference=lambda i, dt: {"Y": sat(i["X"] * 200.0, dt), "Z": rnd(sat(rnd(i["X"] * 200.0, "bf16"), dt), "bf16")},
          body="reg x: rt<f32, 64, 64> = X[{r}, 0]\nY[{r}, 0] = {dt}(x * 200.0)\nZ[{r}, 0] = bf16({dt}(bf16(x * 200.0)))",
          note="f32 and bf16 -> fp8, saturating (|200 x| past 448 becomes 448 for e4m3)")
construct(name="fp8_cast_up", family="dtypes", params="X: gl<{dt}>[N, 64], Y: gl<f32>[N, 64]",
          outputs=("Y",), dtypes=FP8_DTYPES, shared="shared s: st<{dt}, 64, 64>",
          reference=lambda i, dt: {"Y": i["X"] * 2.0 + i["X"]},
          body="s = X[{r}, 0]\nreg x: rt<{dt}, 64, 64> = s\nreg y: rt<f32, 64, 64> = f32(x) * 2.0\n"
               "Y[{r}, 0] = y + f32(bf16(x))",
          note="fp8 through a shared tile to registers, then to f32 and bf16 (exact)")
construct(name="fp8_copies", family="dtypes", params=TILE_IO, outputs=("Y",), reference=_copy, dtypes=FP8_DTYPES,
          shared="shared a: st<{dt}, 64, 64>\nshared b: st<{dt}, 64, 64>",
          body="a = X[{r}, 0]\nreg x: rt<{dt}, 64, 64> = a\nb = x\nY[{r}, 0] = b",
          note="fp8 global -> shared -> registers -> shared -> global")
construct(name="fp8_vectors", family="dtypes", params=f"{VEC_IO}, Z: gl<f32>[N]", outputs=("Y", "Z"),
          reference=lambda i, dt: {"Y": i["X"], "Z": i["X"] * 0.5},
          dtypes=FP8_DTYPES, shared="shared s: sv<{dt}, 64>",
          body="s = X[{r}]\nreg v: rv<{dt}, 64> = s\nY[{r}] = v\nZ[{r}] = f32(v) * 0.5",
          note="fp8 vectors: global -> shared -> registers -> global, and cast")


def all_cases() -> list[Case]:
    """Every (construct, context, dtype, target) the table defines."""
    return [Case(c, ctx, dt, t) for c in CONSTRUCTS for ctx in c.contexts for dt in c.dtypes for t in TARGETS]


def families() -> list[str]:
    return list(dict.fromkeys(c.family for c in CONSTRUCTS))


# The swizzle family lives in its own module; importing it registers its constructs (it imports
# `construct` from here, so it comes last).
from conformance import cases_swizzle  # noqa: E402, F401
