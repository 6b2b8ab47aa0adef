"""`tkc report`: the compiler's decisions read back from the IR, as a dict (JSON) or aligned text.

Keys of `build_report(module)` (absent when the IR has nothing for them):
* `shared_tiles`: per `tk.alloc`: name, dtype, shape, swizzle (bytes, 0 = none), align, bytes; per `tk.reuse`
  (reuse-smem) the same and `in`, the tile whose memory it takes
  (select-swizzle's type attributes; bytes include bank-conflicts' row padding);
* `accesses`: per shared access (bank-conflicts' `access` attributes, read as
  tkir/access_report.py AccessReports): op, tile, degree, degree_before, hardware;
* `register_tiles`: per rt/rv value: name, dtype, shape, layout (its IR text), regs_per_thread
  (32-bit registers per thread, from tkir.layout);
* `tma`: per module-level `tma.desc`: name, tensor, dtype, dims, strides, box, swizzle, oob_fill;
* `register_copies`: per tk.load / tk.store between a register tile or vector and global memory (not
  TMA): op, tensor, tile, access (`16-byte vectors`, `8-byte`, `4-byte`, or `element-wise`), l2 (the L2
  priority cache-policy gave a load, `-` for none), and for its
  rows and columns either `tested` or the proof that the index stays inside (tkir/bounds.py; the
  backend leaves those tests out, and only for vector copies);
* `cp_async_loops`: per loop pipeline-cp-async rewrote (sm_80's cp.async main loop): stages, ahead (the
  k-tiles in flight: S-1, or S-2 with a held stage), rotate (the mma.sync units before the end of the
  k-tile at which the rotated loop waits, 0: at the top), fragments (the units ahead of their mma.syncs its
  ldmatrix fragments are loaded: the mma's `frag_ahead`, or `rule` for the backend's default), a_ahead (a k16
  step's A loaded a unit ahead: true, false, or `rule` for the backend's own);
* `occupancy`: the kernel's `occupancy` attribute: stages, blocks_per_sm, smem_bytes and roles
  (role, warpgroups or warps, regs_per_thread; an sm_80 role is sized in warps, a Hopper one in warpgroups);
  once the backend has run, the CLI adds `minnctapersm`: the blocks per SM the PTX asks ptxas to hold
  (`ptx_min_blocks`), which is more than the plan's where a kernel without warp roles streams two blocks
  (tkir/launch_bounds.py streaming_blocks_per_sm) and fewer where ptxas spilled at the plan's (`spill_fallback`).

`register_comparison(module, ptxas, sass)` (the CLI adds it as `registers` once ptxas has run) puts
plan-occupancy's prediction for the computing role (consumer or compute) beside ptxas's count:
`predicted` (the role's `regs`: the setmaxnreg value, or the budget rounded up to 8), `predicted_total`
(the `occupancy.budget` sum before rounding), `budget`, `ptxas` ("Used N registers": for a kernel
with setmaxnreg that is the launch allocation, 65536 / threads rounded down to 8 and at most 255, not
what the consumer uses), `sass_regs` (1 + the highest R register the SASS names: what the busiest
role's code is allocated), `sass_live_peak` (the most registers live at one instruction of the kernel
body, from `nvdisasm --print-life-ranges --life-range-mode count`: the measured pressure the budget
predicts) and `within_10pct` (|ptxas - predicted| <= 10% of predicted).

`spill_fallback(module)` (the CLI adds it as `spill_fallback` once the backend has run): the blocks per SM the
backend gave up because ptxas spilled there (backend/lower.py avoid_spills): blocks_per_sm (asked of ptxas
first), to (what the kernel asks for instead: the highest spill-free count, or the least spilling one),
spill_bytes and registers (ptxas's report at blocks_per_sm), spill_bytes_to (what ptxas still spills at `to`:
0 but where every lower count spills) and ptxas_runs (the assemblies the search took).
"""

from __future__ import annotations

import re

from tkir.access_report import reports_of
from tkir.bounds import copy_edge_proofs, why_in_bounds
from tkir.facts import MULTICAST_ATTR, OccupancyPlan
from tkir.ir import Module, Operation, Value
from tkir.layout import SWIZZLE_ALIGN, layout_of, regs_per_thread, vector_access_bytes
from tkir.opdef import RED_VEC_ATTR
from tkir.requires import row_piece_tensors
from tkir.types import GlobalType, TileType, VectorType, format_attr_value, is_register, is_shared

