"""Lowering rules for element-by-element copies between registers, shared and global memory, for
every register layout (filled in below).

Rules of backend.rules' table.
"""

from __future__ import annotations
