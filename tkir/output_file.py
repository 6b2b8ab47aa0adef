"""Writing a command's output files (`tkc compile -o`, `--emit c`'s source and header, `tkc tune --json`,
`tkc bench --json`): whole or not at all, and an error that names the path.

A regular file is written to a temporary file beside it and renamed over it, so a failed write (a full
disk, a path under a file, no permission) never leaves a partial file and leaves the previous one as it
was; through a symlink the link's target is written and the link stays. Several files (a C source and
its header) are all written to temporary files before any is renamed. A pipe or a device
(`-o /dev/stdout`, `/dev/full`) cannot be renamed over: it is written in place. Every failure is an
`OutputError` that names the flag, the path and the reason, e.g.
`-o /dev/full: cannot write: No space left on device`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from tkir.diagnostics import TkirError


class OutputError(TkirError):
    """An output file that cannot be written: the flag, the path and why."""


def check_output_path(path: str, flag: str) -> None:
    """Refuse, before any work, an output path that cannot be a file: a directory, or a path whose
    folder is missing or is a file."""
    out = Path(path)
    if out.is_dir():
        raise OutputError(f"{flag} {path}: is a directory (name a file)")
    parent = out.parent
    if not parent.exists():
        raise OutputError(f"{flag} {path}: cannot write: no folder {parent}")
    if not parent.is_dir():
        raise OutputError(f"{flag} {path}: cannot write: {parent} is not a folder")


def write_outputs(files: list[tuple[str, str | bytes]], flag: str) -> None:
    """Write each (path, text or bytes): regular files through temporary files renamed once all are
    written, pipes and devices in place."""
    pending: list[tuple[str, Path]] = []  # (temporary file, final path)
    try:
        for path, data in files:
            check_output_path(path, flag)
            raw = data if isinstance(data, bytes) else data.encode("utf-8")
            out = Path(path)
            if out.exists() and not out.is_file():  # /dev/stdout, a pipe, a device: no rename possible
                _write_in_place(out, raw, flag, path)
                continue
            out = out.resolve() if out.is_symlink() else out
            pending.append((_write_temporary(out, raw, flag, path), out))
        for tmp, out in pending:
            try:
                Path(tmp).replace(out)
            except OSError as e:
                raise OutputError(f"{flag} {out}: cannot write: {e.strerror or e}") from None
    finally:
        for tmp, _ in pending:
            Path(tmp).unlink(missing_ok=True)  # a renamed one is gone already


def _write_in_place(out: Path, raw: bytes, flag: str, path: str) -> None:
    try:
        with open(out, "wb") as f:
            f.write(raw)
    except OSError as e:
        raise OutputError(f"{flag} {path}: cannot write: {e.strerror or e}") from None


def _write_temporary(out: Path, raw: bytes, flag: str, path: str) -> str:
    """`raw` in a temporary file beside `out`, with the mode `out` has (or a new file would get)."""
    if out.exists():
        mode = out.stat().st_mode & 0o777
    else:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask  # what a plain open() would give, not the temporary file's 0600
    try:
        tmp = tempfile.NamedTemporaryFile(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp", delete=False)
    except OSError as e:
        raise OutputError(f"{flag} {path}: cannot write: no file can be made in {out.parent}: "
                          f"{e.strerror or e}") from None
    with tmp:
        try:
            tmp.write(raw)
            tmp.flush()
            os.chmod(tmp.name, mode)
        except BaseException as e:
            tmp.close()
            Path(tmp.name).unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise OutputError(f"{flag} {path}: cannot write: {e.strerror or e}") from None
            raise
    return tmp.name
