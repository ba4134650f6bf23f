"""A full disk or quota: nothing lost, no stray file, one line each time, a clean stop (exit 74), --resume works.

The unit tests inject the failure where every write of ba3c's files ends (files._write_all): half the bytes, then
ENOSPC, as a file system that fills mid-write does. The end-to-end tests fill a real tmpfs under a running trainer
(mounting needs root, as CI runs; elsewhere they are skipped and say why).
"""
from __future__ import annotations

import csv
import errno
import os
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from ba3c import checkpoint as ckpt, files
from ba3c.files import EXIT_NO_SPACE, NoSpaceError
from ba3c.rundir import EVAL_FIELDS, CsvLog
from conftest import ROOT, run_train, subprocess_env


def _fail_writes(monkeypatch, after: int = 0, code: int = errno.ENOSPC) -> list[int]:
    """From the (after+1)-th write on, write half the bytes and raise `code`; returns the sizes of the writes seen."""
    real, seen = files._write_all, []

    def write(fd: int, data: bytes) -> None:
        seen.append(len(data))
        if len(seen) <= after:
            return real(fd, data)
        os.write(fd, bytes(data[: len(data) // 2]))
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(files, "_write_all", write)
    return seen


def _stray(directory: Path) -> list[str]:
    """Temporary files, and checkpoint data without its checksum or the other way round."""
    names = {p.name for p in directory.rglob("*") if p.is_file()}
    out = [n for n in names if ".tmp." in n]
    out += [n for n in names if n.endswith(".sha256") and n[:-7] + ".npz" not in names]
    out += [n for n in names if n.endswith(".npz") and n[:-4] + ".sha256" not in names]
    return sorted(out)


# ---------------------------------------------------------------- injected failures

@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT, errno.EIO], ids=["ENOSPC", "EDQUOT", "EIO"])
def test_atomic_write_on_a_full_disk_keeps_the_old_file_and_leaves_nothing(tmp_path, monkeypatch, code):
    path = tmp_path / "meta.json"
    files.write_json(str(path), {"v": 1})
    _fail_writes(monkeypatch, code=code)
    with pytest.raises(NoSpaceError) as e:
        files.write_json(str(path), {"v": 2, "pad": "x" * 5000})
    assert e.value.errno == code and e.value.directory == str(tmp_path)
    assert e.value.needed > 5000 and e.value.free == files.free_bytes(str(tmp_path))
    assert "needs" in e.value.describe() and "free" in e.value.describe() and str(tmp_path) in e.value.describe()
    assert path.read_text() == '{\n  "v": 1\n}\n' and _stray(tmp_path) == []


@pytest.mark.parametrize("fail_at", [0, 1], ids=["data", "checksum"])
def test_checkpoint_on_a_full_disk_leaves_no_partial_file_nor_orphan_checksum(tmp_path, monkeypatch, fail_at):
    """The 4th checkpoint fails (its data, or its checksum after its data): the three before it verify, nothing
    of it is left, and rotation has deleted nothing."""
    d = str(tmp_path / "checkpoints")
    for u in (1, 2, 3):
        ckpt.save(d, u, [np.full(3000, u, np.float32)], {"updates": u}, keep=3)
    _fail_writes(monkeypatch, after=fail_at)
    with pytest.raises(NoSpaceError) as e:
        ckpt.save(d, 4, [np.full(3000, 4, np.float32)], {"updates": 4}, keep=3)
    assert e.value.path.endswith("ckpt-0000000004.npz") and e.value.needed > 12000  # the whole checkpoint's size
    assert _stray(tmp_path) == [] and len(ckpt.list_checkpoints(d)) == 3
    assert [ckpt.read_verified(p).meta["updates"] for p in ckpt.list_checkpoints(d)] == [1, 2, 3]
    monkeypatch.undo()  # room again: the next checkpoint is written and rotation goes on
    ckpt.save(d, 5, [np.full(3000, 5, np.float32)], {"updates": 5}, keep=3)
    assert [ckpt.read_verified(p).meta["updates"] for p in ckpt.list_checkpoints(d)] == [2, 3, 5]


def test_rewriting_a_checkpoint_of_the_same_update_on_a_full_disk_keeps_the_old_one(tmp_path, monkeypatch):
    """The final checkpoint can fall on the update of the last periodic one: a failure must not leave that one's
    data beside the new checksum."""
    d = str(tmp_path)
    ckpt.save(d, 9, [np.ones(100, np.float32)], {"updates": 9, "t": 1}, keep=3)
    _fail_writes(monkeypatch, after=1)  # the new data is written, its checksum is not
    with pytest.raises(NoSpaceError):
        ckpt.save(d, 9, [np.ones(100, np.float32)], {"updates": 9, "t": 2}, keep=3)
    assert ckpt.load_latest(d).meta == {"updates": 9, "t": 1} and _stray(tmp_path) == []


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(p.stdout)
    (tmp_path / f"ckpt-0000000001.npz.tmp.{dead}").write_bytes(b"x" * 100)
    (tmp_path / f"ckpt-0000000002.npz.tmp.{os.getpid()}").write_bytes(b"mine")  # a live writer's: kept
    (tmp_path / "notes.tmp.1").write_text("not ours")
    ckpt.save(str(tmp_path), 3, [np.ones(4, np.float32)], {"updates": 3}, keep=3)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt-0000000002.npz.tmp." + str(os.getpid()), "ckpt-0000000003.npz", "ckpt-0000000003.sha256", "notes.tmp.1"]


def test_a_csv_row_is_appended_whole_or_waits(tmp_path, monkeypatch):
    log = CsvLog(str(tmp_path / "eval.csv"), EVAL_FIELDS)
    log.append({"frames": 1, "score_mean": 1.5})
    before = (tmp_path / "eval.csv").read_bytes()
    _fail_writes(monkeypatch)
    for frames in (2, 3):
        with pytest.raises(NoSpaceError):
            log.append({"frames": frames, "score_mean": 2.5})
        assert (tmp_path / "eval.csv").read_bytes() == before  # no half row
    monkeypatch.undo()
    log.append({"frames": 4, "score_mean": 3.5})
    rows = list(csv.DictReader((tmp_path / "eval.csv").open()))
    assert [r["frames"] for r in rows] == ["1", "2", "3", "4"] and log.waiting == []
    # a new file whose first write fails is not left behind empty (it would lose its header)
    _fail_writes(monkeypatch)
    fresh = CsvLog(str(tmp_path / "new.csv"), EVAL_FIELDS)
    with pytest.raises(NoSpaceError):
        fresh.append({"frames": 1})
    assert not (tmp_path / "new.csv").exists()


# ---------------------------------------------------------------- a real full file system

def _tfrecords_whole(path: Path) -> bool:
    """A TensorBoard events file is whole records (8-byte length, 4-byte CRC, data, 4-byte CRC) to its last byte."""
    data, at = path.read_bytes(), 0
    while at < len(data):
        if at + 12 > len(data):
            return False
        (n,) = struct.unpack("<Q", data[at:at + 8])
        at += 12 + n + 4
    return at == len(data)


def _fill(directory: Path) -> Path:
    """Write a file until the file system is full; returns it (delete it to free the room)."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    try:
        while True:  # the last few bytes too
            os.write(fd, b"\0")
    except OSError:
        pass
    os.close(fd)
    return filler


@pytest.fixture
def small_fs(tmp_path):
    """A 2 MB tmpfs: room for a CartPole run and its checkpoints (64 KB each), filled by the test at will."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (CI runs as root); the injected-failure tests above still run")
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("this root cannot mount a tmpfs (a container without CAP_SYS_ADMIN)")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _start(run: Path, stderr_path: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "ba3c.train", "--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4",
           "--train-batch", "20", "--total-frames", "50000000", "--stats-interval-updates", "5",
           "--log-interval-s", "0.2", "--checkpoint-interval-min", "0.005", "--run-dir", str(run), *extra]
    return subprocess.Popen(cmd, cwd=ROOT, env=subprocess_env(), stdout=subprocess.DEVNULL,
                            stderr=stderr_path.open("w"), text=True)


