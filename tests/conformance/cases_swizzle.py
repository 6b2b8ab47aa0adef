"""The `swizzle` family of the conformance table: every swizzle forced on shared tiles, at its boundaries.

`@swizzle(32|64|128|none)` pins a shared tile's layout (select-swizzle keeps it or refuses it with a
located error), so each swizzle meets every consumer that reads shared memory in it:

* TMA loads read by the threads (`a = X[..]; x = a`) and thread writes stored by TMA (`a = x; Y[..] = a`),
  with rows of exactly the swizzle span and of twice it (two column panels, two TMA boxes per copy);
* wgmma operands (sm_90a; mma.sync through ldmatrix on sm_80), both operands pinned, in all four forms
  (shared @ shared, shared.T @ shared, shared @ shared.T, register @ shared), with the K-major operand's
  rows and the MN-major B's rows exactly the span, and twice it;
* a `@stages(2)` GEMM loop whose pinned tiles are ring-buffered and filled by the producer's TMA;
* TMA boxes at their limits: 256 rows, 256 elements wide (unswizzled), a 512-row tile (more rows than
  a box holds: create-tma keeps it off TMA, `no_tma_reason`), and tensors 1 row below and above a tile
  multiple (out-of-bounds fill on loads, clipped stores). Columns cannot be ragged by 1 under TMA:
  row strides must be multiples of 16 bytes (the runtime refuses them).

Every construct runs in bf16 and f16 (the 2-byte dtypes: the same rows in bytes, the same boxes, both
mma operand types), the copies and boxes in f32 too where its rows are wide enough.

The interpreter is layout-blind, so on the CPU these cases check that each compiles, assembles and
computes its reference; EXPECTED_TMA says which descriptors (swizzle, box, boxes per copy) each one
must get on sm_90a in either 2-byte dtype, checked by test_conformance.py; the GPU half runs them all
against the interpreter.
"""

from __future__ import annotations

from conformance.cases import Arrays, Reference, construct, rnd

SWIZZLES = (32, 64, 128, "none")
ELEMENT_BYTES = {"bf16": 2, "f16": 2, "f32": 4}
HALF_DTYPES = ("bf16", "f16")  # the 2-byte dtypes: the same rows, boxes and descriptors, and both are mma operands
MIN_TILE_COLS = 16  # the front end's smallest tile dimension (tiles are multiples of 16)
# Row widths in bytes per swizzle: exactly the span, then two panels. `none` (0, plain rows; 16, the
# interleaved layout, for wgmma operands): a 32-byte and a 128-byte row.
ROW_BYTES = {32: (32, 64), 64: (64, 128), 128: (128, 256), "none": (32, 128)}
COPY_CONTEXTS = ("top", "loop", "in_pipelined_loop")
MMA_CONTEXTS = ("top", "in_pipelined_loop")

# construct name -> {tensor: (swizzle, box, boxes per copy)} the sm_90a "top" case must hold, or
# {tensor: None} for a copy that must stay off TMA.
EXPECTED_TMA: dict[str, dict[str, tuple[int, list[int], int] | None]] = {}


def _copy(i: Arrays, dt: str) -> Arrays:
    return {"Y": i["X"]}


def _span(swizzle: int | str) -> int:
    return 0 if swizzle == "none" else int(swizzle)