TMA_KEYS = ("tensor", "dtype", "dims", "strides", "box", "swizzle", "oob_fill")
AUTO_ATTRS = ("auto", "auto_sizes", "auto_predicted", "auto_runner_up", "auto_refused")  # tkir.api writes them
REGISTER_TOLERANCE = 0.10  # a prediction within 10% of ptxas counts as right (docs/passes.md, plan-occupancy)
COMPUTING_ROLES = ("consumer", "compute")  # the roles whose registers plan-occupancy counts
_SASS_REGISTER = re.compile(r"\bR(\d+)\b")  # R0..R254; RZ (the zero register) does not match
_LIFE_RANGE_COUNT = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/.*//\s*\|\s*(\d+)\s*\|")  # `/*0490*/ ... // |  38  |`


def build_report(module: Module) -> dict:
    """The report of an already-compiled module (run the passes first)."""
    rep: dict[str, object] = {"shared_tiles": [], "accesses": [], "register_tiles": [], "register_copies": []}
    for kernel in module.kernels():
        names = _printed_names(kernel)
        for op in kernel.walk():
            copy = _register_copy(op, kernel, names)
            if copy is not None:
                rep["register_copies"].append(copy)
            if op.name == "tk.alloc" and is_shared(op.result.type):
                rep["shared_tiles"].append(_shared_tile(op.result, names))
            elif op.name == "tk.reuse":  # reuse-smem: the tile lives in a dead tile's memory (no bytes of its own)
                rep["shared_tiles"].append({**_shared_tile(op.result, names), "in": names[id(op.operands[0])]})
            for a in reports_of(op.attrs):
                rep["accesses"].append({"op": a.op, "tile": a.tile, "degree": a.degree,
                                        "degree_before": a.degree_before, "hardware": a.hardware})
            for v in op.results:
                if is_register(v.type) and v.type.get("layout") is not None:
                    rep["register_tiles"].append(_register_tile(v, names))
        loops = [_cp_async_loop(op) for op in kernel.walk()
                 if op.name == "scf.for" and op.body.ops and op.body.ops[0].name == "pipe.async_wait"]
        if loops:
            rep.setdefault("cp_async_loops", []).extend(loops)
        plan = OccupancyPlan.of(kernel)
        if plan is not None:
            rep["occupancy"] = _occupancy(plan)
        mc = _multicast(kernel, names)
        if mc is not None:
            rep["multicast"] = mc
        if kernel.attrs.get("auto"):  # the compiler's choice of the auto consts (tkir/tools/auto_consts.py)
            rep["auto_consts"] = {k.removeprefix("auto_") if k != "auto" else "chosen": kernel.attrs[k]
                                  for k in AUTO_ATTRS if k in kernel.attrs}
    tma = [_tma(op) for op in module.ops if op.name == "tma.desc"]
    if tma:
        rep["tma"] = tma
    descs = [op for op in module.ops if op.name == "tma.desc"]
    rows = {n: b for k in module.kernels() for n, b in row_piece_tensors(k, descs).items()}
    if rows:  # the launch's `unaligned` list: rows these pieces do not fit take the variant
        rep["unaligned_rows"] = rows
    return rep


def _multicast(kernel: Operation, names: dict[int, str]) -> dict | None:
    """passes/multicast.py's decision: the cluster and the tiles its CTAs share, or why it declined; None where
    the pass did not run or had nothing to say."""
    mc = kernel.attrs.get(MULTICAST_ATTR)
    if isinstance(mc, dict):
        shared = [names.get(id(_stage_source(op.operands[0])), "?") for op in kernel.walk()
                  if op.name == "pipe.copy" and isinstance(op.attrs.get("multicast"), dict)]
        out = {"ctas": int(mc.get("ctas", 1)), "shared": list(dict.fromkeys(shared))}
        why = kernel.attrs.get("multicast_why")  # multicast{auto=true}: the prediction that took it
        return {**out, "why": str(why)} if why else out
    why = kernel.attrs.get("multicast_skipped")
    return {"skipped": str(why)} if why else None


def _stage_source(v: Value) -> Value:
    """The ring buffer a `pipe.stage` view is of (the tile as the source names it), else `v`."""
    d = v.owner
    return d.operands[0] if isinstance(d, Operation) and d.name == "pipe.stage" else v


