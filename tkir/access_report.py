"""AccessReport: one shared-memory access as bank-conflicts reports it (an op's `access` attribute).

bank-conflicts writes a list of these into `op.attrs["access"]` of every op that touches a shared
tile (create-tma the same for the epilogue staging tile it adds); `tkc report` (tkir/tools/report.py) reads
them back. In the IR they stay plain attribute dicts, so the text is what it always was:
`{op = "ldmatrix.x4", tile = "a", degree = 1, degree_before = 8}`, plus `hardware = true` on the
hardware paths (TMA, wgmma descriptor fetches) and `major = "K"` or `"MN"` on wgmma operands.
Writers build an AccessReport and store `to_attr()`; readers call `from_attr` (or `reports_of(op)`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tkir.facts import FactError

ACCESS_ATTR = "access"             # the op attribute holding the list
MAJORS = ("K", "MN")               # a wgmma operand's major-ness (HOPPER.md §2.3)
_KEYS = ("op", "tile", "degree", "degree_before", "hardware", "major")


@dataclass(frozen=True)
class AccessReport:
    """One warp-wide access pattern to one shared tile, with its bank-conflict degree."""

    op: str                   # the instruction: "ldmatrix.x4", "st.shared.v2", "tma", "wgmma.desc", ...
    tile: str                 # the shared tile's source name
    degree: int               # wavefronts per 128-byte phase of the worst instruction, under the tile's layout
    degree_before: int        # the same under the plain layout (unswizzled, unpadded)
    hardware: bool = False    # a hardware path (TMA, wgmma descriptor fetch), not thread instructions
    major: str | None = None  # wgmma operands only: "K" or "MN"

    def __post_init__(self) -> None:
        if self.degree < 1 or self.degree_before < 1:
            raise FactError(None, f"access {self.op} of '{self.tile}': degrees are 1 or more, not "
                             f"{self.degree} / {self.degree_before}")
        if self.major is not None and self.major not in MAJORS:
            raise FactError(None, f"access {self.op} of '{self.tile}': major must be one of {MAJORS}, "
                                  f"not {self.major!r}")

    def to_attr(self) -> dict[str, object]:
        """The attribute dict, keys in the order the IR text has always shown them."""
        out: dict[str, object] = {"op": self.op, "tile": self.tile, "degree": self.degree,
                                  "degree_before": self.degree_before}
        if self.hardware:
            out["hardware"] = True
        if self.major is not None:
            out["major"] = self.major
        return out

    @classmethod
    def from_attr(cls, attr: object) -> AccessReport:
        """Read one entry back; FactError (a ValueError) names what is wrong with a malformed one."""
        if not isinstance(attr, dict):
            raise FactError(None, f"an access entry is a dict, not {attr!r}")
        unknown = sorted(set(attr) - set(_KEYS))
        if unknown:
            raise FactError(None, f"access entry {attr!r}: unknown keys {unknown}")
        d: dict[str, Any] = attr
        for key, kind, what in (("op", str, "a string"), ("tile", str, "a string"), ("degree", int, "an integer"),
                                ("degree_before", int, "an integer")):
            if not isinstance(d.get(key), kind) or isinstance(d.get(key), bool):
                raise FactError(None, f"access entry {attr!r}: '{key}' must be {what}")
        if not isinstance(d.get("hardware", False), bool):
            raise FactError(None, f"access entry {attr!r}: 'hardware' must be true or false")
        return cls(d["op"], d["tile"], d["degree"], d["degree_before"], d.get("hardware", False), d.get("major"))


def reports_of(attrs: dict[str, object]) -> list[AccessReport]:
    """The access reports in an op's attributes (none when it has no `access` attribute)."""
    entries = attrs.get(ACCESS_ATTR)
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise FactError(None, f"'{ACCESS_ATTR}' is a list of access entries, not {entries!r}")
    return [AccessReport.from_attr(e) for e in entries]


def add_report(attrs: dict[str, object], report: AccessReport) -> None:
    """Append `report` to an op's `access` attribute (created at the end of the attrs when absent)."""
    entries = attrs.setdefault(ACCESS_ATTR, [])
    if not isinstance(entries, list):
        raise FactError(None, f"'{ACCESS_ATTR}' is a list of access entries, not {entries!r}")
    entries.append(report.to_attr())
