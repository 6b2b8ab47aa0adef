"""LALR parsers whose tables are built once per grammar and then read back from disk.

Building the LALR tables of frontend/grammar.lark takes 50-70 ms, most of the parse step of a small
compile; reading them back takes about 6 ms. The tables go through Lark's own cache (`cache=` of
`lark.Lark`, a pickle) in `<cache folder>/parsers/`, one file per grammar; the cache folder is the
compile cache's (`$TKIR_CACHE_DIR`, default `~/.cache/tkir`). Lark stores the sha256 of the grammar
text, the parser options, its own version and Python's in the file and rebuilds the tables (and
rewrites the file) when any of them differ or the file does not read back, so an edited grammar is
picked up on the next run. The file holds parser tables, never a compiled kernel, so `TKIR_CACHE=0`
(which turns off the compile cache) leaves it in use, as Python keeps its .pyc files; where the folder
cannot be written the tables are built every time.
"""

from __future__ import annotations

import os
from pathlib import Path

import lark

TABLES_DIR = "parsers"


def lalr_parser(grammar: Path) -> lark.Lark:
    """The LALR parser of the grammar file `grammar` (positions propagated, placeholders kept)."""
    return lark.Lark(grammar.read_text(), parser="lalr", propagate_positions=True, maybe_placeholders=True,
                     cache=_tables_file(grammar))


def _tables_file(grammar: Path) -> str | bool:
    """Where the tables of `grammar` are kept, or False (build every time) if the folder is unusable."""
    env = os.environ.get("TKIR_CACHE_DIR")  # the compile cache's folder (tkir.backend.cache.cache_dir)
    folder = (Path(env) if env else Path.home() / ".cache" / "tkir") / TABLES_DIR
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    if not os.access(folder, os.W_OK | os.R_OK):
        return False
    return str(folder / f"{grammar.stem}.lark-tables")