def format_report(report: dict) -> str:
    """Aligned text tables, one section per key."""
    out: list[str] = []
    out += _section("shared tiles", ["name", "dtype", "shape", "swizzle", "align", "bytes"],
                    [[t["name"], t["dtype"], "x".join(map(str, t["shape"])),
                      f"{t['swizzle']}B" if t["swizzle"] else "none", t["align"],
                      f"{t['bytes']} in {t['in']}" if t.get("in") else t["bytes"]]
                     for t in report.get("shared_tiles", [])])
    out += _section("shared accesses", ["op", "tile", "degree", "before", "path"],
                    [[a["op"], a["tile"], f"{a['degree']}-way", f"{a['degree_before']}-way",
                      "hardware" if a.get("hardware") else "threads"]
                     for a in report.get("accesses", [])])
    out += _section("register tiles", ["name", "type", "layout", "regs/thread"],
                    [[r["name"], f"{r['dtype']}[{'x'.join(map(str, r['shape']))}]", r["layout"],
                      r["regs_per_thread"]] for r in report.get("register_tiles", [])])
    out += _section("register copies (global memory)", ["op", "tensor", "tile", "access", "L2", "rows", "cols"],
                    [[c["op"], c["tensor"], c["tile"], c["access"], c.get("l2", "-"), c["rows"], c["cols"]]
                     for c in report.get("register_copies", [])])
    if "tma" in report:
        out += _section("tma descriptors", ["name", *TMA_KEYS],
                        [[d["name"], *(_cell(d[k]) for k in TMA_KEYS)] for d in report["tma"]])
    if report.get("cp_async_loops"):  # sm_80's cp.async main loops only: no "none" section elsewhere
        out += _section("cp.async main loops", ["stages", "ahead", "rotate", "fragments", "a_ahead"],
                        [[lp["stages"], lp["ahead"], lp["rotate"], lp["fragments"],
                          {True: "true", False: "false"}.get(lp["a_ahead"], lp["a_ahead"])]
                         for lp in report["cp_async_loops"]])
    if "occupancy" in report:
        occ = report["occupancy"]
        asked = occ.get("minnctapersm")
        ptx = f" planned, {asked} in the PTX (.minnctapersm)" if asked not in (None, occ.get("blocks_per_sm")) else ""
        out.append(f"occupancy: stages {occ.get('stages')}, blocks/SM {occ.get('blocks_per_sm')}{ptx}, "
                   f"shared memory {occ.get('smem_bytes')} bytes")
        roles = occ.get("roles", [])
        sizes = [k for k in ("warpgroups", "warps") if any(k in r for r in roles)]  # sm_80 roles: warps
        out += _section("roles", ["role", *sizes, "regs/thread"],
                        [[r["role"], *(r.get(k, "-") for k in sizes), r["regs_per_thread"]] for r in roles])
    if "auto_consts" in report:
        a = report["auto_consts"]
        where = (" at " + " ".join(f"{k}={v}" for k, v in a["sizes"].items()) + " (size bucket)"
                 if a.get("sizes") else " (size-free: the largest point the budget accepts; --size chooses per size)")
        out.append("auto consts: " + " ".join(f"{k}={v}" for k, v in a["chosen"].items()) + where)
        if a.get("predicted"):
            out.append(f"  why: {a['predicted']}")
        if a.get("runner_up"):
            out.append(f"  runner-up: {a['runner_up']}")
        if a.get("refused"):
            out.append(f"  refused: {len(a['refused'])} point(s), first: {a['refused'][0]}")
    if "multicast" in report:
        mc = report["multicast"]
        out.append(f"multicast: declined: {mc['skipped']}" if "skipped" in mc else
                   f"multicast: clusters of {mc['ctas']} CTAs along the tile rows; each loads 1/{mc['ctas']} of "
                   f"the rows of {', '.join(mc['shared'])} and multicasts them into every CTA of its cluster"
                   + (f" ({mc['why']})" if "why" in mc else ""))
    if "registers" in report:
        out.append(_registers_line(report["registers"]))
    if "spill_fallback" in report:
        fb = report["spill_fallback"]
        runs = f", {fb['ptxas_runs']} ptxas runs" if fb.get("ptxas_runs") else ""
        if fb.get("spill_bytes_to"):
            out.append(f"spills NOT avoided: ptxas spilled {fb['spill_bytes']} B at {fb['blocks_per_sm']} blocks/SM "
                       f"({fb['registers']} registers) and spills at every lower count; the kernel asks for "
                       f"{fb['to']} blocks/SM, the least spilling ({fb['spill_bytes_to']} B{runs})")
        else:
            out.append(f"spills avoided: ptxas spilled {fb['spill_bytes']} B at {fb['blocks_per_sm']} blocks/SM "
                       f"({fb['registers']} registers); the kernel asks for {fb['to']} blocks/SM instead, the "
                       f"highest count ptxas does not spill at{runs} (plan-occupancy{{spill_retry=false}} keeps "
                       "the spilling code)")
    if "overlap_in_sass" in report:
        from tkir.tools.sass_overlap import format_overlap

        out.append(format_overlap(report["overlap_in_sass"]))
    if report.get("loads_read_before_wgmma"):
        from tkir.tools.sass_loads import format_early_reads

        out.append(format_early_reads(report["loads_read_before_wgmma"]))
    if report.get("unaligned_rows"):
        rows = report["unaligned_rows"]
        pieces = sorted(set(rows.values()), reverse=True)
        out.append(f"unaligned rows: {', '.join(rows)} in {'/'.join(map(str, pieces))}-byte pieces; rows or bases "
                   "not aligned to them launch the kernel's variant with narrower pieces (compiled on first use)")
    for key, val in report.items():  # keys later stages add (e.g. the CLI's ptxas summary)
        if key not in ("shared_tiles", "accesses", "register_tiles", "register_copies", "tma", "occupancy",
                       "registers", "cp_async_loops", "unaligned_rows", "spill_fallback", "auto_consts",
                       "multicast", "measured",  # measured: tkir/tools/measure.py prints it
                       "overlap_in_sass", "loads_read_before_wgmma"):
            out.append(f"{key}: {_cell(val)}")
    return "\n".join(out).rstrip() + "\n"


