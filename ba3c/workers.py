"""The threads beside the learner loop, and what they share with it: the simulation thread, rank 0's
evaluation thread, the watchdog, per-stage timers, and TensorFlow's thread pools. (Stop signals
have their own thread, in `ba3c.signals`.)

None of them decides anything about training: each is started and stopped by `ba3c.runner`.
"""
from __future__ import annotations

import collections
import os
import queue
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ba3c.experience import Episode, Experience, TrainBatch
from ba3c.predictor import sample_actions
from ba3c.simulators import Simulator, decorrelate_games

if TYPE_CHECKING:
    from ba3c.config import Config

EXIT_WATCHDOG = 70  # no update for --hang-timeout-min: a rank lost or stuck; resume with --resume RUN_DIR


def cores_available() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def set_tensorflow_threads(intra_op: int = 0, inter_op: int = 0) -> None:
    """Size TensorFlow's thread pools (before it runs anything): intra-op 0 = the cores available, inter-op 0 = 2."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(intra_op or cores_available())
    tf.config.threading.set_inter_op_parallelism_threads(inter_op or 2)


def configure_tensorflow(cfg: Config) -> None:
    """The trainer's thread settings (--intra-op-threads, --inter-op-threads)."""
    set_tensorflow_threads(cfg.run.intra_op_threads, cfg.run.inter_op_threads)


@dataclass
class Timers:
    """Seconds spent per stage, accumulated by the thread that owns each key."""

    seconds: dict[str, float] = field(default_factory=lambda: collections.defaultdict(float))

    def add(self, key: str, t0: float) -> float:
        t1 = time.perf_counter()
        self.seconds[key] += t1 - t0
        return t1


class QueueFeed:
    """BA3C's way from the simulation thread to the learner: train batches through a bounded queue (its size
    bounds the policy lag). An algorithm's actor may bring its own with the same three methods (ba3c.algos.base)."""

    def __init__(self, maxsize: int) -> None:
        self.queue: queue.Queue[TrainBatch] = queue.Queue(maxsize=maxsize)

    def hand_over(self, batches: list[TrainBatch], stop: threading.Event) -> None:
        """Queue the batches, waiting while the queue is full (until `stop`)."""
        for tb in batches:
            while not stop.is_set():
                try:
                    self.queue.put(tb, timeout=0.2)
                    break
                except queue.Full:
                    pass

    def next_batch(self, timeout: float) -> TrainBatch | None:
        try:
            return self.queue.get(timeout=timeout)
        except queue.Empty:
            return None

    def discard_queued(self) -> int:
        n = 0
        while True:
            try:
                self.queue.get_nowait()
                n += 1
            except queue.Empty:
                return n


class SimulationThread(threading.Thread):
    """Simulators -> predictor -> actions -> experience -> the feed the learner takes its batches from.

    What differs between algorithms is plugged in from the algorithm's actor (ba3c.algos.base.Actor):
    `choose` (actions from the predictor's first output: a policy sampled, epsilon-greedy on Q),
    `experience` (what is recorded: n-step returns, a replay memory) and `feed` (None: a bounded queue of
    train batches; else the actor's own, a replay sampled on the learner's demand)."""

    def __init__(self, sim: Simulator, predictor, experience: Experience, rng: np.random.Generator, env_seed: int,
                 queue_batches: int, policy_version: Callable[[], int] = lambda: 0, decorrelate_steps: int = 0,
                 choose: Callable[[np.ndarray, np.random.Generator], np.ndarray] = sample_actions,
                 feed: Any = None) -> None:
        super().__init__(name="SimulationThread", daemon=True)
        self.sim, self.predictor, self.experience, self.rng = sim, predictor, experience, rng
        self.choose = choose
        self.decorrelate_steps = decorrelate_steps  # SimConfig.decorrelate_steps: random steps before recording
        self.policy_version = policy_version  # the learner's update count: whose weights chose the actions
        self.env_seed = env_seed
        self.feed = feed if feed is not None else QueueFeed(queue_batches)
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.timers = Timers()
        self._episodes: list[Episode] = []
        self._lock = threading.Lock()

    def next_batch(self, on_wait: Callable[[], None] | None = None) -> Any:
        """The learner's side of the feed: the next train batch; raises this thread's error if it failed.
        `on_wait` is called every second spent waiting (a progress line during a warm-up)."""
        while True:
            batch = self.feed.next_batch(timeout=1.0)
            if batch is not None:
                return batch
            if self.error is not None:
                raise self.error
            if on_wait is not None:
                on_wait()

    def discard_queued(self) -> int:
        """Drop the train batches waiting in the feed (after a rollback: the collapsed policy played them)."""
        return self.feed.discard_queued()

    def drain_episodes(self) -> list[Episode]:
        with self._lock:
            eps, self._episodes = self._episodes, []
        return eps

    def run(self) -> None:
        try:
            b = self.sim.reset(self.env_seed)
            if self.decorrelate_steps:
                b = decorrelate_games(self.sim, self.decorrelate_steps, self.rng, self.env_seed)
                self.experience.start_mid_game(self.decorrelate_steps * self.sim.num_envs)
            while not self.stop.is_set():
                t = time.perf_counter()
                # read before the forward pass: the weights it uses are at least this new
                version = self.policy_version()
                logits, values = self.predictor(b.obs)
                actions = self.choose(logits, self.rng)
                t = self.timers.add("predict", t)
                self.sim.send(actions)
                batches, episodes = self.experience.add(b, values, actions, version)
                if episodes:
                    with self._lock:
                        self._episodes.extend(episodes)
                t = self.timers.add("experience", t)
                self.feed.hand_over(batches, self.stop)
                t = self.timers.add("queue_put_wait", t)
                b = self.sim.recv()
                self.timers.add("env", t)
        except BaseException as e:  # surfaced by the learner loop, which owns the process
            self.error = e


