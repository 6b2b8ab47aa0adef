"""A disk cache of compiled modules, so a kernel that was built once loads without LLVM or ptxas.

    key = cache.make_key(source_text, consts, options, target)
    art = cache.get(key)                 # {"ptx": ..., "launch": ..., "sass": ..., "cubin": b"..."} or None
    if art is None:
        art = build(); cache.put(key, art)

The key is the sha256 of everything the artifacts depend on: the source text, the constants, the
compile options, the target, and the versions of tkir, llvmlite and ptxas. An entry is one JSON file
`<key>.json` in `$TKIR_CACHE_DIR` (default `~/.cache/tkir`); bytes values (a cubin) are stored as
base64, other values as JSON. Entries are written to a temporary file in the same folder and moved
into place with os.replace, so a reader sees a whole entry or none; an entry that does not parse or
does not match its key is treated as missing (and the next put rewrites it). `TKIR_CACHE=0`
turns the cache off.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

FORMAT = 1  # bump when the entry layout changes; older entries then read as missing
_BYTES_TAG = "__base64__"


def enabled() -> bool:
    """False when TKIR_CACHE=0 (or 'off', 'false', 'no')."""
    return os.environ.get("TKIR_CACHE", "1").strip().lower() not in ("0", "off", "false", "no")


def cache_dir() -> Path:
    """$TKIR_CACHE_DIR, or ~/.cache/tkir."""
    env = os.environ.get("TKIR_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "tkir"


def make_key(source: str, consts: Mapping[str, Any], options: Any, target: str,
             versions: Mapping[str, str] | None = None) -> str:
    """sha256 hex of the source text, constants, options, target and tool versions (tool_versions())."""
    payload = {
        "source": source,
        "consts": {str(k): consts[k] for k in sorted(consts, key=str)},
        "options": _jsonable(options),
        "target": target,
        "versions": dict(versions) if versions is not None else tool_versions(),
    }
    text = json.dumps(payload, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tool_versions() -> dict[str, str]:
    """The versions a compiled artifact depends on; ptxas is 'absent' where it is not installed."""
    import llvmlite

    import tkir
    from tkir.backend import toolchain

    try:
        ptxas = toolchain.ptxas_version()
    except toolchain.ToolchainError:
        ptxas = "absent"
    return {"tkir": tkir.__version__, "llvmlite": llvmlite.__version__, "ptxas": ptxas}


def get(key: str) -> dict[str, Any] | None:
    """The artifacts stored under `key`, or None (missing, disabled, unreadable or corrupt)."""
    if not enabled():
        return None
    path = _path(key)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(entry, dict) or entry.get("format") != FORMAT or entry.get("key") != key:
        return None
    artifacts = entry.get("artifacts")
    if not isinstance(artifacts, dict):
        return None
    try:
        return {name: _decode(value) for name, value in artifacts.items()}
    except (ValueError, TypeError):
        return None


def put(key: str, artifacts: Mapping[str, Any]) -> None:
    """Store artifacts (str, bytes or JSON values) under `key`, atomically; a cache that cannot be
    written is a warning, never a failed compile."""
    if not enabled():
        return
    entry = {"format": FORMAT, "key": key, "artifacts": {str(k): _encode(v) for k, v in artifacts.items()}}
    text = json.dumps(entry)
    path = _path(key)
    tmp_name = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{key[:16]}.",
                                         suffix=".tmp", delete=False) as tmp:
            tmp_name = tmp.name
            tmp.write(text)
            tmp.flush()
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError as e:
        warnings.warn(f"tkir cache: could not write {path}: {e}", stacklevel=2)
    finally:
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)


# --- helpers -------------------------------------------------------------------------------------

def _path(key: str) -> Path:
    if not key or not all(c in "0123456789abcdef" for c in key):
        raise ValueError(f"cache key must be a lowercase hex digest, got {key!r}")
    return cache_dir() / f"{key}.json"


def _encode(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray)):
        return {_BYTES_TAG: base64.b64encode(bytes(value)).decode("ascii")}
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {_BYTES_TAG}:
        return base64.b64decode(value[_BYTES_TAG], validate=True)
    return value


def _jsonable(options: Any) -> Any:
    """Options as JSON: a dataclass or object becomes its field dict, so equal options give equal keys."""
    if options is None or isinstance(options, (str, int, float, bool, list, tuple, dict)):
        return options
    if hasattr(options, "__dataclass_fields__"):
        import dataclasses

        return dataclasses.asdict(options)
    if hasattr(options, "__dict__"):
        return {k: v for k, v in sorted(vars(options).items()) if not k.startswith("_")}
    return repr(options)