def _cp_async_loop(loop: Operation) -> dict:
    """A loop pipeline-cp-async rewrote: its stages, the k-tiles its copies run ahead, its rotation, how far
    ahead its mma loads fragments and whether it loads a k16 step's A a unit ahead."""
    stages = loop.attrs.get("stages")
    pending = int(loop.body.ops[0].attrs.get("pending", 0))
    mmas = [op for op in loop.walk() if op.name == "tk.mma"]
    a_ahead = mmas[0].attrs.get("a_ahead", "rule") if mmas else "-"
    fragments = mmas[0].attrs.get("frag_ahead", "rule") if mmas else "-"
    return {"stages": stages, "ahead": pending + 1, "rotate": int(loop.attrs.get("frag_rotate", 0)),
            "fragments": fragments, "a_ahead": a_ahead}


def register_comparison(module: Module, ptxas: int | None, sass: int | None = None,
                        live_peak: int | None = None) -> dict | None:
    """plan-occupancy's registers per thread for the computing role beside ptxas's; None without a plan."""
    for kernel in module.kernels():
        plan = OccupancyPlan.of(kernel)
        if plan is None:
            continue
        computing = [(name, r) for name in COMPUTING_ROLES if (r := plan.role(name)) is not None]
        if not computing:
            continue
        role, predicted = computing[0][0], computing[0][1].regs
        setmaxnreg = role == "consumer" and computing[0][1].warpgroups is not None  # sm_80 roles: none
        within = None if ptxas is None else abs(ptxas - predicted) <= REGISTER_TOLERANCE * predicted
        return {"role": role, "predicted": predicted,
                "predicted_total": plan.budget.total if plan.budget is not None else 0,
                "budget": plan.budget.to_attr() if plan.budget is not None else {}, "setmaxnreg": setmaxnreg,
                "ptxas": ptxas, "sass_regs": sass, "sass_live_peak": live_peak, "within_10pct": within}
    return None


def spill_fallback(module: Module) -> dict | None:
    """The backend's spill decision (kernel attr `spill_fallback`), as a dict; None where it made none."""
    for kernel in module.kernels():
        fb = kernel.attrs.get("spill_fallback")
        if isinstance(fb, dict):
            return {k: fb.get(k) for k in ("blocks_per_sm", "to", "spill_bytes", "registers", "spill_bytes_to",
                                           "ptxas_runs")}
    return None