class WatchdogThread(threading.Thread):
    """Ends the process when updates stop: a rank lost mid-allreduce must not hang the job for ever.

    Under mpirun a dead rank already ends the job within seconds; this covers launchers that do not
    notice, and a rank stuck in a collective. Exit status 70; rerun with --resume.
    """

    def __init__(self, timeout_s: float, rank: int) -> None:
        super().__init__(name="WatchdogThread", daemon=True)
        self.timeout_s, self.rank = timeout_s, rank
        self.last_progress = time.monotonic()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(min(10.0, self.timeout_s / 4)):
            idle = time.monotonic() - self.last_progress
            if idle > self.timeout_s:
                print(f"ba3c: rank {self.rank}: no update completed for {idle / 60:.1f} min (another rank lost, or "
                      f"stuck in an allreduce); aborting. Rerun with --resume RUN_DIR.", file=sys.stderr, flush=True)
                os._exit(EXIT_WATCHDOG)


class EvalCancelled(Exception):
    """An evaluation given up before its episodes were played (the run is stopping)."""


class EvalThread(threading.Thread):
    """Rank 0's periodic evaluation on a snapshot of the weights, beside training (never blocking it).

    `evaluate(model, updates, cancel)` plays the games and returns their result, and stops with
    EvalCancelled once `cancel` is set; `report(result, frames, updates, time_s)` records it. A failure
    is reported and never ends training.
    """

    def __init__(self, model, evaluate: Callable[[Any, int, threading.Event], dict],
                 report: Callable[..., None]) -> None:
        super().__init__(name="EvalThread", daemon=True)
        self.model, self.evaluate, self.report = model, evaluate, report
        self.jobs: queue.Queue[tuple[list[np.ndarray], int, int, float] | None] = queue.Queue(maxsize=1)
        self.cancel = threading.Event()

    def submit(self, weights: list[np.ndarray], frames: int, updates: int, time_s: float) -> bool:
        """Queue an evaluation of these weights; False (skipped) when one is playing and another already waits."""
        try:
            self.jobs.put_nowait((weights, frames, updates, time_s))
            return True
        except queue.Full:  # one evaluation plays, another waits: skip this one
            return False

    def finish(self, wait: bool = True) -> None:
        """End the thread. wait: let a running (and a queued) evaluation finish and be recorded; else give
        them up at once: a stopped run must not wait for games that may last up to the episode cap."""
        if not wait:
            self.cancel.set()
            try:
                self.jobs.get_nowait()  # a queued job that has not started
            except queue.Empty:
                pass
        self.jobs.put(None)
        self.join()

    def run(self) -> None:
        while (job := self.jobs.get()) is not None:
            weights, frames, updates, time_s = job
            try:
                self.model.set_weights(weights)
                self.report(self.evaluate(self.model, updates, self.cancel), frames, updates, time_s)
            except EvalCancelled as e:
                print(f"ba3c: evaluation at {frames:,} frames given up, the run is stopping ({e})", flush=True)
            except BaseException as e:  # reported, never fatal to training
                print(f"ba3c: WARNING: evaluation failed: {e}", file=sys.stderr, flush=True)
