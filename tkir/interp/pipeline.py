"""The interpreter's meaning of the pipelined level's ops (tkir/ops_pipeline.py).

Roles run as threads that meet at mbarriers, so the interpreter checks the pipelined IR (and the
persistent loop around it) against the examples' references too: the first `tk.role` reached runs
every role of its block concurrently; `pipe.wait` blocks its thread until the barrier's phase
completes (`count` arrivals and all expected TMA bytes, HOPPER.md §5.1).

cp.async copies (`pipe.async_copy`, `pipe.async_commit`, `pipe.async_wait`) land late, as on the
GPU: a copy reads the global tile when it is issued, fills its stage with NaN (the stage holds
nothing defined while the copy is in flight) and writes the tile there only when a wait covers its
group. So a schedule that reads a stage before waiting for its copy, or issues a copy into a stage
that is still to be read, computes NaN instead of the reference.

A consumer role's read (tk.mma, tk.load) of a ring stage it has released and not waited for again is an
InterpError naming the read, the stage and the release (Releases), not a computation with data the
producer may be overwriting.
"""

from __future__ import annotations

import threading
from collections import deque

import numpy as np

from tkir.interp.frame import HANDLERS, Frame, InterpError, register_handler, where
from tkir.interp.ops import load
from tkir.ir import Operation
from tkir.target import WARP, WARPS_PER_WARPGROUP

# The ops that read a ring stage's data in a consumer role (checked against its releases: Releases).
STAGE_READERS = ("tk.mma", "tk.load")
ROLE_TIMEOUT_S = 60.0  # a role blocked this long on a barrier phase that never completes: deadlock
ABANDONED_NOTE = "RoleAborted"  # in the note of a role's error when the block's other roles gave up waiting


class Barriers:
    """An array of mbarriers (HOPPER.md §5.1): completed phases, pending arrivals and tx bytes each."""

    def __init__(self, n: int, count: int, cond: threading.Condition):
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
            done = self.cond.wait_for(lambda: self.phase[s] % 2 != parity % 2 or _aborted(self.cond), ROLE_TIMEOUT_S)
            if _aborted(self.cond) and self.phase[s] % 2 == parity % 2:
                raise RoleAborted(f"{where}pipe.wait abandoned: another role failed")
            if not done:
                raise TimeoutError(f"{where}pipe.wait on barrier {s} (parity {parity}) never completed: "
                                   "the roles deadlock")


class RoleAborted(Exception):
    """A role's barrier wait given up because another role of the block failed (that role's error is reported)."""


def _aborted(cond: threading.Condition) -> bool:
    return getattr(cond, "aborted", False)


def _cond_of(frame: Frame) -> threading.Condition:
    if getattr(frame, "pipe_cond", None) is None:
        frame.pipe_cond = threading.Condition()
    return frame.pipe_cond


def _barriers(op: Operation, args: list, frame: Frame) -> Barriers:
    return Barriers(op.result.type.n, int(op.attrs["count"]), _cond_of(frame))


def _stage(op: Operation, args: list, frame: Frame) -> object:
    buf, s = args
    return buf[s]


def _role_of(frame: Frame) -> Operation | None:
    return getattr(frame, "pipe_role", {}).get(threading.get_ident())


def _role_warps(role: Operation) -> int:
    if isinstance(role.attrs.get("warps"), int):
        return int(role.attrs["warps"])
    return WARPS_PER_WARPGROUP * int(role.attrs.get("warpgroups", 1))


def _arrivals(op: Operation, frame: Frame) -> int:
    """A consumer role arrives once per warp on hardware: count its warps; a producer is one thread."""
    role = _role_of(frame)
    if role is None or str(role.attrs.get("kind")) == "producer":
        return 1
    return _role_warps(role)


def _copy(op: Operation, args: list, frame: Frame) -> None:
    """TMA: the bytes complete the barrier's transaction count. cp.async (`cp_async = true`): every
    thread of the role arrives once its chunks have landed (the interpreter's copy lands at once)."""
    dst, bars, s, src, *coords = args
    tk_load = Operation("tk.load", [op.operands[0], op.operands[3], *op.operands[4:]])
    load(tk_load, [dst, src, *coords], frame)
    if op.attrs.get("cp_async"):
        role = _role_of(frame)
        bars.arrive(s, WARP * (_role_warps(role) if role is not None else 1))
        return
    bars.complete_tx(s, int(op.attrs.get("bytes", op.operands[0].type.nbytes)))