def highest_register(sass: str) -> int | None:
    """1 + the highest general register (R<n>) a SASS listing names; None when it names none.
    A lower bound of the registers a thread touches: a 64/128-bit operand names only its first register."""
    regs = [int(m) for m in _SASS_REGISTER.findall(sass)]
    return max(regs) + 1 if regs else None


def peak_live_registers(life_ranges: str) -> int | None:
    """The largest live-GPR count of `nvdisasm -plr -lrm count` over the kernel body's instructions.
    CALL lines and the internal subroutines after the body (`$__internal_...`, e.g. the rcp slow path)
    are left out: their counts exceed the highest register the kernel names, so they are not live values."""
    peak = None
    for line in life_ranges.splitlines():
        code = line.split("//")[0].strip()
        if code.startswith("$__internal"):
            break
        m = _LIFE_RANGE_COUNT.match(line)
        if m and "CALL" not in code:
            peak = max(peak or 0, int(m.group(1)))
    return peak


# --- helpers -------------------------------------------------------------------------------------


def _registers_line(r: dict) -> str:
    kind = "setmaxnreg" if r.get("setmaxnreg") else "budget rounded to 8"
    parts = " + ".join(f"{k} {v}" for k, v in r.get("budget", {}).items())
    line = (f"registers ({r['role']}, per thread): predicted {r['predicted']} ({kind}; "
            f"budget {r['predicted_total']} = {parts})")
    if r.get("setmaxnreg") and r["predicted_total"] > r["predicted"]:  # plan-occupancy's BUDGET_SLACK_REGS
        line += f" (budget over by {r['predicted_total'] - r['predicted']}: planned at the most, ptxas decides)"
    if r.get("ptxas") is None:
        return line + "; ptxas: not run"
    diff = (r["ptxas"] - r["predicted"]) / r["predicted"]
    verdict = "within 10%" if r["within_10pct"] else "off by more than 10%"
    line += f"; ptxas {r['ptxas']} ({diff:+.0%}, {verdict})"
    if r.get("sass_regs") is not None:
        line += f"; SASS names R0..R{r['sass_regs'] - 1}"
    if r.get("sass_live_peak") is not None:
        line += f", at most {r['sass_live_peak']} live"
    return line


def _shared_tile(v: Value, names: dict[int, str]) -> dict:
    t = v.type
    if isinstance(t, VectorType):
        return {"name": names[id(v)], "dtype": t.dtype, "shape": [t.n], "swizzle": 0,
                "align": SWIZZLE_ALIGN[0], "bytes": t.nbytes}
    span = int(t.get("swizzle", 0) or 0)
    pad = int(t.get("pad", 0) or 0) if not span else 0
    return {"name": names[id(v)], "dtype": t.dtype, "shape": [t.rows, t.cols], "swizzle": span,
            "align": int(t.get("align", SWIZZLE_ALIGN.get(span, 0))), "bytes": t.nbytes + t.rows * pad}


def _register_tile(v: Value, names: dict[int, str]) -> dict:
    t = v.type
    shape = [t.rows, t.cols] if isinstance(t, TileType) else [t.n]
    regs: int | None = None
    try:
        layout = layout_of(t)
        regs = None if layout is None else regs_per_thread(layout, t.dtype, tuple(shape))
    except ValueError:  # a layout this build cannot read or that does not fit: report it, count nothing
        pass
    return {"name": names[id(v)], "dtype": t.dtype, "shape": shape,
            "layout": format_attr_value(t.get("layout")), "regs_per_thread": regs}


