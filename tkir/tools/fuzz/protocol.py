"""Single semantic edits of a pipelined kernel's IR that break its protocol: inputs the compiler must refuse.

Each edit is a small named function over the lines of an IR dump that holds a pipeline (mbarrier rings,
TMA copies, cp.async groups): it picks a random site and returns the edited lines, or None where the
dump has no site for it. Every edit makes the program certainly wrong (a value changed is changed to a
different one; a deferred release is dropped only where an asynchronous mma reads the stage; an
`async_wait`'s pending count grows past every group in flight), so exit 0 on the result is an
`accepted-wrong` (tkir.tools.fuzz.oracle): the verifier (tkir/verify_pipeline.py, tkir/verify_tma.py) must
locate it. Edits that need a new value insert `arith.const` / `arith.add` / `arith.sub` lines named
`%fuzz_*` right before the op they feed.

The edits: copy_bytes, expect_bytes, copy_boxes, barrier_count, tma_box, elem_strides (changed numbers);
delete_wait, delete_arrive, delete_expect, delete_async_wait (a deleted op); drop_deferred; parity_flip,
parity_modulus (the wait's phase parity), ring_modulus, stage_off_by_one (the ring index); release_early
(a release moved before a read of its slot); copy_other_barrier (a copy completing on another barrier);
async_pending (cp.async.wait_group left with every group in flight).
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass

NAME = r"%[\w.]+"
OP_LINE = re.compile(r"^(?P<indent>\s*)(?:(?P<results>%[\w.]+(?:\s*,\s*%[\w.]+)*)\s*=\s*)?(?P<op>[a-z_]+\.[a-z_]+)"
                     r"(?P<rest>.*)$")
CONST_VALUE = re.compile(r"arith\.const \{value = (-?\d+)\}")
# the stage operand of each pipeline op, by position (tkir/ops_pipeline.py)
STAGE_OPERAND = {"pipe.wait": 1, "pipe.arrive": 1, "pipe.expect": 1, "pipe.copy": 2, "pipe.stage": 1,
                 "pipe.async_copy": 2, "pipe.async_commit": 0}
PROTOCOL_OPS = ("pipe.barriers", "pipe.async_copy")  # a dump with one of these holds a pipeline
ASYNC_PENDING_JUMP = 16  # added to an async_wait's pending: more groups than any ring keeps in flight


@dataclass
class Line:
    """One op line of the dump: its indentation, results, op name and operands (before its attrs)."""

    index: int
    indent: int
    results: list[str]
    op: str
    operands: list[str]


def parse(lines: list[str]) -> list[Line]:
    out = []
    for i, text in enumerate(lines):
        m = OP_LINE.match(text)
        if not m:
            continue
        rest = m["rest"]
        cut = len(rest)
        for stop in (" {", " :"):
            j = rest.find(stop)
            if j >= 0:
                cut = min(cut, j)
        results = re.findall(NAME, m["results"] or "")
        out.append(Line(i, len(m["indent"]), results, m["op"], re.findall(NAME, rest[:cut])))
    return out


def has_pipeline(text: str) -> bool:
    return any(op in text for op in PROTOCOL_OPS)


def _defs(ops: list[Line]) -> dict[str, Line]:
    return {r: ln for ln in ops for r in ln.results}


def _const_value(lines: list[str], ln: Line | None) -> int | None:
    if ln is None or ln.op != "arith.const":
        return None
    m = CONST_VALUE.search(lines[ln.index])
    return int(m.group(1)) if m else None


def _fresh(lines: list[str], stem: str) -> str:
    text = "\n".join(lines)
    n = 0
    while f"%fuzz_{stem}{n}" in text:
        n += 1
    return f"%fuzz_{stem}{n}"


def _replace_operand(line: str, position: int, new: str) -> str:
    """The op line with its `position`-th operand (a %name before the attrs) replaced by `new`."""
    m = OP_LINE.match(line)
    start = m.start("rest")
    for k, nm in enumerate(re.finditer(NAME, line[start:])):
        if k == position:
            return line[:start + nm.start()] + new + line[start + nm.end():]
    raise ValueError(position)


def _insert(lines: list[str], at: int, new: list[str]) -> list[str]:
    return lines[:at] + new + lines[at:]


def _different(rng: random.Random, old: int, choices: list[int]) -> int | None:
    choices = [c for c in choices if c != old and c > 0]
    return rng.choice(choices) if choices else None


def _change_attr(lines: list[str], rng: random.Random, op: str, attr: str, new_values) -> list[str] | None:
    pat = re.compile(rf"\b{attr} = (\d+)")
    sites = [ln for ln in parse(lines) if ln.op == op and pat.search(lines[ln.index])]
    if not sites:
        return None
    ln = rng.choice(sites)
    m = pat.search(lines[ln.index])
    new = _different(rng, int(m.group(1)), new_values(int(m.group(1))))
    if new is None:
        return None
    out = list(lines)
    out[ln.index] = lines[ln.index][:m.start(1)] + str(new) + lines[ln.index][m.end(1):]
    return out


# --- the edits -----------------------------------------------------------------------------------


def copy_bytes(lines: list[str], rng: random.Random) -> list[str] | None:
    """A TMA copy's byte count changed (it completes other bytes than its tile's on the barrier)."""
    return _change_attr(lines, rng, "pipe.copy", "bytes", lambda n: [n // 2, n * 2, n + 16, n - 16])


def expect_bytes(lines: list[str], rng: random.Random) -> list[str] | None:
    """A `pipe.expect` announces other bytes than its copies deliver."""
    return _change_attr(lines, rng, "pipe.expect", "bytes", lambda n: [n // 2, n * 2, n + 16, n - 16])


def copy_boxes(lines: list[str], rng: random.Random) -> list[str] | None:
    """A TMA copy issues another number of boxes than its tile holds."""
    return _change_attr(lines, rng, "pipe.copy", "boxes", lambda n: [n - 1, n + 1, n * 2])


def barrier_count(lines: list[str], rng: random.Random) -> list[str] | None:
    """An mbarrier's arrival count changed (its phases complete after another number of arrivals)."""
    return _change_attr(lines, rng, "pipe.barriers", "count", lambda n: [n // 2, n + 1, n * 2])


def _change_list(lines: list[str], rng: random.Random, attr: str, new_values) -> list[str] | None:
    pat = re.compile(rf"\b{attr} = \[([^\]]*)\]")
    sites = [i for i, t in enumerate(lines) if t.startswith("tma.desc") and pat.search(t)]
    if not sites:
        return None
    i = rng.choice(sites)
    m = pat.search(lines[i])
    items = [s.strip() for s in m.group(1).split(",")]
    k = rng.randrange(len(items))
    if not items[k].lstrip("-").isdigit():
        return None
    new = _different(rng, int(items[k]), new_values(int(items[k])))
    if new is None:
        return None
    items[k] = str(new)
    out = list(lines)
    out[i] = lines[i][:m.start(1)] + ", ".join(items) + lines[i][m.end(1):]
    return out


def tma_box(lines: list[str], rng: random.Random) -> list[str] | None:
    """A TMA descriptor's box changed along one dim (its copies no longer fill their tiles)."""
    return _change_list(lines, rng, "box", lambda n: [n // 2, n * 2])


def elem_strides(lines: list[str], rng: random.Random) -> list[str] | None:
    """A TMA descriptor copies every n-th element along one dim (tkir's tiles are dense)."""
    return _change_list(lines, rng, "elem_strides", lambda n: [2, 4, 8])


def _delete(lines: list[str], rng: random.Random, op: str) -> list[str] | None:
    sites = [ln.index for ln in parse(lines) if ln.op == op]
    if not sites:
        return None
    i = rng.choice(sites)
    return lines[:i] + lines[i + 1:]


def delete_wait(lines: list[str], rng: random.Random) -> list[str] | None:
    """A `pipe.wait` deleted (a stage read before it is filled, or refilled before it is released)."""
    return _delete(lines, rng, "pipe.wait")


def delete_arrive(lines: list[str], rng: random.Random) -> list[str] | None:
    """A release (`pipe.arrive`) deleted: the producer waits for it forever, or a fill is never released."""
    return _delete(lines, rng, "pipe.arrive")


def delete_expect(lines: list[str], rng: random.Random) -> list[str] | None:
    """A `pipe.expect` deleted: copies complete bytes no phase announced."""
    return _delete(lines, rng, "pipe.expect")


def delete_async_wait(lines: list[str], rng: random.Random) -> list[str] | None:
    """A `pipe.async_wait` deleted where a stage is read after it (the read may see a copy in flight)."""
    ops = parse(lines)
    sites = []
    for k, ln in enumerate(ops):
        if ln.op == "pipe.async_wait" and any(x.op == "pipe.stage" for x in ops[k + 1:]):
            sites.append(ln.index)
    if not sites:
        return None
    i = rng.choice(sites)
    return lines[:i] + lines[i + 1:]


def _block_of(ops: list[Line], k: int) -> list[Line]:
    """The ops of the block op k sits in (same indentation, up to the enclosing op's line and its end)."""
    ind = ops[k].indent
    lo = k
    while lo > 0 and ops[lo - 1].indent >= ind:
        lo -= 1
    hi = k
    while hi + 1 < len(ops) and ops[hi + 1].indent >= ind:
        hi += 1
    return [x for x in ops[lo:hi + 1] if x.indent == ind]


def _loops(ops: list[Line], lines: list[str]) -> tuple[list[Line], set[int]]:
    """The pipelined loops (`scf.for {stages = S}`) and the indices of the tails among them: a loop after
    a sibling pipelined loop in the same block (split-masks' masked loop, which may run once, so an index
    edit there can be harmless)."""
    loops = [ln for ln in ops if ln.op == "scf.for" and "stages = " in lines[ln.index] and len(ln.operands) >= 2]
    tails = set()
    for k, x in enumerate(ops):
        if x not in loops:
            continue
        for y in reversed(ops[:k]):
            if y.indent < x.indent:
                break
            if y.indent == x.indent and y in loops:
                tails.add(x.index)
                break
    return loops, tails


def _in_loop(ops: list[Line], lines: list[str], target: Line, allow_outside: bool) -> bool:
    """Whether an index edit at `target` certainly changes what the program does: it sits in a pipelined
    loop that is not a tail (or, with allow_outside, in no pipelined loop and no scf.if at all)."""
    loops, tails = _loops(ops, lines)
    k = ops.index(target)
    ind = target.indent
    enclosing = []
    for x in reversed(ops[:k]):
        if x.indent < ind:
            enclosing.append(x)
            ind = x.indent
    inside = [x for x in enclosing if x in loops]
    if not inside:  # outside the loops: not in an scf.if either (a peeled iteration whose copies may be off)
        return allow_outside and not any(x.op == "scf.if" for x in enclosing)
    return not any(x.index in tails for x in inside)


def drop_deferred(lines: list[str], rng: random.Random) -> list[str] | None:
    """`deferred` dropped from a release whose loop's mma leaves its wgmma group in flight: the stage is
    released while the mma may still read it."""
    ops = parse(lines)
    async_mma = re.compile(r"async_groups = [1-9]")
    sites = []
    for k, ln in enumerate(ops):
        if ln.op == "pipe.arrive" and "deferred = true" in lines[ln.index]:
            if any(x.op == "tk.mma" and async_mma.search(lines[x.index]) for x in _block_of(ops, k)):
                sites.append(ln.index)
    if not sites:
        return None
    i = rng.choice(sites)
    t = lines[i]
    t = t.replace(", deferred = true", "").replace("deferred = true, ", "").replace(" {deferred = true}", "")
    out = list(lines)
    out[i] = t
    return out


def _wait_sites(ops: list[Line]) -> list[Line]:
    return [ln for ln in ops if ln.op == "pipe.wait" and len(ln.operands) == 3]


def parity_flip(lines: list[str], rng: random.Random) -> list[str] | None:
    """A wait's phase parity complemented (1 - p): it passes before its phase completes, or never."""
    ops = parse(lines)
    sites = _wait_sites(ops)
    if not sites:
        return None
    ln = rng.choice(sites)
    one, flip = _fresh(lines, "one"), _fresh(lines, "flip")
    pad = " " * ln.indent
    out = list(lines)
    out[ln.index] = _replace_operand(lines[ln.index], 2, flip)
    return _insert(out, ln.index, [f"{pad}{one} = arith.const {{value = 1}} : i32",
                                   f"{pad}{flip} = arith.sub {one}, {ln.operands[2]} : i32"])


def _new_modulus(lines: list[str], rng: random.Random, ops: list[Line], defn: Line, values) -> list[str] | None:
    """The `arith.rem A, B` at `defn` with B replaced by a new constant of another value."""
    defs = _defs(ops)
    old = _const_value(lines, defs.get(defn.operands[1]))
    new = _different(rng, old if old is not None else -1, values(old))
    if new is None:
        return None
    name = _fresh(lines, "mod")
    out = list(lines)
    out[defn.index] = _replace_operand(lines[defn.index], 1, name)
    return _insert(out, defn.index, [f"{' ' * defn.indent}{name} = arith.const {{value = {new}}} : i32"])


def parity_modulus(lines: list[str], rng: random.Random) -> list[str] | None:
    """The phase parity computed modulo another number than 2 (round mod 1, 3 or 4)."""
    ops = parse(lines)
    defs = _defs(ops)
    sites = []
    for ln in _wait_sites(ops):
        d = defs.get(ln.operands[2])
        if d is not None and d.op == "arith.sub" and len(d.operands) == 2:  # the free phase: 1 - phase
            d = defs.get(d.operands[1])
        if d is not None and d.op == "arith.rem" and len(d.operands) == 2:
            sites.append(d)
    sites = [d for d in sites if _in_loop(ops, lines, d, False)]
    if not sites:
        return None
    return _new_modulus(lines, rng, ops, rng.choice(sites), lambda old: [1, 3, 4])


def ring_modulus(lines: list[str], rng: random.Random) -> list[str] | None:
    """The ring index computed modulo another number than the stage count."""
    ops = parse(lines)
    defs = _defs(ops)
    sites = []
    for ln in ops:
        pos = STAGE_OPERAND.get(ln.op)
        if pos is not None and pos < len(ln.operands):
            d = defs.get(ln.operands[pos])
            if d is not None and d.op == "arith.rem" and len(d.operands) == 2 and _in_loop(ops, lines, d, False):
                sites.append(d)
    if not sites:
        return None
    return _new_modulus(lines, rng, ops, rng.choice(sites),
                        lambda old: [old - 1, old + 1, 2 * old] if old else [1, 3, 5])


def stage_off_by_one(lines: list[str], rng: random.Random) -> list[str] | None:
    """One pipeline op's stage index plus one (a wait, arrive, expect, copy, view or commit of the next
    stage; past the ring's last stage in its last slot)."""
    ops = parse(lines)
    sites = [ln for ln in ops if STAGE_OPERAND.get(ln.op, 99) < len(ln.operands) and _in_loop(ops, lines, ln, True)]
    if not sites:
        return None
    ln = rng.choice(sites)
    one, nxt = _fresh(lines, "one"), _fresh(lines, "stage")
    pad = " " * ln.indent
    out = list(lines)
    out[ln.index] = _replace_operand(lines[ln.index], STAGE_OPERAND[ln.op], nxt)
    return _insert(out, ln.index, [f"{pad}{one} = arith.const {{value = 1}} : i32",
                                   f"{pad}{nxt} = arith.add {ln.operands[STAGE_OPERAND[ln.op]]}, {one} : i32"])


def release_early(lines: list[str], rng: random.Random) -> list[str] | None:
    """A (non-deferred) release moved up before the first read of a view of the stage it releases."""
    ops = parse(lines)
    sites = []
    for k, ln in enumerate(ops):
        if ln.op != "pipe.arrive" or "deferred" in lines[ln.index] or len(ln.operands) != 2:
            continue
        block = _block_of(ops, k)
        here = block.index(ln)
        views = {x.results[0] for x in block[:here] if x.op == "pipe.stage" and x.results
                 and x.operands[1:2] == ln.operands[1:2]}
        readers = [x for x in block[:here] if views & set(x.operands) and x.op != "pipe.copy"]
        if readers:
            sites.append((ln, readers[0]))
    if not sites:
        return None
    ln, reader = rng.choice(sites)
    out = list(lines)
    moved = out.pop(ln.index)
    return _insert(out, reader.index, [moved])


def copy_other_barrier(lines: list[str], rng: random.Random) -> list[str] | None:
    """A TMA copy completes on another barrier array than the one its consumers wait on."""
    ops = parse(lines)
    bars = [r for ln in ops if ln.op == "pipe.barriers" for r in ln.results]
    sites = [ln for ln in ops if ln.op == "pipe.copy" and len(ln.operands) > 1]
    if len(bars) < 2 or not sites:
        return None
    ln = rng.choice(sites)
    other = rng.choice([b for b in bars if b != ln.operands[1]])
    out = list(lines)
    out[ln.index] = _replace_operand(lines[ln.index], 1, other)
    return out


def async_pending(lines: list[str], rng: random.Random) -> list[str] | None:
    """A `pipe.async_wait` that leaves every committed cp.async group in flight (pending + 16)."""
    return _change_attr(lines, rng, "pipe.async_wait", "pending", lambda n: [n + ASYNC_PENDING_JUMP])


EDITS: dict[str, Callable[[list[str], random.Random], list[str] | None]] = {
    f.__name__: f for f in (copy_bytes, expect_bytes, copy_boxes, barrier_count, tma_box, elem_strides, delete_wait,
                            delete_arrive, delete_expect, delete_async_wait, drop_deferred, parity_flip,
                            parity_modulus, ring_modulus, stage_off_by_one, release_early, copy_other_barrier,
                            async_pending)}


def edit(text: str, rng: random.Random) -> tuple[str, str] | None:
    """One protocol edit of `text` at a random site: (edited text, the edit's name), or None if no edit applies."""
    lines = text.split("\n")
    names = list(EDITS)
    rng.shuffle(names)
    for name in names:
        out = EDITS[name](lines, rng)
        if out is not None and out != lines:
            return "\n".join(out), name
    return None
