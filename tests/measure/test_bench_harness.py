"""measure/harness.py: the steady window, CSV rows, a process's CPU seconds, and the trainer runner on a fake
trainer (no TF)."""
from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import time

import pytest

from measure import harness


def rows(times, frames_per_s=100.0):
    return [{"time_s": str(t), "frames": str(int(frames_per_s * t)), "updates": str(t), "t_train": str(0.5 * t)}
            for t in times]


def test_steady_window_drops_warmup_seconds_and_fraction():
    r = rows(range(11))
    w = harness.steady_window(r, warmup_s=3.0)
    assert (w.first_index, w.last_index, w.seconds) == (3, 10, 7.0)
    assert w.frames_per_s == 100.0 and w.updates_per_s == 1.0 and w.stage_seconds() == {"train": 3.5}
    assert harness.steady_window(r, warmup_frac=0.2).first_index == 2  # 20% of 10 s logged
    assert harness.steady_window(r, warmup_s=1.0, warmup_frac=0.2).first_index == 3
    assert harness.steady_window(r, warmup_s=10.0) is None  # one row left: no interval
    assert harness.steady_window([], warmup_s=0.0) is None


def test_read_rows_drops_a_half_written_line(tmp_path):
    p = tmp_path / "progress.csv"
    assert harness.read_rows(str(p)) == []
    p.write_text("time_s,frames\n1.0,10\n2.0\n")
    assert harness.read_rows(str(p)) == [{"time_s": "1.0", "frames": "10"}]


FAKE = textwrap.dedent("""
    import os, signal, sys, time
    run_dir, delay = sys.argv[1], float(sys.argv[2])
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(75))
    time.sleep(delay)  # start-up
    with open(os.path.join(run_dir, "progress.csv"), "w") as fh:
        fh.write("time_s,frames\\n")
        t0 = time.time()
        while True:
            fh.write(f"{time.time() - t0 + 5:.3f},{int(1000 * (time.time() - t0))}\\n")
            fh.flush()
            time.sleep(0.1)
""")


def test_launch_stops_after_logged_seconds(tmp_path):
    job = harness.TrainerJob([sys.executable, "-c", FAKE, str(tmp_path), "0.3"], [str(tmp_path)],
                             str(tmp_path / "log"), poll_s=0.1, startup_timeout_s=60)
    run = harness.launch(job, harness.stop_after_logged(1.0))
    assert run.outcome == "stopped" and run.returncode == 75 and run.ok
    assert run.startup_s >= 0.3 and harness.logged_seconds(run.rows[0]) >= 1.0


def test_launch_caps_startup_apart_from_the_run(tmp_path):
    job = harness.TrainerJob([sys.executable, "-c", FAKE, str(tmp_path), "600"], [str(tmp_path)],
                             str(tmp_path / "log"), poll_s=0.1, startup_timeout_s=0.5, grace_s=5)
    run = harness.launch(job)
    assert run.outcome == "startup timeout" and run.startup_s is None and not run.ok
    assert run.wall_s < 300 and run.rows == [[]]  # the fake would start only after 600 s


def test_launch_run_timeout_ends_the_group(tmp_path):
    job = harness.TrainerJob([sys.executable, "-c", FAKE, str(tmp_path), "0"], [str(tmp_path)],
                             str(tmp_path / "log"), poll_s=0.1, run_timeout_s=0.5, grace_s=5)
    run = harness.launch(job)
    assert run.outcome == "run timeout" and run.returncode == 75 and run.rows[0]


@pytest.mark.parametrize("key", ["cores", "cpu", "host", "python", "load_avg"])
def test_machine(key):
    assert harness.machine()[key]


def test_proc_cpu_seconds_of_this_process_and_of_a_finished_child():
    end = time.process_time() + 0.05
    while time.process_time() < end:  # burn some CPU first
        pass
    first = harness.proc_cpu_seconds(os.getpid())
    assert first > 0 and harness.proc_cpu_seconds(os.getpid()) >= first
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # reaped: its pid names no process now
    assert math.isnan(harness.proc_cpu_seconds(child.pid))
    assert math.isnan(harness.proc_cpu_seconds(2**22 + 7))  # above the kernel's pid limit


def test_save_state_keeps_the_newest_checkpoint_by_update_and_restore_never_overwrites(tmp_path):
    run, state = tmp_path / "run", tmp_path / "state"
    (run / "checkpoints").mkdir(parents=True)
    assert not harness.save_state(str(run), str(state)) and not state.exists()  # no checkpoint yet: nothing kept
    (run / "config.json").write_text("{}")
    (run / "progress.csv").write_text("frames\n1\n")
    for name in ("ckpt-0000000200", "ckpt-0000000300", "keep-0000000100"):  # keep-* sorts last by name
        (run / "checkpoints" / f"{name}.npz").write_text(name)
        (run / "checkpoints" / f"{name}.sha256").write_text(name)
    assert harness.save_state(str(run), str(state))
    assert sorted(p.name for p in (state / "checkpoints").iterdir()) == ["ckpt-0000000300.npz",
                                                                       "ckpt-0000000300.sha256"]
    assert (state / "progress.csv").read_text() == "frames\n1\n" and not (tmp_path / "state.new").exists()
    # a run directory that holds a run is never replaced by the kept state
    assert not harness.restore_state(str(state), str(run))
    other = tmp_path / "other"
    assert harness.restore_state(str(state), str(other)) and (other / "checkpoints" / "ckpt-0000000300.npz").exists()
