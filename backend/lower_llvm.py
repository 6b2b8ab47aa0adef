"""lower-to-llvm: pipelined tile IR -> LLVM IR text for the NVPTX back end (target sm_90a).

Each tile-IR op has one lowering rule (the `_op_<dialect>_<name>` methods); an op or layout without a
rule is a located error naming it, never silently dropped. What the rules emit:

* scalars (`arith.*`, `tk.size`, `tk.block_id`) -> i32/float LLVM instructions and kernel params;
* shared tiles (`tk.alloc`, `pipe.stage`) -> 32-bit shared-window addresses inside one dynamic
  shared-memory block laid out at compile time (`SharedPlan`), base rounded up to 1024 B;
* `pipe.barriers/wait/expect/arrive` -> mbarrier inline PTX (HOPPER.md §5), the try_wait loop in IR;
* `pipe.copy` -> one `cp.async.bulk.tensor` per TMA box (HOPPER.md §4.4), one thread issuing;
* `tk.role` -> a branch on the warpgroup index with `setmaxnreg` (HOPPER.md §7.1);
* register tiles in the `wgmma_acc` layout -> per-thread lists of LLVM values (HOPPER.md §1.5);
  `tk.mma` on shared operands -> `wgmma.mma_async` with descriptors (§2), accumulators tied through
  `wgmma.wait_group` so that no read is scheduled before the wait;
* `tk.cast`, `tk.store` of an accumulator tile -> cvt to bf16 and predicated 32-bit global stores.

The PTX parameter order is tkir.launch's convention: tensor maps, pointers, sizes, scalars.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tkir.backend.llvm_text import LLVMWriter, f32_literal
from tkir.backend.rules_registers import RegisterRules
from tkir.backend.rules_sm80 import Sm80Rules
from tkir.backend.rules_streamk import StreamKRules
from tkir.backend.rules_wgmma import WgmmaRules
from tkir.backend.values import (
    HEADER,
    LLVM_TYPE,
    REGS_PER_SM,
    SMEM_ALIGN,
    THREADS_PER_WARPGROUP,
    Frag,
    LoweringError,
    Smem,
)
from tkir.ir import Module, Operation, Value
from tkir.types import GlobalType, ScalarType, TileType, VectorType, dtype_bytes


@dataclass
class SharedPlan:
    offsets: dict[int, int] = field(default_factory=dict)  # id(Value) -> byte offset
    total: int = 0


def tile_stage_bytes(t: TileType | VectorType) -> int:
    # padded rows (bank-conflicts' fix where no swizzle fits) take rows * (row bytes + pad)
    size = t.nbytes + (t.rows if isinstance(t, TileType) else 1) * int(t.get("pad") or 0)
    align = int(t.get("align") or 16)
    return -(-size // align) * align


def plan_shared(kernel: Operation) -> SharedPlan:
    plan = SharedPlan()
    off = 0
    for op in kernel.walk():
        if op.name in ("tk.alloc", "pipe.barriers"):
            t = op.result.type
            align = int(t.get("align") or (8 if op.name == "pipe.barriers" else 16))
            off = -(-off // align) * align
            plan.offsets[id(op.result)] = off
            off += tile_stage_bytes(t) * int(t.get("stages") or 1) if op.name == "tk.alloc" else t.nbytes
    plan.total = off
    return plan


# ---------------------------------------------------------------------------------------------


@dataclass
class RoleCtx:
    kind: str
    first_wg: int
    warpgroups: int
    single_thread: bool
    tid: str = ""      # thread index within the role
    wg: str = ""       # warpgroup index within the role
    lane: str = ""
    warp: str = ""     # warp index within its warpgroup


MIN_BLOCKS_STREAMING = 2   # resident blocks asked for kernels without warp specialization
MIN_REGS_STREAMING = 32    # ... unless that would leave fewer registers than this per thread


class KernelLowering(Sm80Rules, RegisterRules, WgmmaRules, StreamKRules):
    def __init__(self, module: Module, kernel: Operation, launch: dict, target: str):
        self.module = module
        self.kernel = kernel
        self.launch = launch
        self.target = target
        self.w = LLVMWriter()
        self.vals: dict[int, object] = {}
        self.plan = plan_shared(kernel)
        self.role: RoleCtx | None = None
        self.params: dict[str, str] = {}
        self.sizes: dict[str, str] = {}
        self.tmaps: dict[str, str] = {}
        self.pending_sync = False
        occ = kernel.attrs.get("occupancy") or {}
        self.threads = int(launch["block"][0])
        self.init_cap = min(255, (REGS_PER_SM // self.threads) // 8 * 8)
        self.occupancy = occ

    # --- entry -------------------------------------------------------------------------------

    def run(self) -> str:
        w = self.w
        sig = []
        for p in self.launch["params"]:
            name = "%" + p["name"]
            if p["kind"] == "tensor_map":
                sig.append(f'ptr byval([128 x i8]) align 64 "nvvm.grid_constant" {name}')
                self.tmaps[p["name"]] = name
            elif p["kind"] == "pointer":
                sig.append(f"ptr addrspace(1) {name}")
                self.params[p["tensor"]] = name
            elif p["kind"] == "workspace":
                sig.append(f"ptr addrspace(1) {name}")
                self.params[p["name"]] = name
            else:
                sig.append(f"{LLVM_TYPE[p['dtype']]} {name}")
                if "size" in p:
                    self.sizes[p["size"]] = name
                else:
                    self.params[p.get("scalar", p["name"])] = name
        for a in self.kernel.body.args:
            if isinstance(a.type, GlobalType):
                self.vals[id(a)] = ("gl", self.params[a.name], a.type)
            else:
                self.vals[id(a)] = self.params[a.name]
        w.start_block("entry")
        self.tid = w.sreg("tid.x")
        raw = w.op("ptrtoint ptr addrspace(3) @smem to i32", "smem_raw")
        bumped = w.op(f"add i32 {raw}, {SMEM_ALIGN - 1}", "smem_b")
        self.smem = w.op(f"and i32 {bumped}, {-SMEM_ALIGN}", "smem")
        for op in self.kernel.body.ops:
            self.lower_op(op)
        w.emit("ret void")
        name = self.launch["kernel"]
        body = "\n".join(w.lines)
        decls = "\n".join(sorted(w.declares))
        attrs = (f'attributes #0 = {{ "nvvm.maxntid"="{self.threads}" '
                 f'"nvvm.minctasm"="{self.min_blocks_per_sm()}" }}')
        return (f"{HEADER}{decls}\n\ndefine ptx_kernel void @{name}({', '.join(sig)}) #0 {{\n{body}\n}}\n\n"
                f"{attrs}\n")

    def min_blocks_per_sm(self) -> int:
        """`.minnctapersm`: warp-specialized kernels run one block per SM (setmaxnreg redistributes
        its registers); other kernels ask ptxas for at least two resident blocks
        (MIN_BLOCKS_STREAMING) so one block's loads overlap another's math and stores, or for the
        plan's count if higher. ptxas then caps registers accordingly; tests check it never spills."""
        if any(op.name == "tk.role" for op in self.kernel.body.ops):
            return 1
        planned = int(self.occupancy.get("blocks_per_sm") or 1)
        budget = self.occupancy.get("budget") or {}  # accumulators (mma.sync tiles) cannot be squeezed
        floor = max(MIN_REGS_STREAMING, int(budget.get("acc_regs") or 0) + int(budget.get("overhead") or 0))
        fits = REGS_PER_SM // (self.threads * floor)
        return max(planned, min(MIN_BLOCKS_STREAMING, fits))

    def lower_op(self, op: Operation) -> None:
        handler = getattr(self, "_op_" + op.name.replace(".", "_"), None)
        if handler is None:
            raise LoweringError(op.loc, f"backend ({self.target}): no lowering rule for '{op.name}' yet")
        # an accumulator whose wgmma group may still be in flight is waited for (its registers tied
        # through wgmma.wait_group 0) before anything but another mma or the loop's yield reads it
        for i, v in enumerate(op.operands):
            x = self.vals.get(id(v))
            if isinstance(x, Frag) and x.pending and not (op.name == "tk.mma" and i == 2) \
                    and op.name != "scf.yield":
                self.vals[id(v)] = Frag(x.type, self._wait_group(x.values, 0))
        handler(op)

    def get(self, v: Value) -> object:
        if id(v) not in self.vals:
            raise LoweringError(None, f"backend: value %{v.name} has no lowering")
        return self.vals[id(v)]

    def scalar(self, v: Value) -> str:
        x = self.get(v)
        assert isinstance(x, str), f"%{v.name} is not a scalar"
        return x

    def set(self, v: Value, x: object) -> None:
        self.vals[id(v)] = x

    # --- scalars -----------------------------------------------------------------------------

    def _op_arith_const(self, op: Operation) -> None:
        val = op.attrs["value"]
        self.set(op.result, f32_literal(val) if op.result.type.dtype == "f32" else str(int(val)))

    def _arith(self, op: Operation) -> None:
        a, b = (self.scalar(v) for v in op.operands)
        w = self.w
        if op.result.type.dtype == "f32":
            fop = {"arith.add": "fadd", "arith.sub": "fsub", "arith.mul": "fmul", "arith.div": "fdiv"}.get(op.name)
            if fop is None:
                raise LoweringError(op.loc, f"backend: '{op.name}' on f32 not supported")
            self.set(op.result, w.op(f"{fop} float {a}, {b}", op.result.name or "f"))
            return
        n = op.result.name or "i"
        if op.name == "arith.cdiv":
            t = w.op(f"add i32 {a}, {b}", n)
            t = w.op(f"sub i32 {t}, 1", n)
            self.set(op.result, w.op(f"sdiv i32 {t}, {b}", n))
            return
        if op.name in ("arith.min", "arith.max"):
            c = w.op(f"icmp {'slt' if op.name == 'arith.min' else 'sgt'} i32 {a}, {b}", n)
            self.set(op.result, w.op(f"select i1 {c}, i32 {a}, i32 {b}", n))
            return
        iop = {"arith.add": "add", "arith.sub": "sub", "arith.mul": "mul", "arith.div": "sdiv",
               "arith.rem": "srem"}[op.name]
        self.set(op.result, w.op(f"{iop} i32 {a}, {b}", n))

    _op_arith_add = _op_arith_sub = _op_arith_mul = _op_arith_div = _arith
    _op_arith_rem = _op_arith_cdiv = _op_arith_min = _op_arith_max = _arith

    def _op_arith_cmp(self, op: Operation) -> None:
        a, b = (self.scalar(v) for v in op.operands)
        pred = str(op.attrs["pred"])
        if op.operands[0].type.dtype == "f32":
            self.set(op.result, self.w.op(f"fcmp o{pred} float {a}, {b}", op.result.name or "c"))
        else:
            ipred = {"eq": "eq", "ne": "ne", "lt": "slt", "le": "sle", "gt": "sgt", "ge": "sge"}[pred]
            self.set(op.result, self.w.op(f"icmp {ipred} i32 {a}, {b}", op.result.name or "c"))

    def _op_scf_if(self, op: Operation) -> None:
        w = self.w
        then, done = w.label("if_then"), w.label("if_end")
        w.cond_br(self.scalar(op.operands[0]), then, done)
        w.start_block(then)
        for inner in op.body.ops:
            if inner.name != "scf.yield":
                self.lower_op(inner)
        w.br(done)
        w.start_block(done)

    def _op_tk_size(self, op: Operation) -> None:
        self.set(op.result, self.sizes[op.attrs["name"]])

    def _op_tk_block_id(self, op: Operation) -> None:
        self.set(op.result, self.w.sreg("ctaid." + "xyz"[op.attrs["dim"]]))

    def _op_tk_grid_dim(self, op: Operation) -> None:
        self.set(op.result, self.w.sreg("nctaid." + "xyz"[op.attrs["dim"]]))

    # --- shared memory and barriers ----------------------------------------------------------

    def _op_tk_alloc(self, op: Operation) -> None:
        addr = self.w.op(f"add i32 {self.smem}, {self.plan.offsets[id(op.result)]}", op.result.name or "s")
        self.set(op.result, Smem(addr, op.result.type))

    def _op_pipe_barriers(self, op: Operation) -> None:
        w = self.w
        addr = w.op(f"add i32 {self.smem}, {self.plan.offsets[id(op.result)]}", op.result.name or "bar")
        self.set(op.result, Smem(addr, op.result.type))
        lead = w.op(f"icmp eq i32 {self.tid}, 0", "lead")
        init, done = w.label("bar_init"), w.label("bar_done")
        w.cond_br(lead, init, done)
        w.start_block(init)
        for s in range(op.result.type.n):
            a = w.op(f"add i32 {addr}, {8 * s}", "b")
            w.asm("void", ["mbarrier.init.shared::cta.b64 [$0], $1;"], ["r", "r"],
                  [("i32", a), ("i32", str(op.attrs["count"]))])
        w.asm("void", ["fence.mbarrier_init.release.cluster;"], [], [])
        w.asm("void", ["fence.proxy.async.shared::cta;"], [], [])
        w.br(done)
        w.start_block(done)
        self.pending_sync = True

    def _bar_addr(self, bars: Value, s: Value) -> str:
        base = self.get(bars)
        assert isinstance(base, Smem)
        off = self.w.op(f"shl i32 {self.scalar(s)}, 3", "boff")
        return self.w.op(f"add i32 {base.addr}, {off}", "bar")

    def _op_pipe_stage(self, op: Operation) -> None:
        buf = self.get(op.operands[0])
        assert isinstance(buf, Smem)
        stride = tile_stage_bytes(buf.type)
        off = self.w.op(f"mul i32 {self.scalar(op.operands[1])}, {stride}", "soff")
        self.set(op.result, Smem(self.w.op(f"add i32 {buf.addr}, {off}", op.result.name or "st"), op.result.type))

    def _op_pipe_wait(self, op: Operation) -> None:
        w = self.w
        bar = self._bar_addr(op.operands[0], op.operands[1])
        parity = self.scalar(op.operands[2])
        loop, ready = w.label("wait"), w.label("ready")
        w.br(loop)
        w.start_block(loop)
        done = w.asm("i32", ["{", ".reg .pred p;", "mbarrier.try_wait.parity.shared::cta.b64 p, [$1], $2;",
                             "selp.u32 $0, 1, 0, p;", "}"], ["=r", "r", "r"],
                     [("i32", bar), ("i32", parity)], "done")
        again = w.op(f"icmp eq i32 {done}, 0", "again")
        w.cond_br(again, loop, ready)
        w.start_block(ready)

    def _op_pipe_expect(self, op: Operation) -> None:
        bar = self._bar_addr(op.operands[0], op.operands[1])
        self.w.asm("void", ["mbarrier.arrive.expect_tx.shared::cta.b64 _, [$0], $1;"], ["r", "r"],
                   [("i32", bar), ("i32", str(op.attrs["bytes"]))])

    def _op_pipe_arrive(self, op: Operation) -> None:
        w = self.w
        if op.attrs.get("deferred"):
            d = self._deferred
            if d is None:
                raise LoweringError(op.loc, "backend: a deferred pipe.arrive must sit in a loop")
            d["next"] = self.scalar(op.operands[1])
            d["bars"] = op.operands[0]
            self._arrive_prev(d["prev"], op.operands[0])
            return
        bar = self._bar_addr(op.operands[0], op.operands[1])
        if self.role is not None and self.role.single_thread:
            w.asm("void", ["mbarrier.arrive.shared::cta.b64 _, [$0];"], ["r"], [("i32", bar)])
            return
        # one arrival per warp (the barrier counts 4 per consumer warpgroup)
        first = w.op(f"icmp eq i32 {self.role.lane}, 0", "lane0")  # type: ignore[union-attr]
        go, done = w.label("arrive"), w.label("arrived")
        w.cond_br(first, go, done)
        w.start_block(go)
        w.asm("void", ["mbarrier.arrive.shared::cta.b64 _, [$0];"], ["r"], [("i32", bar)])
        w.br(done)
        w.start_block(done)

    def _arrive_prev(self, prev: str, bars: Value) -> None:
        """Arrive (lane 0 of each warp) on bars[prev] unless prev < 0 (nothing to release yet)."""
        w = self.w
        has = w.op(f"icmp sge i32 {prev}, 0", "has_prev")
        lane0 = w.op(f"icmp eq i32 {self.role.lane}, 0", "lane0")  # type: ignore[union-attr]
        go_c = w.op(f"and i1 {has}, {lane0}", "release")
        go, done = w.label("release"), w.label("released")
        w.cond_br(go_c, go, done)
        w.start_block(go)
        base = self.get(bars)
        assert isinstance(base, Smem)
        off = w.op(f"shl i32 {prev}, 3", "boff")
        bar = w.op(f"add i32 {base.addr}, {off}", "bar")
        w.asm("void", ["mbarrier.arrive.shared::cta.b64 _, [$0];"], ["r"], [("i32", bar)])
        w.br(done)
        w.start_block(done)

    def _op_pipe_copy(self, op: Operation) -> None:
        w = self.w
        dst = self.get(op.operands[0])
        assert isinstance(dst, Smem)
        bar = self._bar_addr(op.operands[1], op.operands[2])
        desc_sym = op.attrs["desc"].name
        desc = self.module.lookup(desc_sym)
        if desc is None:
            raise LoweringError(op.loc, f"backend: no tma.desc @{desc_sym}")
        tmap = self.tmaps[desc_sym]
        src = op.operands[3].type
        assert isinstance(src, GlobalType)
        t = dst.type
        assert isinstance(t, TileType)
        coords = [self.scalar(c) for c in op.operands[4:]]
        box = list(desc.attrs["box"])
        rank = len(box)
        # coordinates innermost first: tile units -> elements for the tile dims, plain for the rest
        tile_dims = [t.cols, t.rows]
        elem = []
        for i in range(rank):
            c = coords[len(coords) - 1 - i]
            if i < 2:
                elem.append(w.op(f"mul i32 {c}, {tile_dims[i]}", "x"))
            else:
                elem.append(c)
        panel_cols = box[0]
        panels = max(1, t.cols // panel_cols)
        panel_bytes = t.rows * panel_cols * dtype_bytes(t.dtype)
        for p in range(panels):
            x0 = w.op(f"add i32 {elem[0]}, {p * panel_cols}", "x") if p else elem[0]
            d = w.op(f"add i32 {dst.addr}, {p * panel_bytes}", "dst") if p else dst.addr
            regs = ", ".join(f"${3 + i}" for i in range(rank))
            w.asm("void", [f"cp.async.bulk.tensor.{rank}d.shared::cluster.global.mbarrier::complete_tx::bytes "
                           f"[$0], [$1, {{{regs}}}], [$2];"],
                  ["r", "l", "r"] + ["r"] * rank,
                  [("i32", d), ("ptr", tmap), ("i32", bar)] + [("i32", e) for e in [x0, *elem[1:]]])

    # --- roles ---------------------------------------------------------------------------------

    def _op_tk_role(self, op: Operation) -> None:
        w = self.w
        if self.pending_sync:
            w.call("void", "llvm.nvvm.barrier0", [])
            self.pending_sync = False
        kind = str(op.attrs["kind"])
        first_wg = self._next_wg
        n = int(op.attrs["warpgroups"])
        self._next_wg += n
        wg_all = w.op(f"lshr i32 {self.tid}, 7", "wg")
        ge = w.op(f"icmp uge i32 {wg_all}, {first_wg}", "ge")
        lt = w.op(f"icmp ult i32 {wg_all}, {first_wg + n}", "lt")
        inside = w.op(f"and i1 {ge}, {lt}", "in_role")
        body, after = w.label(f"role_{kind}"), w.label(f"after_{kind}")
        w.cond_br(inside, body, after)
        w.start_block(body)
        regs = int(op.attrs.get("regs") or 0)
        if regs:
            which = "dec" if regs < self.init_cap else "inc"
            w.call("void", f"llvm.nvvm.setmaxnreg.{which}.sync.aligned.u32", [("i32", str(regs))])
        ctx = RoleCtx(kind, first_wg, n, single_thread=(kind == "producer"))
        ctx.tid = w.op(f"sub i32 {self.tid}, {first_wg * THREADS_PER_WARPGROUP}", "rtid")
        ctx.wg = w.op(f"lshr i32 {ctx.tid}, 7", "rwg")
        ctx.lane = w.op(f"and i32 {self.tid}, 31", "lane")
        t128 = w.op(f"and i32 {self.tid}, 127", "t128")
        ctx.warp = w.op(f"lshr i32 {t128}, 5", "warp")
        self.role = ctx
        end = w.label(f"end_{kind}")
        if ctx.single_thread:
            lead = w.op(f"icmp eq i32 {ctx.tid}, 0", "leader")
            issue = w.label("issue")
            w.cond_br(lead, issue, end)
            w.start_block(issue)
        for inner in op.body.ops:
            self.lower_op(inner)
        if self.staged_stores:  # TMA stores must finish reading shared memory before the block exits
            lead = w.op(f"icmp eq i32 {w.op(f'and i32 {ctx.tid}, 127', 't')}, 0", "wglead")
            self._if(lead, lambda: w.asm("void", ["cp.async.bulk.wait_group 0;"], [], []))
            self.staged_stores = False
        w.br(end)
        w.start_block(end)
        w.emit("ret void")
        self.role = None
        w.start_block(after)

    _next_wg = 0
    staged_stores = False
    _deferred: dict | None = None

    # --- loops -------------------------------------------------------------------------------

    def _op_scf_for(self, op: Operation) -> None:
        w = self.w
        lo, hi, step = (self.scalar(v) for v in op.operands[:3])
        inits = [self.get(v) for v in op.operands[3:]]
        pre = w.block
        hdr, body, exit_ = w.label("for_hdr"), w.label("for_body"), w.label("for_exit")
        w.br(hdr)
        w.start_block(hdr)
        iv = w.fresh(op.body.args[0].name or "i")
        iv_line = w.emit("")
        carried: list[tuple[list[int], list[str]]] = []
        term0 = op.body.terminator
        for n_arg, (arg, init) in enumerate(zip(op.body.args[1:], inits, strict=True)):
            idxs, names = [], []
            flat = _flatten(init)
            for k, _ in enumerate(flat):
                names.append(w.fresh((arg.name or "c") + f"_{k}"))
                idxs.append(w.emit(""))
            carried.append((idxs, names))
            x = _rebuild(init, names)
            y = term0.operands[n_arg].owner if term0 is not None else None
            if isinstance(x, Frag) and isinstance(y, Operation) and y.name == "tk.mma" \
                    and y.attrs.get("async_groups"):
                x.pending = True  # the previous iteration's mma may still be writing it
            self.set(arg, x)
        self.set(op.body.args[0], iv)
        deferred = any(i.name == "pipe.arrive" and i.attrs.get("deferred") for i in op.body.ops)
        saved = self._deferred
        if deferred:
            prev = w.fresh("prev_stage")
            prev_line = w.emit("")
            self._deferred = {"prev": prev, "next": None, "bars": None}
        cond = w.op(f"icmp slt i32 {iv}, {hi}", "cond")
        w.cond_br(cond, body, exit_)
        w.start_block(body)
        term = op.body.terminator
        for inner in op.body.ops:
            if inner is term:
                break
            self.lower_op(inner)
        yields = [self.get(v) for v in term.operands] if term is not None else []
        nxt = w.op(f"add i32 {iv}, {step}", "next")
        latch = w.block
        w.br(hdr)
        w.lines[iv_line] = f"  {iv} = phi i32 [ {lo}, %{pre} ], [ {nxt}, %{latch} ]"
        for (idxs, names), init, y, arg in zip(carried, inits, yields, op.body.args[1:], strict=True):
            ty = _llvm_elem(arg.type)
            for i, n_, a, b in zip(idxs, names, _flatten(init), _flatten(y), strict=True):
                w.lines[i] = f"  {n_} = phi {ty} [ {a}, %{pre} ], [ {b}, %{latch} ]"
        if deferred:
            d = self._deferred
            w.lines[prev_line] = f"  {prev} = phi i32 [ -1, %{pre} ], [ {d['next']}, %{latch} ]"
        w.start_block(exit_)
        for res, init, (_idxs, names) in zip(op.results, inits, carried, strict=True):
            x = _rebuild(init, names)  # the header's phis: the values when the loop exits
            if isinstance(x, Frag) and any(isinstance(self.get(y), Frag) and self.get(y).pending
                                           for y in (term.operands if term else [])):
                x = Frag(x.type, self._wait_group(x.values, 0))  # drain in-flight wgmma
            self.set(res, x)
        if deferred:
            self._arrive_prev(prev, d["bars"])
            self._deferred = saved

    def _op_scf_yield(self, op: Operation) -> None:  # handled by scf.for
        pass

    def _dim(self, d: int | str) -> str:
        return str(d) if isinstance(d, int) else self.sizes[d]


def _flatten(x: object) -> list[str]:
    if isinstance(x, Frag):
        return list(x.values)
    if isinstance(x, str):
        return [x]
    raise LoweringError(None, f"backend: cannot carry {type(x).__name__} through a loop")


def _rebuild(like: object, names: list[str]) -> object:
    if isinstance(like, Frag):
        return Frag(like.type, names)
    return names[0]


def _llvm_elem(t: object) -> str:
    if isinstance(t, (TileType, VectorType, ScalarType)):
        return LLVM_TYPE[t.dtype]
    raise LoweringError(None, f"backend: no LLVM type for {t}")


def lower_kernel(module: Module, launch: dict, target: str) -> tuple[str, int]:
    """LLVM IR text of the module's kernel, and the dynamic shared memory it needs (bytes)."""
    k = module.kernel
    low = KernelLowering(module, k, launch, target)
    text = low.run()
    return text, low.plan.total + SMEM_ALIGN  # slack to round the base up to 1024 B