def _run_roles(op: Operation, args: list, frame: Frame) -> None:
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
        except BaseException as e:  # reported by the main thread: the first error, not the waits it abandons
            errors.append(e)
            with _cond_of(frame):  # wake the others: their barrier waits give up (RoleAborted) or they finish
                _cond_of(frame).aborted = True
                _cond_of(frame).notify_all()

    threads = [threading.Thread(target=run, args=(r,), daemon=True) for r in roles]
    for t in threads:
        t.start()
    for t in threads:
        t.join(ROLE_TIMEOUT_S * 2)
    if errors:
        e = next((x for x in errors if not isinstance(x, RoleAborted)), errors[0])
        out = InterpError(str(e)) if not isinstance(e, InterpError) else e
        abandoned = sum(isinstance(x, RoleAborted) for x in errors)
        if abandoned:
            out.add_note(f"{abandoned} other role(s) gave up their barrier waits ({ABANDONED_NOTE})")
        raise out
    if any(t.is_alive() for t in threads):
        raise InterpError(f"{where(op)}tk.role: roles still running after {2 * ROLE_TIMEOUT_S} s")
    frame.pipe_roles_done = roles[-1]
    return None


def _role(op: Operation, args: list, frame: Frame) -> None:
    if getattr(frame, "pipe_roles_started", None) is op.parent:  # the later roles already ran
        return None
    frame.pipe_roles_started = op.parent
    return _run_roles(op, args, frame)


class AsyncCopies:
    """One block's cp.async state (PTX ISA cp.async.commit_group / wait_group): the copies issued
    since the last commit, and the committed groups still in flight, oldest first. Each copy is a
    (destination stage, data) pair; the data lands when a wait retires its group."""

    def __init__(self) -> None:
        self.open: list[tuple[int, np.ndarray, np.ndarray]] = []  # (stage, destination, data)
        self.groups: deque[list[tuple[int, np.ndarray, np.ndarray]]] = deque()

    def commit(self, stage: int, where: str) -> None:
        wrong = sorted({s for s, _, _ in self.open if s != stage})
        if wrong:
            raise InterpError(f"{where}pipe.async_commit of the group for stage {stage} closes copies into "
                              f"stage {wrong[0]}")
        self.groups.append(self.open)
        self.open = []

    def wait(self, pending: int) -> None:
        """Retire the oldest groups until at most `pending` are in flight (copies not yet committed
        are not waited for, as cp.async.wait_group does not)."""
        while len(self.groups) > pending:
            for _, dst, data in self.groups.popleft():
                dst[...] = data


def _async_copies(frame: Frame) -> AsyncCopies:
    if getattr(frame, "cp_async", None) is None:
        frame.cp_async = AsyncCopies()
    return frame.cp_async


def _async_copy(op: Operation, args: list, frame: Frame) -> None:
    cond, buf, s, src, *coords = args
    if not cond:
        return
    dst = buf[s]
    data = np.zeros_like(dst)
    tk_load = Operation("tk.load", [op.operands[1], op.operands[3], *op.operands[4:]])
    load(tk_load, [data, src, *coords], frame)  # zero fill past the tensor's edge, as cp.async's src-size 0
    if np.issubdtype(dst.dtype, np.floating):
        dst.fill(np.nan)  # in flight: undefined until a wait covers the copy
    _async_copies(frame).open.append((int(s), dst, data))