def _panels(swizzle: int | str, row_bytes: int, elem: int) -> tuple[int, list[int], int]:
    """(descriptor swizzle, inner box elements, boxes) of a 64-row TMA copy of rows of `row_bytes`."""
    span = _span(swizzle)
    if span == 0 or row_bytes <= span:
        return span, [row_bytes // elem, 64], 1
    return span, [span // elem, 64], row_bytes // span


# copies: TMA -> shared -> threads, threads -> shared -> TMA ----------------------------------------
for _s in SWIZZLES:
    for _w in ROW_BYTES[_s]:
        _dtypes = tuple(dt for dt in ("bf16", "f16", "f32") if _w // ELEMENT_BYTES[dt] >= MIN_TILE_COLS)
        _c = {dt: _w // ELEMENT_BYTES[dt] for dt in _dtypes}
        for _op, _body, _tensor in (
                ("tma_s2r", "a = X[{r}, 0]\nreg x: rt<{dt}, 64, C>\nx = a\nY[{r}, 0] = x", "X"),
                ("r2s_tma", "reg x: rt<{dt}, 64, C> = X[{r}, 0]\na = x\nY[{r}, 0] = a", "Y")):
            for _dt in _dtypes:  # the columns depend on the dtype: one construct per dtype, same name
                _name = f"swz{_s}_w{_w}B_{_op}"
                construct(name=_name, family="swizzle", dtypes=(_dt,), contexts=COPY_CONTEXTS,
                          params=f"X: gl<{{dt}}>[N, {_c[_dt]}], Y: gl<{{dt}}>[N, {_c[_dt]}]", outputs=("Y",),
                          reference=_copy, shared=f"@swizzle({_s}) shared a: st<{{dt}}, 64, {_c[_dt]}>",
                          body=_body.replace("C", str(_c[_dt])),
                          note=f"@swizzle({_s}) on a tile of {_w}-byte rows: "
                               + ("TMA load, read by the threads" if _op == "tma_s2r"
                                  else "written by the threads, TMA store"))
                if _dt in HALF_DTYPES:
                    EXPECTED_TMA[_name] = {_tensor: _panels(_s, _w, 2)}


# wgmma / mma.sync operands --------------------------------------------------------------------------


def _mma_ref(a_t: bool, b_t: bool) -> Reference:
    def ref(i: Arrays, dt: str) -> Arrays:
        a = i["At"].T if a_t else i["A"]
        b = i["Bt"].T if b_t else i["B"]
        return {"Y": rnd(a @ b, dt)}
    return ref


_FORMS = {"ss": "a @ b", "tA": "a.T @ b", "tB": "a @ b.T", "rs": "a @ b"}
for _s in SWIZZLES:
    for _w in ROW_BYTES[_s] if _s != "none" else (32, 128):
        _k = _nb = _w // 2  # 2-byte elements: the K-major operand's rows and B's rows (MN-major) are _w bytes
        for _form, _expr in _FORMS.items():
            a_t, b_t = _form == "tA", _form == "tB"
            _params = [f"At: gl<{{dt}}>[{_k}, N]" if a_t else f"A: gl<{{dt}}>[N, {_k}]",
                       f"Bt: gl<{{dt}}>[{_nb}, {_k}]" if b_t else f"B: gl<{{dt}}>[{_k}, {_nb}]",
                       f"Y: gl<{{dt}}>[N, {_nb}]"]
            _a_src = "At[0, {r}]" if a_t else "A[{r}, 0]"
            _shared, _body = [], []
            if _form == "rs":
                _body.append(f"reg a: rt<{{dt}}, 64, {_k}> = {_a_src}")
            else:
                _shared.append(f"@swizzle({_s}) shared a: st<{{dt}}, {_k if a_t else 64}, {64 if a_t else _k}>")
                _body.append(f"a = {_a_src}")
            _shared.append(f"@swizzle({_s}) shared b: st<{{dt}}, {_nb if b_t else _k}, {_k if b_t else _nb}>")
            _body += ["b = Bt[0, 0]" if b_t else "b = B[0, 0]", f"reg acc: rt<f32, 64, {_nb}> = 0",
                      f"acc += {_expr}", "Y[{r}, 0] = {dt}(acc)"]
            _name = f"swz{_s}_mma_{_form}_k{_k * 2}B_n{_nb * 2}B"
            construct(name=_name, family="swizzle", dtypes=HALF_DTYPES, contexts=MMA_CONTEXTS, params=", ".join(_params),
                      outputs=("Y",), reference=_mma_ref(a_t, b_t), shared="\n".join(_shared), body="\n".join(_body),
                      note=f"@swizzle({_s}) on both operands of {_expr} ({'A from registers, ' if _form == 'rs' else ''}"
                           f"K = {_k}, N = {_nb}: rows of {_k * 2} B along K, {_nb * 2} B along N)")
            _b_row, _a_row = (_k * 2 if b_t else _nb * 2), (128 if a_t else _k * 2)
            # an unswizzled wgmma operand is interleaved: one 16-byte-wide box per column chunk
            _b = (0, [8, _nb if b_t else _k], _b_row // 16) if _s == "none" else _panels(_s, _b_row, 2)
            _b = (_b[0], [_b[1][0], _nb if b_t else _k], _b[2])
            EXPECTED_TMA[_name] = {"Bt" if b_t else "B": _b}
            if _form != "rs":
                _a = (0, [8, _k if a_t else 64], _a_row // 16) if _s == "none" else _panels(_s, _a_row, 2)
                EXPECTED_TMA[_name]["At" if a_t else "A"] = (_a[0], [_a[1][0], _k if a_t else 64], _a[2])


# a pipelined GEMM loop over pinned, ring-buffered tiles ------------------------------------------------
for _s in SWIZZLES:
    _bk = 16 if _s == "none" else _span(_s) // 2  # A's rows along K: exactly the span
    _name = f"swz{_s}_gemm_loop_bk{_bk}"
    construct(name=_name, family="swizzle", dtypes=HALF_DTYPES, contexts=("top",), sizes={"N": 129, "KK": 4 * _bk},
              params="A: gl<{dt}>[N, KK], B: gl<{dt}>[KK, 64], Y: gl<{dt}>[N, 64]", outputs=("Y",),
              reference=lambda i, dt: {"Y": rnd(i["A"] @ i["B"], dt)},
              shared=f"@swizzle({_s}) shared a: st<{{dt}}, 64, {_bk}>\n@swizzle({_s}) shared b: st<{{dt}}, {_bk}, 64>",
              body=(f"reg acc: rt<f32, 64, 64> = 0\n@stages(2)\nfor k in 0 .. cdiv(KK, {_bk}) {{\n"
                    "    a = A[{r}, k]\n    b = B[k, 0]\n    acc += a @ b\n}\nY[{r}, 0] = {dt}(acc)"),
              note=f"@stages(2) GEMM over K = {4 * _bk} in steps of {_bk}, both tiles @swizzle({_s}) and "
                   "ring-buffered (TMA by the producer on sm_90a), M = 129 (a partial last row tile)")
    if _s != "none":
        EXPECTED_TMA[_name] = {"A": _panels(_s, 2 * _bk, 2), "B": (_span(_s), [_span(_s) // 2, _bk], 128 // _span(_s))}


# TMA boxes at their limits, and ragged extents -------------------------------------------------------
_S2R = "a = X[{r}, 0]\nreg x: rt<{dt}, R, C>\nx = a\nY[{r}, 0] = x"
_R2S = "reg x: rt<{dt}, R, C> = X[{r}, 0]\na = x\nY[{r}, 0] = a"
for _op, _body, _tensor in (("s2r", _S2R, "X"), ("r2s", _R2S, "Y")):
    construct(name=f"box256_rows_{_op}", family="swizzle", dtypes=("bf16", "f16", "f32"), contexts=("top", "loop"),
              rows=256, sizes={"N": 511}, params="X: gl<{dt}>[N, 64], Y: gl<{dt}>[N, 64]", outputs=("Y",),
              reference=_copy, shared="@swizzle(128) shared a: st<{dt}, 256, 64>",
              body=_body.replace("R", "256").replace("C", "64"),
              note="a 256-row tile: a TMA box of exactly 256 rows (the most a box dimension holds); N = 511")
    EXPECTED_TMA[f"box256_rows_{_op}"] = {_tensor: (128, [64, 256], 1)}
    construct(name=f"box256_cols_{_op}", family="swizzle", dtypes=HALF_DTYPES, contexts=("top", "loop"),
              params="X: gl<{dt}>[N, 256], Y: gl<{dt}>[N, 256]", outputs=("Y",), reference=_copy,
              shared="@swizzle(none) shared a: st<{dt}, 64, 256>", body=_body.replace("R", "64").replace("C", "256"),
              note="an unswizzled tile 256 elements wide: one box of exactly 256 elements along the row")
    EXPECTED_TMA[f"box256_cols_{_op}"] = {_tensor: (0, [256, 64], 1)}
    construct(name=f"rows512_{_op}", family="swizzle", dtypes=HALF_DTYPES, contexts=("top",), rows=512,
              sizes={"N": 1000}, params="X: gl<{dt}>[N, 64], Y: gl<{dt}>[N, 64]", outputs=("Y",), reference=_copy,
              shared="@swizzle(128) shared a: st<{dt}, 512, 64>", body=_body.replace("R", "512").replace("C", "64"),
              note="a 512-row tile needs two boxes along its rows, which create-tma does not split: the copy "
                   "stays off TMA (no_tma_reason 'box dim 512 rows > 256') and must still be right")
    EXPECTED_TMA[f"rows512_{_op}"] = {_tensor: None}
    for _n in (127, 129):
        construct(name=f"ragged_n{_n}_{_op}", family="swizzle", dtypes=("bf16", "f16", "f32"), contexts=("top", "loop"),
                  sizes={"N": _n}, params="X: gl<{dt}>[N, 64], Y: gl<{dt}>[N, 64]", outputs=("Y",), reference=_copy,
                  shared="@swizzle(128) shared a: st<{dt}, 64, 64>", body=_body.replace("R", "64").replace("C", "64"),
                  note=f"N = {_n}, one row {'below' if _n < 128 else 'above'} a tile multiple: TMA zero fill on "
                       "the load, a clipped store")
        EXPECTED_TMA[f"ragged_n{_n}_{_op}"] = {_tensor: (128, [64, 64], 1)}
