"""The interpreter's meaning of the TMA level's ops (tkir/ops_tma.py): exactly the tk ops they replaced.

`tma.load`/`tma.store` are `tk.load`/`tk.store` with the same operands; `tk.store_staged` is
`tk.store %G, %value, coords...` (its staging tile is an implementation detail), and so is
`tk.store_warp_staged` (stage-epilogue's staged store of the mma.sync path).
"""

from __future__ import annotations

from tkir.interp.frame import register_handler
from tkir.interp.ops import load, store

register_handler("tma.load", load)
register_handler("tma.store", store)
register_handler("tk.store_staged", lambda op, args, frame: store(op, [args[0], args[1], *args[3:]], frame))
register_handler("tk.store_warp_staged", lambda op, args, frame: store(op, [args[0], args[1], *args[3:]], frame))
