"""Crash-safe checkpoints: write to a temporary name, fsync, checksum, rename; keep the last K.

A checkpoint is `ckpt-<updates>.npz` (model weights then optimizer variables, as arrays
a0, a1, ..., plus a JSON `meta` entry with counters, RNG state and config hash) next to
`ckpt-<updates>.sha256`. The data is written to a temporary file first (on a full disk that is the
write that fails, and it leaves nothing behind); then the checksum file is renamed into place before the
data file, so a data file without a matching checksum is never taken for a good one. Rotation, after the
new checkpoint is whole, keeps the newest K
`ckpt-*`; a kept checkpoint (`keep-<updates>.npz`, --keep-every-frames) is written the same way and
never rotated, so a good state survives however long a run goes wrong. Resume takes the newest of
both kinds.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ba3c.files import SPACE_ERRNOS, NoSpaceError, atomic_write, write_temporary

_NAME = re.compile(r"ckpt-(\d{10})\.npz$")  # rotated
_KEPT = re.compile(r"keep-(\d{10})\.npz$")  # never rotated
_TEMPORARY = re.compile(r"(?:ckpt|keep)-\d{10}\.(?:npz|sha256)\.tmp\.(\d+)$")  # files.write_temporary's, by pid


@dataclass
class Checkpoint:
    path: str
    arrays: list[np.ndarray]
    meta: dict[str, Any]


def save(ckpt_dir: str, updates: int, arrays: list[np.ndarray], meta: dict[str, Any], keep: int,
         kept: bool = False) -> str:
    """Write one checkpoint atomically; then delete all but the newest `keep` rotated ones. `kept`: write it
    as keep-<updates>.npz, which rotation never deletes. Raises NoSpaceError (files.py) when the disk or quota is
    full: nothing of the new checkpoint is left then, and every older one is as it was."""
    buf = io.BytesIO()
    np.savez(buf, meta=np.frombuffer(json.dumps(meta).encode(), np.uint8), **{f"a{i}": a for i, a in enumerate(arrays)})
    data = buf.getvalue()
    path = os.path.join(ckpt_dir, f"{'keep' if kept else 'ckpt'}-{updates:010d}.npz")
    sha_path = path[:-4] + ".sha256"
    remove_stale_temporaries(ckpt_dir)
    tmp = write_temporary(path, data)  # NoSpaceError on a full disk, with nothing left behind
    old_sha = _read_or_none(sha_path)  # a checkpoint of this same update written before (the final one)
    try:
        atomic_write(sha_path, hashlib.sha256(data).hexdigest().encode())
        os.replace(tmp, path)
    except BaseException as e:  # no orphan checksum, and an older checkpoint of this update keeps its own
        with contextlib.suppress(OSError):
            os.remove(tmp)
        with contextlib.suppress(OSError):
            if old_sha is not None and os.path.exists(path):
                atomic_write(sha_path, old_sha)
            elif not os.path.exists(path):
                os.remove(sha_path)
        if isinstance(e, OSError) and e.errno in SPACE_ERRNOS:  # named by the checkpoint and its whole size
            raise NoSpaceError(e, path, len(data)) from e
        raise
    for old in list_checkpoints(ckpt_dir)[:-keep]:
        for p in (old, old[:-4] + ".sha256"):
            if os.path.exists(p):
                os.remove(p)
    return path


def _read_or_none(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def remove_stale_temporaries(ckpt_dir: str) -> list[str]:
    """Delete the temporary files of checkpoint writes whose process is gone (killed while writing, on this
    host): they are never read, and on a full disk their room is what the next checkpoint needs."""
    removed = []
    for name in os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else []:
        m = _TEMPORARY.match(name)
        if m is None or int(m.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(m.group(1)), 0)
            continue  # its writer is alive (or another user's): not ours to touch
        except ProcessLookupError:
            pass
        except OSError:
            continue
        with contextlib.suppress(OSError):
            os.remove(os.path.join(ckpt_dir, name))
            removed.append(name)
    return removed


def list_checkpoints(ckpt_dir: str) -> list[str]:
    """Rotated checkpoint data files (ckpt-*), oldest first."""
    if not os.path.isdir(ckpt_dir):
        return []
    return sorted(os.path.join(ckpt_dir, n) for n in os.listdir(ckpt_dir) if _NAME.match(n))


def list_kept(ckpt_dir: str) -> list[str]:
    """Kept checkpoint data files (keep-*), oldest first."""
    if not os.path.isdir(ckpt_dir):
        return []
    return sorted(os.path.join(ckpt_dir, n) for n in os.listdir(ckpt_dir) if _KEPT.match(n))


def list_all(ckpt_dir: str) -> list[str]:
    """Every checkpoint, rotated and kept, by update, oldest first (of one update, the kept one first)."""
    def order(path: str) -> tuple[int, bool]:
        name = os.path.basename(path)  # ckpt-NNNNNNNNNN.npz or keep-NNNNNNNNNN.npz
        return int(name[5:15]), name.startswith("ckpt-")
    return sorted(list_kept(ckpt_dir) + list_checkpoints(ckpt_dir), key=order)


def read_verified(path: str) -> Checkpoint:
    """One named checkpoint file, checked against its .sha256; raises ValueError (or OSError) if unusable."""
    with open(path, "rb") as fh:
        data = fh.read()
    sha_path = path[:-4] + ".sha256"
    try:
        with open(sha_path) as fh:
            want = fh.read().strip()
    except FileNotFoundError:
        raise ValueError("its checksum file is missing") from None
    if hashlib.sha256(data).hexdigest() != want:
        raise ValueError("checksum mismatch (truncated or corrupted)")
    with np.load(io.BytesIO(data)) as z:
        meta = json.loads(bytes(z["meta"]).decode())
        n = sum(1 for k in z.files if k.startswith("a"))
        arrays = [z[f"a{i}"] for i in range(n)]
    return Checkpoint(path, arrays, meta)


def load_latest(ckpt_dir: str, skipped: list[str] | None = None) -> Checkpoint | None:
    """Newest checkpoint that verifies; bad newer ones are skipped, each named in a warning line, or (given
    `skipped`) added to it as 'name: why' for the caller to say in its own words."""
    for path in reversed(list_all(ckpt_dir)):
        try:
            return read_verified(path)
        except Exception as e:  # any unreadable file: fall back to the next older one
            if skipped is not None:
                skipped.append(f"{os.path.basename(path)}: {e}")
            else:
                print(f"ba3c: WARNING: skipping checkpoint {path}: {e}", file=sys.stderr, flush=True)
    return None


def assign_arrays(variables: Sequence, arrays: Sequence[np.ndarray], source: str) -> None:
    """Copy `arrays` into `variables` (model weights, then optimizer slots) in order, all or none.

    Count and shapes are checked before the first assignment, so a checkpoint that does not fit
    leaves the model as it was; the ValueError names the `source` of the arrays.
    """
    if len(arrays) != len(variables):
        raise ValueError(f"{source} holds {len(arrays)} arrays, the model needs {len(variables)}")
    for v, a in zip(variables, arrays):
        if tuple(v.shape) != tuple(a.shape):
            raise ValueError(f"{source}: array for {v.path} has shape {a.shape}, the model needs {tuple(v.shape)}")
    for v, a in zip(variables, arrays):
        v.assign(a)
