"""Files replaced atomically or appended whole: every file ba3c writes goes through here.

A file is written under a temporary name in its own directory, flushed and fsynced, renamed over
the old one (`os.replace`, atomic on POSIX) and the directory fsynced, so a crash or a kill at
any moment leaves either the old file or the new one, never a torn one. A write that fails
removes its temporary file; a row appended to a log (`append_text`) is one write, cut back off
the file when it fails. A failure for want of room (a full disk, a quota, an I/O error) is
raised as `NoSpaceError`, which knows the directory, the bytes needed and the bytes free.
"""
from __future__ import annotations

import contextlib
import errno
import json
import os
import tempfile
from typing import Any

# What a write that ran out of room fails with: no space (ENOSPC), over quota (EDQUOT), or the device refused
# it (EIO: also what NFS and some FUSE mounts return when their back end is full).
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})
# The trainer's exit status when it stops because checkpoints cannot be written (sysexits.h EX_IOERR): after
# --checkpoint-max-failures failed checkpoints in a row, or when the final one fails; ba3c.evaluate's when its
# result cannot be written. Free the space the message names, then --resume.
EXIT_NO_SPACE = 74


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged user may still write on the file system holding `path` (or its nearest existing
    parent), from os.statvfs; None where it cannot be asked. A quota can be tighter: statvfs does not see it."""
    here = os.path.abspath(path)
    while not os.path.exists(here) and os.path.dirname(here) != here:
        here = os.path.dirname(here)
    try:
        st = os.statvfs(here)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def fmt_bytes(n: int | None) -> str:
    if n is None:
        return "unknown"
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


class NoSpaceError(OSError):
    """A write refused for want of room (SPACE_ERRNOS); nothing of it is left behind."""

    def __init__(self, cause: OSError, path: str, needed: int | None) -> None:
        super().__init__(cause.errno, cause.strerror, path)
        self.path, self.needed = path, needed
        self.directory = os.path.dirname(os.path.abspath(path))
        self.free = free_bytes(self.directory)

    def space(self) -> str:
        """'<directory> needs <bytes>, <bytes> free' (the words every message about it uses)."""
        return f"{self.directory} needs {fmt_bytes(self.needed)}, {fmt_bytes(self.free)} free"

    def describe(self) -> str:
        """One clause: which file, the error and the room, e.g. for a warning line."""
        return f"{os.path.basename(self.path)} not written: {self.strerror.lower()} ({self.space()})"

    def to_free(self) -> str:
        """What the user should free, in words."""
        if self.needed is not None and self.free is not None and self.free < self.needed:
            return f"free at least {fmt_bytes(self.needed - self.free)} in {self.directory}"
        return f"free space in {self.directory} (or raise its quota; check the device if it reports I/O errors)"


def unwritable(directory: str) -> str | None:
    """Why files cannot be made in `directory` (it need not exist yet: its nearest existing parent must take
    them), or None. Tried for real with a file that vanishes at once: os.access says yes to root even on a
    read-only file system."""
    if "\0" in directory:
        return "a path cannot hold a NUL character"
    parent = directory
    while parent and not os.path.exists(parent):
        parent = os.path.dirname(parent)
    try:
        with tempfile.TemporaryFile(dir=parent or "."):
            pass
    except OSError as e:
        return f"{parent or '.'}: {e.strerror}"
    return None


def _write_all(fd: int, data: bytes) -> None:
    """Every write of ba3c's files ends here (the one place a test injects a failure)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n == 0:  # a regular file takes at least one byte or raises; never loop for ever
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        view = view[n:]


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _raise_as_space_error(e: BaseException, path: str, needed: int) -> None:
    if isinstance(e, OSError) and not isinstance(e, NoSpaceError) and e.errno in SPACE_ERRNOS:
        raise NoSpaceError(e, path, needed) from e


def write_temporary(path: str, data: bytes) -> str:
    """`data` in `path`'s temporary name, fsynced; returns that name. Nothing is left when it fails."""
    tmp = f"{path}.tmp.{os.getpid()}"  # per process: two writers never share a temporary file
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
    except BaseException as e:  # a failed write must not leave its part behind (on a full disk least of all)
        with contextlib.suppress(OSError):
            os.remove(tmp)
        _raise_as_space_error(e, path, len(data))
        raise
    return tmp


def atomic_write(path: str, data: bytes | str) -> None:
    """Replace `path` with `data` (bytes, or text written as UTF-8); creates the parent directory. On failure
    the old file is as it was and no temporary file is left; NoSpaceError for a full disk or quota."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        tmp = write_temporary(path, raw)
        try:
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise
        _fsync_dir(os.path.dirname(os.path.abspath(path)))  # the rename itself survives a power cut
    except OSError as e:  # os.makedirs, the rename and the fsync can also run out of room
        _raise_as_space_error(e, path, len(raw))
        raise


def append_text(path: str, text: str, fsync: bool = False) -> None:
    """Append `text` (whole rows of a log) in one write, whole or not at all: a failed or short write is cut
    back off the file, and a file this call created is removed, so a reader never sees half a row."""
    raw = text.encode()
    created = not os.path.exists(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as e:
        _raise_as_space_error(e, path, len(raw))
        raise
    try:
        size = os.fstat(fd).st_size
        try:
            _write_all(fd, raw)
            if fsync:
                os.fsync(fd)
        except BaseException as e:
            with contextlib.suppress(OSError):
                if created:
                    os.remove(path)
                else:
                    os.ftruncate(fd, size)
            _raise_as_space_error(e, path, len(raw))
            raise
    finally:
        os.close(fd)


def write_json(path: str, data: Any) -> None:
    """`data` as indented, key-sorted JSON (values JSON does not know, such as paths, as strings)."""
    atomic_write(path, json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
