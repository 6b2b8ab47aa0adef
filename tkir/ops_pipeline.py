"""Ops of the pipelined level (written by the `pipeline` pass, read by the backend).

    %full = pipe.barriers {count = 1} : sv<i64, 4>        S mbarriers, each expecting `count` arrivals
    %as = pipe.stage %a, %s : st<bf16, 128, 64, ...>      stage s of a ring buffer st<..., stages=S>
    pipe.wait %full, %s, %parity                          block until phase `parity` of bars[s] completed
    pipe.expect %full, %s {bytes = 49152}                 arrive on bars[s], expecting that many TMA bytes
    pipe.copy %as, %full, %s, %A, %bx, %k {desc = @A_tma, boxes = 1, bytes = 16384}
                                                          TMA global->shared into a stage, completing on bars[s]
    pipe.arrive %empty, %s                                one arrival on bars[s] (per consumer warp)
    pipe.arrive %empty, %s {deferred = true}              ... for the previous iteration's stage instead,
                                                          once this iteration's async mma is issued
    tk.role {kind = producer, warpgroups = 1, regs = 40} { ... }   code run by those warpgroups only

Semantics for the interpreter: roles run as coroutines that switch at `pipe.wait`; a barrier's
phase completes when it has received `count` arrivals and all expected bytes.
"""

from __future__ import annotations

from tkir.ir import Operation
from tkir.ops import expect, interp_if_ready, is_int_scalar, n_operands, n_results, register_op
from tkir.types import GlobalType, TileType, VectorType


def _is_bars(t: object) -> bool:
    return isinstance(t, VectorType) and t.space == "sv" and t.dtype == "i64"


def _barriers(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 1)
    expect(_is_bars(op.result.type), "'pipe.barriers' yields sv<i64, S>")
    expect(isinstance(op.attrs.get("count"), int) and op.attrs["count"] >= 1, "'pipe.barriers' needs count >= 1")


def _stage(op: Operation) -> None:
    n_operands(op, 2)
    n_results(op, 1)
    buf, s = (v.type for v in op.operands)
    r = op.result.type
    expect(isinstance(buf, TileType) and buf.space == "st" and isinstance(buf.get("stages"), int),
           f"'pipe.stage' takes a ring buffer st<..., stages=S>, got {buf}")
    expect(is_int_scalar(s), "'pipe.stage' index is i32")
    expect(isinstance(r, TileType) and r.shape == buf.shape and r.dtype == buf.dtype and r.get("stages") is None,
           f"'pipe.stage' of {buf} yields one stage, got {r}")


def _bar_op(n: int):
    def check(op: Operation) -> None:
        n_operands(op, n)
        n_results(op, 0)
        expect(_is_bars(op.operands[0].type), f"'{op.name}' takes barriers sv<i64, S>")
        expect(all(is_int_scalar(v.type) for v in op.operands[1:]), f"'{op.name}' indices are i32")
        if op.name == "pipe.expect":
            expect(isinstance(op.attrs.get("bytes"), int), "'pipe.expect' needs bytes = N")
    return check


def _copy(op: Operation) -> None:
    n_results(op, 0)
    expect(len(op.operands) >= 5, "'pipe.copy' needs dst, barriers, stage, src, coordinates")
    dst, bars, s, src = (v.type for v in op.operands[:4])
    expect(isinstance(dst, TileType) and dst.space == "st", f"'pipe.copy' writes a shared tile, not {dst}")
    expect(_is_bars(bars) and is_int_scalar(s), "'pipe.copy' completes on barriers[stage]")
    expect(isinstance(src, GlobalType) and len(op.operands) - 4 == src.rank,
           f"'pipe.copy' needs {getattr(src, 'rank', '?')} coordinates")
    expect("desc" in op.attrs, "'pipe.copy' needs desc = @tma_desc")


def _role(op: Operation) -> None:
    n_operands(op, 0)
    n_results(op, 0)
    expect(len(op.regions) == 1, "'tk.role' has one region")
    expect(str(op.attrs.get("kind")) in ("producer", "consumer", "compute"), "'tk.role' kind")
    expect(isinstance(op.attrs.get("warpgroups"), int), "'tk.role' needs warpgroups = N")


register_op("pipe.barriers", _barriers, pure=False, summary="S mbarriers with an arrival count")
register_op("pipe.stage", _stage, summary="one stage of a shared ring buffer")
register_op("pipe.wait", _bar_op(3), pure=False, summary="wait for a barrier phase (parity)")
register_op("pipe.expect", _bar_op(2), pure=False, summary="arrive with expected TMA bytes")
register_op("pipe.arrive", _bar_op(2), pure=False, summary="arrive on a barrier")
register_op("pipe.copy", _copy, pure=False, summary="TMA copy into a stage, completing on a barrier")
register_op("tk.role", _role, pure=False, summary="code run by one warpgroup role")


# ---------------------------------------------------------------------------------------------
# Interpreter meaning: roles run as threads that meet at mbarriers, so the interpreter checks the
# pipelined IR (and the persistent loop around it) against the examples' references too.

