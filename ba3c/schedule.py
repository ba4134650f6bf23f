"""Rank 0's schedules at the sync points: the periodic evaluation (`EvalSchedule`) and the checkpoints
(`Checkpoints`). Each decides when its work is due and does it; the trainer (`ba3c.runner`) calls them.

No collectives here: only rank 0 builds them.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ba3c import checkpoint as ckpt
from ba3c.config import Config
from ba3c.evaluation import evaluate_model
from ba3c.files import NoSpaceError
from ba3c.report import Reporter
from ba3c.rundir import last_eval_frames
from ba3c.simulators import EnvSpec
from ba3c.state import RunState
from ba3c.workers import EvalThread


class EvalSchedule:
    """--eval-every-frames: a copy of the network played by the evaluation thread, every so many frames."""

    def __init__(self, cfg: Config, spec: EnvSpec, run_dir: str, network: Any, report: Reporter, frames: int) -> None:
        """`network`: a fresh copy of the trained network (the thread loads each evaluation's weights into it);
        `frames`: the run's frames so far."""
        self.cfg, self.spec = cfg, spec
        self.every = every = cfg.run.eval_every_frames
        self.thread = EvalThread(network, self._evaluate, report.evaluation)
        self.next_frames = (frames // every + 1) * every
        if frames >= every and last_eval_frames(run_dir) < frames // every * every:
            # the last evaluation due was given up when the run stopped (or the run ended before it): the
            # restored weights are evaluated at the first sync point, so a resume leaves no gap in eval.csv
            print(f"ba3c: eval.csv has no evaluation at {frames // every * every:,} frames (the run "
                  f"stopped first): evaluating the restored weights now", flush=True)
            self.next_frames = frames

    def start(self) -> None:
        self.thread.start()

    def at_sync(self, weights: Callable[[], list], state: RunState, elapsed_s: float) -> None:
        """Hand the current weights to the thread when an evaluation is due."""
        if state.frames < self.next_frames:
            return
        if not self.thread.submit([np.array(w) for w in weights()], state.frames, state.updates, elapsed_s):
            # a gap in eval.csv needs a reason: long games (up to the protocol's cap) hold the thread
            print(f"ba3c: evaluation at {state.frames:,} frames skipped: an earlier one is still playing "
                  f"and another waits (eval.csv has no row for it)", file=sys.stderr, flush=True)
        self.next_frames += self.every

    def finish(self, wait: bool) -> None:
        """At the end of training the last evaluation is waited for and logged; a stopped run gives it up."""
        self.thread.finish(wait=wait)

    def _evaluate(self, model, updates: int, cancel: threading.Event) -> dict[str, Any]:
        """The periodic evaluation, run by the evaluation thread on a snapshot of the weights."""
        r = self.cfg.run
        cap = None if r.eval_policy == "paper" else self.cfg.sim.max_episode_frames  # None: the paper's own cap
        return evaluate_model(model, self.spec, r.eval_episodes, r.eval_policy, num_envs=min(r.eval_episodes, 16),
                              max_episode_frames=cap, seed=10_000 + updates, num_threads=1,
                              fire_after_life_loss=self.cfg.sim.life_loss == "terminal",
                              sticky_actions=r.eval_sticky_actions, cancel=cancel)


class Checkpoints:
    """When a checkpoint is due (--checkpoint-interval-min, --keep-every-frames), writing it, and a full disk."""

    def __init__(self, ckpt_dir: str, cfg: Config, report: Reporter, frames: int) -> None:
        self.ckpt_dir, self.run_cfg, self.report = ckpt_dir, cfg.run, report
        self.last_t = 0.0  # when the last one was due (set at the start of training)
        self.failures = 0  # checkpoints in a row the disk had no room for
        self.no_space: NoSpaceError | None = None  # the last such failure
        k = cfg.run.keep_every_frames  # the next multiple of it past which a kept checkpoint is due
        self.next_keep = (frames // k + 1) * k if k else 0

    def out_of_space(self) -> bool:
        """--checkpoint-max-failures checkpoints in a row found no room: the run stops."""
        return self.failures >= self.run_cfg.checkpoint_max_failures

    def at_sync(self, now: float, frames: int, may_write: bool, write: Callable[[bool], bool]) -> None:
        """Write one (by `write(kept)`) when due. Never over a good checkpoint with a collapsed state
        (`may_write` False): a checkpoint due then waits for an interval that is not collapsed (after a rollback
        the restored state is written at the next one)."""
        r = self.run_cfg
        keep_due = bool(r.keep_every_frames) and frames >= self.next_keep
        # after a failed checkpoint the next try waits for the interval, a kept one too (a full disk stays full)
        interval_due = now - self.last_t >= r.checkpoint_interval_min * 60
        if not ((keep_due and not self.failures) or interval_due) or not may_write:
            return
        written = write(keep_due)
        self.last_t = now
        if keep_due and written:
            self.next_keep = (frames // r.keep_every_frames + 1) * r.keep_every_frames

    def save(self, updates: int, arrays: list[np.ndarray], meta: dict[str, Any], kept: bool = False,
             final: bool = False) -> bool:
        """False when the disk or quota had no room (self.no_space says why; nothing of it is left, the older
        checkpoints are intact): a line, unless `final` (the run's last line names it then)."""
        try:
            path = ckpt.save(self.ckpt_dir, updates, arrays, meta, self.run_cfg.keep_checkpoints, kept=kept)
        except NoSpaceError as e:
            self.no_space = e
            self.failures += 1
            if not final:
                self.report.checkpoint_failed(e, updates, self.failures)
            return False
        self.failures = 0
        self.report.checkpoint_written(path)
        return True