def _register_copy(op: Operation, kernel: Operation, names: dict[int, str]) -> dict | None:
    """A tk.load / tk.store (or tk.gather) between global memory and a register tile or vector (not TMA): its access
    width, its L2 priority (cache-policy; `-`: none) and, per dim the backend tests, `tested` or the proof
    that the test cannot fail."""
    if op.name == "tk.store_warp_staged":  # stage-epilogue: per-warp shared rows, then 16-byte stores
        v = op.operands[1]
        return {"op": "store", "tensor": op.operands[0].name, "tile": names.get(id(v), v.name or "?"),
                "access": "16-byte vectors via shared (stage-epilogue)", "l2": str(op.attrs.get("l2", "-")),
                "rows": "tested", "cols": "tested"}
    if op.name == "tk.gather":  # rows by an index vector: each row tested (backend/rules_registers.py)
        t = op.result.type
        nbytes = vector_access_bytes(layout_of(t), t.dtype) if t.get("layout") is not None else None
        return {"op": "gather", "tensor": op.operands[0].name, "tile": names.get(id(op.result), op.result.name or "?"),
                "access": f"{nbytes}-byte vectors" if nbytes else "element-wise", "l2": str(op.attrs.get("l2", "-")),
                "rows": "tested (indices)",
                "cols": why_in_bounds(op.operands[-1], t.cols, op.operands[0].type.dims[-1], kernel) or "tested"}
    if op.name not in ("tk.load", "tk.store") or not op.operands or not isinstance(op.operands[0].type, GlobalType):
        return None
    tile = op.result.type if op.name == "tk.load" else op.operands[1].type
    if not (is_register(tile) and isinstance(tile, (TileType, VectorType))) or tile.get("layout") is None:
        return None
    g = op.operands[0]
    nbytes = vector_access_bytes(layout_of(tile), tile.dtype)
    # element-wise copies test every element (backend/rules_memory.py): the proofs count for vector ones
    proofs = copy_edge_proofs(op, kernel) if nbytes else [None] * (2 if isinstance(tile, TileType) else 1)
    rows, cols = (proofs if len(proofs) == 2 else [None, proofs[0]])
    value = op.result if op.name == "tk.load" else op.operands[1]
    access = f"{nbytes}-byte vectors" if nbytes else "element-wise"
    if op.attrs.get("reduce") is not None:  # a reducing store: red.global.add per element, or four (vector-red)
        access = "red.v4.f32 (16-byte)" if op.attrs.get(RED_VEC_ATTR) else "red.f32 (element-wise)"
    return {"op": op.name.removeprefix("tk."), "tensor": g.name, "tile": names.get(id(value), value.name or "?"),
            "access": access,
            "l2": str(op.attrs.get("l2", "-")),  # cache-policy's L2 priority (passes/cache_policy.py)
            "rows": "-" if len(proofs) == 1 else (rows or "tested"), "cols": cols or "tested"}


def _tma(op: Operation) -> dict:
    out: dict[str, object] = {"name": op.symbol}
    for k in TMA_KEYS:
        out[k] = op.attrs.get(k)
    return out


_MIN_BLOCKS = re.compile(r"\.minnctapersm (\d+)")


def ptx_min_blocks(ptx: str) -> int | None:
    """The `.minnctapersm` of a PTX module's kernel (the blocks per SM ptxas is asked to hold); None without one."""
    m = _MIN_BLOCKS.search(ptx)
    return int(m.group(1)) if m else None


def _occupancy(plan: OccupancyPlan) -> dict:
    return {"stages": plan.stages, "blocks_per_sm": plan.blocks_per_sm, "smem_bytes": plan.smem_bytes,
            "roles": [{"role": name, **({"warps": r.warps} if r.warps is not None else {"warpgroups": r.warpgroups}),
                       "regs_per_thread": r.regs}
                      for name, r in plan.roles]}


def _section(title: str, header: list[str], rows: list[list[object]]) -> list[str]:
    if not rows:
        return [f"{title}: none", ""]
    cells = [header] + [[_cell(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    lines = [f"{title}:"]
    for r in cells:
        lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
    return lines + [""]


def _cell(v: object) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_cell(x)}" for k, x in v.items()) + "}"
    return str(v)


def _printed_names(kernel: Operation) -> dict[int, str]:
    """The names the printer gives each value (source name, made unique with .N, like tkir.printer)."""
    names: dict[int, str] = {}
    used: set[str] = set()
    counter = [0]

    def name(v: Value) -> None:
        if id(v) in names:
            return
        base = v.name
        if not base:
            while str(counter[0]) in used:
                counter[0] += 1
            base = str(counter[0])
        cand, n = base, 1
        while cand in used:
            cand, n = f"{base}.{n}", n + 1
        used.add(cand)
        names[id(v)] = cand

    def visit(op: Operation) -> None:
        for v in op.operands:
            name(v)
        for v in op.results:
            name(v)
        for region in op.regions:
            for a in region.block.args:
                name(a)
            for inner in region.block.ops:
                visit(inner)

    visit(kernel)
    return names
