"""Files replaced atomically: every file ba3c writes goes through here.

A file is written under a temporary name in its own directory, flushed and fsynced, renamed over
the old one (`os.replace`, atomic on POSIX) and the directory fsynced, so a crash or a kill at
any moment leaves either the old file or the new one, never a torn one.
"""
from __future__ import annotations

import json
import os
from typing import Any


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str, data: bytes | str) -> None:
    """Replace `path` with `data` (bytes, or text written as UTF-8); creates the parent directory."""
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"  # per process: two writers never share a temporary file
    with open(tmp, "wb") as fh:
        fh.write(data.encode() if isinstance(data, str) else data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    _fsync_dir(parent)  # the rename itself survives a power cut


def write_json(path: str, data: Any) -> None:
    """`data` as indented, key-sorted JSON (values JSON does not know, such as paths, as strings)."""
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