def _wait_for(what, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout  # a bound on a broken start, generous for a loaded machine
    while not what():
        assert proc.poll() is None and time.time() < deadline, "the trainer ended or stalled before it was due"
        time.sleep(0.2)


def _check_left_whole(run: Path) -> list[str]:
    """Nothing partial, nothing stray, every checkpoint verifies; returns the checkpoints' names."""
    assert _stray(run) == []
    names = [os.path.basename(p) for p in ckpt.list_all(str(run / "checkpoints"))]
    assert names, "the checkpoints written before the disk filled are gone"
    for p in ckpt.list_all(str(run / "checkpoints")):
        ckpt.read_verified(p)
    rows = list(csv.reader((run / "progress.csv").open()))
    assert len(rows) > 1 and {len(r) for r in rows} == {len(rows[0])}  # no half row
    for events in (run / "tb").iterdir():
        assert _tfrecords_whole(events), f"{events.name} ends in a torn record"
    return names


def _resume(run: Path) -> None:
    c = ckpt.load_latest(str(run / "checkpoints"))
    p = run_train(["--resume", str(run), "--total-frames", str(c.meta["frames"] + 400)], timeout=300)
    assert f"resuming from {c.path}" in p.stdout and "ba3c: done:" in p.stdout


@pytest.mark.root
@pytest.mark.slow
def test_a_run_whose_disk_fills_stops_cleanly_and_resumes(small_fs):
    """Fails on the code before the full-disk handling (a traceback, exit 1, ckpt-N.npz.tmp.<pid> and an orphan
    ckpt-N.sha256 left). Now: a warning line per refused checkpoint (directory, needed, free), then after
    --checkpoint-max-failures (3) in a row exit 74 with one error line that says what to free and how to resume."""
    run, err = small_fs / "run", small_fs.parent / "stderr.txt"
    proc = _start(run, err)
    _wait_for(lambda: len(ckpt.list_checkpoints(str(run / "checkpoints"))) >= 2, proc)
    filler = _fill(small_fs)
    assert proc.wait(timeout=300) == EXIT_NO_SPACE, err.read_text()[-3000:]
    lines = err.read_text().strip().splitlines()
    assert not any("Traceback" in line for line in lines), err.read_text()
    warnings = [line for line in lines if line.startswith("ba3c: warning: checkpoint at update")]
    assert len(warnings) == 3 and "3 of 3" in warnings[-1], lines
    errors = [line for line in lines if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("ba3c: error: stopped at update"), lines
    for line in warnings + errors:  # every line about the disk names the directory, the room needed and free
        assert f"{run / 'checkpoints'} needs " in line and " free" in line
    assert f"--resume {run}" in errors[0] and "exit status 74" in errors[0]
    names = _check_left_whole(run)
    assert f"newest checkpoint, {names[-1]}" in errors[0]
    filler.unlink()
    _resume(run)


@pytest.mark.root
@pytest.mark.slow
def test_a_stop_signal_on_a_full_disk_keeps_the_older_checkpoints(small_fs):
    """The final checkpoint at SIGTERM finds no room: one error line, exit 74 (not 75), the older checkpoints
    whole, and --resume continues from the newest of them."""
    run, err = small_fs / "run", small_fs.parent / "stderr.txt"
    proc = _start(run, err, "--checkpoint-max-failures", "1000")
    _wait_for(lambda: len(ckpt.list_checkpoints(str(run / "checkpoints"))) >= 2, proc)
    before = [os.path.basename(p) for p in ckpt.list_all(str(run / "checkpoints"))]
    filler = _fill(small_fs)
    _wait_for(lambda: "ba3c: warning: checkpoint at update" in err.read_text(), proc)  # a checkpoint was refused
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == EXIT_NO_SPACE, err.read_text()[-3000:]
    lines = err.read_text().strip().splitlines()
    errors = [line for line in lines if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("ba3c: error: stopped at update"), lines
    assert f"{run / 'checkpoints'} needs " in errors[0] and "--resume" in errors[0]
    assert not any("Traceback" in line for line in lines)
    assert _check_left_whole(run)[-1] in before  # nothing newer appeared, nothing older went
    filler.unlink()
    _resume(run)


@pytest.mark.root
@pytest.mark.slow
def test_the_run_directory_full_at_the_start_is_one_line(small_fs):
    filler = _fill(small_fs)
    run = small_fs / "run"
    p = subprocess.run([sys.executable, "-m", "ba3c.train", "--env", "CartPole-v1", "--num-envs", "4",
                        "--predict-batch", "4", "--train-batch", "20", "--total-frames", "400", "--run-dir", str(run)],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == EXIT_NO_SPACE, p.stderr[-3000:]
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ba3c: error:") and " free" in lines[0], p.stderr
    assert _stray(small_fs) == []
    filler.unlink()
    shutil.rmtree(run, ignore_errors=True)