class Releases:
    """One block's released ring stages, per consumer role (its thread), so that a read of a stage after the
    role released it and before it waited for the stage's next fill is an error, not a computation with data
    the producer may be overwriting (an interpreter run is then a race detector). Tracked: releases tagged
    with their tile (`pipe.arrive %empty_<t>, s {tile = "<t>"}`, early-release's rings), not `deferred` ones
    (those release the previous iteration's stage on hardware). Re-armed by the role's next `pipe.wait` on
    the stage (with that tile, or untagged)."""

    def __init__(self) -> None:
        self.views: dict[int, tuple[np.ndarray, str, int]] = {}    # id(stage view) -> (view, tile, stage)
        self.released: dict[tuple[int, str, int], str] = {}        # (thread, tile, stage) -> the release's place

    def view(self, op: Operation, v: np.ndarray, s: int) -> None:
        self.views[id(v)] = (v, op.operands[0].name or "?", int(s))

    def release(self, op: Operation, s: int, frame: Frame) -> None:
        tile = op.attrs.get("tile")
        if tile is None or op.attrs.get("deferred") or not _consumer(frame):
            return
        at = f" at {op.loc}" if op.loc else ""
        self.released[(threading.get_ident(), str(tile), int(s))] = f"'pipe.arrive %{op.operands[0].name}'{at}"

    def rearm(self, op: Operation, s: int, frame: Frame) -> None:
        tile, me = op.attrs.get("tile"), threading.get_ident()
        for key in [k for k in self.released if k[0] == me and k[2] == int(s) and tile in (None, k[1])]:
            del self.released[key]

    def check(self, op: Operation, args: list, frame: Frame) -> None:
        if not self.released or not _consumer(frame):
            return
        me = threading.get_ident()
        for a in args:
            entry = self.views.get(id(a))
            if entry is None or entry[0] is not a:
                continue
            _, tile, s = entry
            at = self.released.get((me, tile, s))
            if at is not None:
                raise InterpError(f"{where(op)}'{op.name}' reads stage {s} of %{tile} after the "
                                  f"{_role_of(frame).attrs.get('kind')} role released it ({at}) and "
                                  "before it waited for the stage's next fill: the producer may be overwriting it")


def _consumer(frame: Frame) -> bool:
    role = _role_of(frame)
    return role is not None and str(role.attrs.get("kind")) != "producer"


def _releases(frame: Frame) -> Releases:
    if getattr(frame, "pipe_releases", None) is None:
        frame.pipe_releases = Releases()
    return frame.pipe_releases


def _stage_view(op: Operation, args: list, frame: Frame) -> object:
    v = _stage(op, args, frame)
    _releases(frame).view(op, v, args[1])
    return v


def _arrive(op: Operation, args: list, frame: Frame) -> None:
    _releases(frame).release(op, args[1], frame)
    args[0].arrive(args[1], _arrivals(op, frame))


def _wait(op: Operation, args: list, frame: Frame) -> None:
    args[0].wait(args[1], args[2], where(op))
    _releases(frame).rearm(op, args[1], frame)


def _checked(name: str) -> None:
    """The op `name` (a reader of shared tiles) first checks that none of its stage views was released."""
    inner = HANDLERS[name]

    def fn(op: Operation, args: list, frame: Frame) -> object:
        if getattr(frame, "pipe_releases", None) is not None:
            frame.pipe_releases.check(op, args, frame)
        return inner(op, args, frame)

    register_handler(name, fn)


register_handler("pipe.barriers", _barriers)
register_handler("pipe.stage", _stage_view)
register_handler("pipe.expect", lambda op, a, f: a[0].arrive(a[1], _arrivals(op, f), int(op.attrs["bytes"])))
# a deferred arrive releases the previous iteration's stage on hardware (its async mma may still
# read it); the interpreter's mma is synchronous, so releasing this iteration's stage is the same
register_handler("pipe.arrive", _arrive)
register_handler("pipe.wait", _wait)
register_handler("pipe.copy", _copy)
register_handler("tk.role", _role)
register_handler("tk.mma_wait", lambda op, a, f: a[0])  # the interpreter's mma is synchronous
for _turn in ("pipe.turn_init", "pipe.turn_wait", "pipe.turn_pass"):  # a role's warpgroups run together here
    register_handler(_turn, lambda op, a, f: None)
register_handler("pipe.async_copy", _async_copy)
register_handler("pipe.async_commit", lambda op, a, f: _async_copies(f).commit(int(a[0]), where(op)))
register_handler("pipe.async_wait", lambda op, a, f: _async_copies(f).wait(int(op.attrs["pending"])))
for _reader in STAGE_READERS:
    _checked(_reader)
