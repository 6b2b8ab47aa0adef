"""A disk cache of compiled modules, so a kernel that was built once loads without LLVM or ptxas.

    key = cache.make_key(source_text, consts, options, target)
    art = cache.get(key)                 # {"ptx": ..., "launch": ..., "sass": ..., "cubin": b"..."} or None
    if art is None:
        art = build(); cache.put(key, art)

The key is the sha256 of everything the artifacts depend on: the source text, the constants, the
compile options, the target, and the versions of tkir, llvmlite and ptxas. An entry is one JSON file
`<key>.json` in `$TKIR_CACHE_DIR` (default `~/.cache/tkir`):

    {"format": 2, "key": KEY, "sha256": HASH, "artifacts": {NAME: VALUE, ...}}

bytes values (a cubin) are stored as base64, other values as JSON; HASH is the sha256 of the
artifacts' canonical JSON (`content_hash`). Entries are written to a temporary file in the same
folder and moved into place with os.replace, so a reader sees a whole entry or none. `get` verifies
every entry it reads: JSON that parses, this format, its own key, the content hash, and the type of
each known artifact (ARTIFACT_TYPES: `ptx` a str, `launch` a dict with the launch description's
keys, `cubin` bytes, ...). An entry that fails any check is treated as missing, with a CacheWarning
naming the file and the reason; the caller rebuilds and the next `put` rewrites it.
`TKIR_CACHE=0` turns the cache off. `info()` and `clear()` are `tkc cache info` and `tkc cache clear`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tkir.diagnostics import TkirWarning

FORMAT = 2  # bump when the entry layout changes; older entries then read as missing (2: content hash)
_BYTES_TAG = "__base64__"
ENTRY_SUFFIX = ".json"
KEY_CHARS = frozenset("0123456789abcdef")

# The type of each artifact the compiler stores (tkir.api BACKEND_STAGES, and what ptxas adds); a
# value of another type in an entry makes the entry invalid. Names not listed here are not checked.
ARTIFACT_TYPES: dict[str, type] = {"llvm": str, "ptx": str, "sass": str, "launch": dict, "cubin": bytes}
# Keys every launch description has, with their types (tkir.backend.launch.build_launch).
LAUNCH_FIELDS: dict[str, type] = {"kernel": str, "params": list, "grid": list, "block": list}


class CacheWarning(TkirWarning):
    """A cache entry that could not be used (it is rebuilt) or a cache that could not be written."""


class InvalidEntry(ValueError):
    """Why a cache entry was rejected (an internal signal of `get`; callers see a CacheWarning)."""


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

    from tkir.backend import toolchain
    from tkir.version import __version__

    try:
        ptxas = toolchain.ptxas_version()
    except toolchain.ToolchainError:
        ptxas = "absent"
    return {"tkir": __version__, "llvmlite": llvmlite.__version__, "ptxas": ptxas}


def get(key: str, required: Iterable[str] = (),
        read: Mapping[str, Callable[[Any], Any]] | None = None) -> dict[str, Any] | None:
    """The artifacts stored under `key`, or None: missing, disabled, or invalid (see the module
    docstring; an invalid entry, or one without every `required` artifact, also warns). `read` turns
    named artifacts into what the caller uses (`{"launch": LaunchDescription.from_json}`); one that
    raises ValueError makes the entry invalid, with its message."""
    if not enabled():
        return None
    path = _path(key)
    try:
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        _warn_invalid(path, f"unreadable ({e})")
        return None
    try:
        artifacts = _verify(text, key)
        missing = [name for name in required if name not in artifacts]
        if missing:
            raise InvalidEntry(f"no {', '.join(missing)} artifact")
        for name, reader in (read or {}).items():
            if name in artifacts:
                try:
                    artifacts[name] = reader(artifacts[name])
                except ValueError as e:
                    raise InvalidEntry(f"'{name}' does not read: {e}") from None
    except InvalidEntry as e:
        _warn_invalid(path, str(e))
        return None
    return artifacts


def content_hash(artifacts: Mapping[str, Any]) -> str:
    """sha256 hex of the (encoded) artifacts as canonical JSON: sorted keys, no spaces."""
    text = json.dumps(artifacts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def put(key: str, artifacts: Mapping[str, Any]) -> None:
    """Store artifacts (str, bytes or JSON values) under `key`, atomically, with their content hash; a
    cache that cannot be written is a warning, never a failed compile. A known artifact of the wrong
    type (ARTIFACT_TYPES) is a TypeError: the caller has a bug, and the entry would be rejected."""
    if not enabled():
        return
    for name, value in artifacts.items():
        problem = _type_problem(str(name), value)
        if problem:
            raise TypeError(f"tkir cache: artifact {problem}")
    encoded = {str(k): _encode(v) for k, v in artifacts.items()}
    entry = {"format": FORMAT, "key": key, "sha256": content_hash(encoded), "artifacts": encoded}
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
        warnings.warn(f"tkir cache: could not write {path}: {e}", CacheWarning, stacklevel=2)
    finally:
        if tmp_name is not None:
            Path(tmp_name).unlink(missing_ok=True)


@dataclass(frozen=True)
class CacheInfo:
    """What `tkc cache info` prints."""

    directory: Path
    enabled: bool
    format: int
    entries: int
    bytes: int


def info() -> CacheInfo:
    """The cache directory, whether the cache is on, the entry format, and the number and total size
    of the entries there (files named `<hex key>.json`; nothing else in the folder is counted)."""
    sizes = []
    for path in _entry_files():
        try:
            sizes.append(path.stat().st_size)
        except OSError:  # removed meanwhile by another process
            continue
    return CacheInfo(directory=cache_dir(), enabled=enabled(), format=FORMAT, entries=len(sizes), bytes=sum(sizes))


def clear() -> int:
    """Remove every entry (and temporary files a crashed writer left) from the cache directory, whether
    or not the cache is enabled; other files there are left alone. Returns the number of entries removed."""
    removed = 0
    for path in _entry_files():
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            continue
    root = cache_dir()
    if root.is_dir():
        for tmp in root.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
    return removed


# --- helpers -------------------------------------------------------------------------------------

def _path(key: str) -> Path:
    if not _is_key(key):
        raise ValueError(f"cache key must be a lowercase hex digest, got {key!r}")
    return cache_dir() / f"{key}{ENTRY_SUFFIX}"


def _is_key(name: str) -> bool:
    return bool(name) and all(c in KEY_CHARS for c in name)


def _entry_files() -> list[Path]:
    root = cache_dir()
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir()
                  if p.suffix == ENTRY_SUFFIX and _is_key(p.stem) and p.is_file())


def _verify(text: str, key: str) -> dict[str, Any]:
    """The decoded artifacts of an entry's text; InvalidEntry says what is wrong with it."""
    try:
        entry = json.loads(text)
    except ValueError as e:
        raise InvalidEntry(f"not JSON, truncated or damaged ({e})") from None
    if not isinstance(entry, dict):
        raise InvalidEntry(f"a {type(entry).__name__}, not an entry object")
    if entry.get("format") != FORMAT:
        raise InvalidEntry(f"format {entry.get('format')!r}, this tkir reads {FORMAT}")
    if entry.get("key") != key:
        raise InvalidEntry("stored under another key")
    artifacts = entry.get("artifacts")
    if not isinstance(artifacts, dict):
        raise InvalidEntry("no artifacts object")
    if entry.get("sha256") != content_hash(artifacts):
        raise InvalidEntry("content hash mismatch (the artifacts were changed after they were written)")
    try:
        decoded = {name: _decode(value) for name, value in artifacts.items()}
    except (ValueError, TypeError) as e:
        raise InvalidEntry(f"bad base64 ({e})") from None
    for name, value in decoded.items():
        problem = _type_problem(name, value)
        if problem:
            raise InvalidEntry(problem)
    return decoded


def _type_problem(name: str, value: Any) -> str | None:
    """Why `value` is not a valid artifact `name` (ARTIFACT_TYPES, LAUNCH_FIELDS), or None."""
    want = ARTIFACT_TYPES.get(name)
    if want is None:
        return None
    accepted = (bytes, bytearray) if want is bytes else want
    if not isinstance(value, accepted):
        return f"'{name}' has type {type(value).__name__}, expected {want.__name__}"
    if name == "launch":
        for field, ftype in LAUNCH_FIELDS.items():
            if not isinstance(value.get(field), ftype):
                return f"'launch' has no {field} {ftype.__name__}"
    return None


def _warn_invalid(path: Path, why: str) -> None:
    warnings.warn(f"tkir cache: ignoring {path}: {why}; rebuilding it", CacheWarning, stacklevel=3)


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