ROLE_TIMEOUT_S = 60.0  # a role blocked this long on a barrier phase that never completes: deadlock
WARPS_PER_WARPGROUP = 4


class Barriers:
    """An array of mbarriers (HOPPER.md §5.1): completed phases, pending arrivals and tx bytes each."""

    def __init__(self, n: int, count: int, cond: object):
        self.count = count
        self.phase = [0] * n          # completed phases
        self.arrived = [0] * n
        self.tx = [0] * n             # bytes still expected in the current phase
        self.cond = cond

    def _maybe_complete(self, s: int) -> None:
        if self.arrived[s] >= self.count and self.tx[s] == 0:
            self.phase[s] += 1
            self.arrived[s] = 0
            self.cond.notify_all()

    def arrive(self, s: int, n: int = 1, expect_bytes: int = 0) -> None:
        with self.cond:
            self.tx[s] += expect_bytes
            self.arrived[s] += n
            self._maybe_complete(s)

    def complete_tx(self, s: int, nbytes: int) -> None:
        with self.cond:
            self.tx[s] -= nbytes
            self._maybe_complete(s)

    def wait(self, s: int, parity: int, where: str) -> None:
        """try_wait.parity: returns once the phase with parity `parity` has completed, i.e. while the
        current (incomplete) phase's parity differs from it (a fresh barrier passes parity 1)."""
        with self.cond:
            if not self.cond.wait_for(lambda: self.phase[s] % 2 != parity % 2, ROLE_TIMEOUT_S):
                raise TimeoutError(f"{where}pipe.wait on barrier {s} (parity {parity}) never completed: "
                                   "the roles deadlock")


def register_interp_handlers() -> bool:
    import threading

    interp = interp_if_ready()
    if interp is None:
        return False
    reg, handlers = interp.register_handler, interp.HANDLERS

    def cond_of(frame) -> threading.Condition:
        if getattr(frame, "pipe_cond", None) is None:
            frame.pipe_cond = threading.Condition()
        return frame.pipe_cond

    def where(op: Operation) -> str:
        return f"{op.loc}: " if op.loc else ""

    def barriers(op, args, frame):
        return Barriers(op.result.type.n, int(op.attrs["count"]), cond_of(frame))

    def stage(op, args, frame):
        buf, s = args
        return buf[s]

    def arrivals(op: Operation, frame) -> int:
        """A consumer role arrives once per warp on hardware: count its warps; a producer is one thread."""
        role = getattr(frame, "pipe_role", {}).get(threading.get_ident())
        if role is None or str(role.attrs.get("kind")) == "producer":
            return 1
        return WARPS_PER_WARPGROUP * int(role.attrs.get("warpgroups", 1))

    def copy(op, args, frame):
        dst, bars, s, src, *coords = args
        load = Operation("tk.load", [op.operands[0], op.operands[3], *op.operands[4:]])
        handlers["tk.load"](load, [dst, src, *coords], frame)
        bars.complete_tx(s, int(op.attrs.get("bytes", op.operands[0].type.nbytes)))

    def role(op, args, frame):
        """Run every role of the kernel body concurrently, the first time one is reached."""
        if getattr(frame, "pipe_roles_done", None) is op:
            return None
        body = op.parent
        roles = [o for o in body.ops if o.name == "tk.role"]
        errors: list[BaseException] = []
        frame.pipe_role = {}

        def run(r: Operation) -> None:
            frame.pipe_role[threading.get_ident()] = r
            try:
                frame.run_block(r.body, [])
            except BaseException as e:  # reported by the main thread
                errors.append(e)
                with cond_of(frame):  # wake the others: they will time out or finish
                    cond_of(frame).notify_all()

        threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in roles]
        for t in threads:
            t.start()
        for t in threads:
            t.join(ROLE_TIMEOUT_S * 2)
        if errors:
            e = errors[0]
            raise interp.InterpError(str(e)) if not isinstance(e, interp.InterpError) else e
        if any(t.is_alive() for t in threads):
            raise interp.InterpError(f"{where(op)}tk.role: roles still running after {2 * ROLE_TIMEOUT_S} s")
        frame.pipe_roles_done = roles[-1]
        return None

    def role_entry(op, args, frame):
        if getattr(frame, "pipe_roles_started", None) is op.parent:  # the later roles already ran
            return None
        frame.pipe_roles_started = op.parent
        return role(op, args, frame)

    reg("pipe.barriers", barriers)
    reg("pipe.stage", stage)
    reg("pipe.expect", lambda op, a, f: a[0].arrive(a[1], arrivals(op, f), int(op.attrs["bytes"])))
    # a deferred arrive releases the previous iteration's stage on hardware (its async mma may still
    # read it); the interpreter's mma is synchronous, so releasing this iteration's stage is the same
    reg("pipe.arrive", lambda op, a, f: a[0].arrive(a[1], arrivals(op, f)))
    reg("pipe.wait", lambda op, a, f: a[0].wait(a[1], a[2], where(op)))
    reg("pipe.copy", copy)
    reg("tk.role", role_entry)
    return True


register_interp_handlers()
