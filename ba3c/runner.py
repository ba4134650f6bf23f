"""`Trainer`: one rank's pipeline wired together, and the training loop. It knows no algorithm: what differs
between them (loss, actor, head, frames per update) comes from `ba3c.algos` through one interface.

Construction builds simulators, model, learner, the algorithm's actor and the worker threads, restores a
resumed run (`ba3c.resume`: rank 0 reads the checkpoint, every rank gets its state by broadcast) and, on
rank 0, opens the report and the schedules of evaluations and checkpoints (`ba3c.schedule`). `run()` is the
loop: take a train batch, make one update, and every --stats-interval-updates updates a sync point
(`ba3c.sync`) in which every rank takes part; `_finish()` writes the end. The threads live in
`ba3c.workers`, rank 0's words and files in `ba3c.report`.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from typing import Any

import numpy as np

from ba3c.algos import ActorContext, checked
from ba3c.batching import data_ranks, global_batch, noise_sub_batch, scaled_lr
from ba3c.config import MAX_SEED, Config
from ba3c.dist import Dist
from ba3c.experience import TrainBatch
from ba3c.files import EXIT_NO_SPACE
from ba3c.guard import Guard, IntervalRecorder
from ba3c.learner import Learner, StepStats
from ba3c.model import PROBE_OBS, HealthProbe, build_model, resolve_model_kind
from ba3c.predictor import Predictor
from ba3c.report import Reporter
from ba3c.resume import restore
from ba3c.rundir import base_meta, now_iso
from ba3c.schedule import Checkpoints, EvalSchedule
from ba3c.signals import SignalFlag
from ba3c.simulators import EnvSpec, make_simulator
from ba3c.state import RunState
from ba3c.sync import RankStats, SyncPoints
from ba3c.workers import SimulationThread, Timers, WatchdogThread, cores_available

__all__ = ["RankStats", "Trainer", "train"]


def train(cfg: Config, spec: EnvSpec, dist: Dist, run_dir: str, resume: bool, flag: SignalFlag | None = None) -> int:
    """Run training to `total_frames`; returns the process exit status."""
    return Trainer(cfg, spec, dist, run_dir, resume, flag).run()


class Trainer(SyncPoints):
    def __init__(self, cfg: Config, spec: EnvSpec, dist: Dist, run_dir: str, resume: bool,
                 flag: SignalFlag | None = None) -> None:
        self.cfg, self.spec, self.dist, self.run_dir = cfg, spec, dist, run_dir
        self.algo = checked(cfg)  # the algorithm, and what it cannot combine with
        if flag is None:  # the entry point installs it before the slow start-up; library callers get one here
            flag = SignalFlag()
            flag.install()
        self.flag = flag
        self._build_pipeline()
        ckpt_dir = os.path.join(run_dir, "checkpoints")
        fresh: tuple[RunState, dict[str, list[Any]]] = (RunState(), {})
        state, changes = restore(ckpt_dir, self.learner, cfg, dist.size) if resume and dist.is_root else fresh
        self.state = state.broadcast(dist)
        self.learner.broadcast_from_root()
        self.learner.updates = self.state.updates
        # Adam's step count is where the lr schedule stands (it differs from `updates` after a rollback)
        self.learner.lr_step = int(self.learner.opt.iterations.numpy())
        self.guard = Guard(cfg.run, dist.is_root, self.state.lr_scale)
        self.learner.lr_scale = self.state.lr_scale  # earlier rollbacks' lr cuts hold for the whole run
        self.interval = IntervalRecorder()
        self._build_actor(restored=bool(self.state.frames))
        ranks, fps = data_ranks(cfg, dist.size), spec.frames_per_step
        # each update stands for the algorithm's frames; a warm-up (a replay's) is played first by every process
        self.frames_per_update = self.algo.frames_per_update(cfg, dist.size, fps)
        self.total_updates = self._updates_to_go(self.actor.warmup_steps * ranks * fps)
        self.report = self._open_report(resume, changes) if dist.is_root else None
        self._build_workers(ckpt_dir)
        self.stats: StepStats | None = None  # the last update's
        self.last_obs: np.ndarray | None = None  # the last batch trained on (rank-local)
        self.probe: HealthProbe | None = None  # rank 0's feature-health probe, from its first train batch
        self.unsampled_steps = 0  # this rank's, since the last sync point (TrainBatch.unsampled_steps)

    # ---- construction
    def _build_pipeline(self) -> None:
        s, l = self.cfg.sim, self.cfg.learn
        k = self.cfg.run.rehearse_ranks  # a rehearsal plays k ranks' simulators in this process
        if self.dist.is_root:
            rehearsal = f" (rehearsing {data_ranks(self.cfg, self.dist.size)} ranks: {k} per process)" if k > 1 else ""
            print(f"ba3c: starting {s.num_envs * k} {self.spec.name} simulators per rank{rehearsal}", flush=True)
        # ALE builds its emulators in one C++ call under the GIL (minutes for thousands of them)
        with self.flag.fatal_during_c_call() if self.spec.kind == "atari" else contextlib.nullcontext():
            self.sim = make_simulator(self.spec, s.num_envs * k, s.predict_batch * k,
                                      s.env_threads or cores_available(), s.max_episode_frames,
                                      fire_after_life_loss=s.life_loss == "terminal", sticky_actions=s.sticky_actions)
        settings = getattr(self.sim, "settings", None)  # Atari: what ALE was given, not only what was asked
        if self.dist.is_root and settings is not None and settings.repeat_action_probability:
            print(f"ba3c: training with sticky actions {settings.repeat_action_probability:g}", flush=True)
        self.model_kind = resolve_model_kind(l.model, self.sim.obs_shape)
        self.model = self._network()  # the same initial weights on every rank
        self.lr = scaled_lr(self.cfg, self.dist.size)
        self.learner = Learner(self.model, l, self.dist, self.lr, l.warmup_updates if self.lr > l.lr else 0,
                               noise_sub_batch(self.cfg), self.algo.make_loss(self.cfg, self.model, self._network))

    def _network(self):  # -> keras.Model
        """The algorithm's network for this simulator (the model, a target network, the evaluation's copy)."""
        return build_model(self.model_kind, self.sim.obs_shape, self.sim.num_actions, seed=self.cfg.sim.seed,
                           head=self.algo.head)

    def _build_actor(self, restored: bool) -> None:
        """The algorithm's actor; on a resume it takes back what it kept beside the checkpoint."""
        s, rank = self.cfg.sim, self.dist.rank
        ctx = ActorContext(self.sim, clip_rewards=self.spec.kind == "atari", rank=rank, ranks=self.dist.size,
                           steps_before=self.state.frames // self.spec.frames_per_step,
                           seed=s.seed * 1_000_003 + rank * 7919 + self.state.updates)
        self.actor = self.algo.make_actor(self.cfg, ctx)
        if restored:
            self.actor.restore(self.run_dir, self.dist)

    def _open_report(self, resumed: bool, changes: dict[str, list[Any]]) -> Reporter:
        meta = {**base_meta(self.dist.name, self.dist.size), "start": now_iso(), "end": None, "model": self.model_kind,
                "env": {"kind": self.spec.kind, "name": self.spec.name},
                "global_batch": global_batch(self.cfg, self.dist.size),
                # the lr it trains at now: an earlier rollback's cut, restored from the checkpoint, included
                "lr_effective": self.lr * self.state.lr_scale, "lr_scale": self.state.lr_scale,
                "rehearse_ranks": self.cfg.run.rehearse_ranks,
                "num_params": int(self.model.count_params()),
                "resumed_from_update": self.state.updates if resumed else None, "config_changes_on_resume": changes}
        bound = self.algo.value_bound(self.cfg, self.spec.kind == "atari")
        columns = (*self.learner.loss.names, *self.actor.stats())  # the algorithm's statistics, progress.csv columns
        report = Reporter(self.run_dir, self.cfg, meta, self.state, resumed, value_bound=bound, columns=columns)
        if line := self.actor.describe():
            print(line, flush=True)
        return report

    def _build_workers(self, ckpt_dir: str) -> None:
        s, r, rank = self.cfg.sim, self.cfg.run, self.dist.rank
        rng = np.random.default_rng([s.seed, rank, self.state.updates])
        k = r.rehearse_ranks
        # Disjoint seed blocks per rank (seed + rank), shifted on resume so emulators do not replay starts;
        # a rehearsal's k ranks' simulators take the k consecutive blocks those ranks would have.
        env_seed = (s.seed + rank * k) * s.num_envs + self.state.updates * 7919
        # ALE takes each emulator's seed (env_seed + its index, + up to --decorrelate-steps more) as a 32-bit signed
        # integer: a large --seed, or a resume after ~270,000 updates, would overflow it. Folded, not refused.
        env_seed %= max(1, MAX_SEED - s.num_envs * k - s.decorrelate_steps - 1)
        learner, actor = self.learner, self.actor
        self.sim_thread = SimulationThread(self.sim, Predictor(self.model, self.sim.obs_shape, self.sim.obs_dtype),
                                           actor.experience, rng, env_seed, r.queue_batches,
                                           policy_version=lambda: learner.updates,
                                           decorrelate_steps=actor.decorrelate_steps, choose=actor.choose,
                                           feed=actor.feed)
        self.learn_timers = Timers()
        self.watchdog = WatchdogThread(r.hang_timeout_min * 60, rank)
        self.evals: EvalSchedule | None = None
        self.checkpoints: Checkpoints | None = None
        if self.report is not None:
            self.checkpoints = Checkpoints(ckpt_dir, self.cfg, self.report, self.state.frames)
            if r.eval_every_frames:
                self.evals = EvalSchedule(self.cfg, self.spec, self.run_dir, self._network(), self.report,
                                          self.state.frames)

    def _updates_to_go(self, warmup_frames: int) -> int:
        """The run's last update: enough for --total-frames after this process's warm-up (frames so far come
        from the checkpoint, and a resume may change the world size, hence frames per update)."""
        left = self.cfg.run.total_frames - self.state.frames - warmup_frames
        return self.state.updates + max(0, math.ceil(left / self.frames_per_update))

    # ---- the loop
    def run(self) -> int:
        """Train to --total-frames, or until the ranks agree to stop; returns the process exit status."""
        status: int | None = None  # set when the ranks agree to stop early
        self._start()
        try:
            while self.state.updates < self.total_updates and status is None:
                t = time.perf_counter()
                batch = self.sim_thread.next_batch(on_wait=self._waiting)
                self.learn_timers.add("queue_wait", t)
                self._train(batch)
                if self.state.updates % self.cfg.run.stats_interval_updates == 0 or self.last_update():
                    status = self.sync()
        finally:
            self._stop_threads()
        return self._finish(status)

    def _start(self) -> None:
        if self.guard.needs_snapshots:  # the state this process starts from: the first rollback target
            self.guard.take_snapshot(self.state.updates, self.learner.state_arrays())
        self.state.start_clocks()
        if self.checkpoints is not None:
            self.checkpoints.last_t = self.state.t_start
        if self.evals is not None:
            self.evals.start()
        self.sim_thread.start()
        if self.dist.size > 1:
            # It guards the allreduce (a lost or stuck rank). One process has none, and its start-up
            # (thousands of emulators in a rehearsal, on a loaded machine) may outlast any timeout.
            self.watchdog.start()

    def _waiting(self) -> None:
        """While the learner waits for a batch (a replay's warm-up, the first batches): rank 0's progress line."""
        if self.report is not None and not self.flag.started:
            steps = self.actor.steps_played()
            played = steps * data_ranks(self.cfg, self.dist.size) * self.spec.frames_per_step
            self.report.waiting(self.state, played, steps, self.actor.warmup_steps, time.time())

    def _train(self, batch: TrainBatch) -> None:
        if self.report is not None and self.probe is None:  # rank 0 keeps the first observations it trains on
            self.probe = HealthProbe(self.model, batch.obs[:PROBE_OBS])
        self.stats = self.learner.train(batch)
        self.stats.terms.update(self.actor.stats())  # the actor's numbers (an exploration rate) beside the loss's
        self.last_obs = batch.obs  # the final sync judges the last step's weights on them
        self.interval.add(self.stats.entropy, self.stats.grad_norm)
        if self.report is not None:
            self.report.add_update(self.stats)
        self.learn_timers.seconds["train"] += self.stats.train_s - self.stats.allreduce_s
        self.learn_timers.seconds["allreduce"] += self.stats.allreduce_s
        self.state.updates += 1
        self.state.frames += self.frames_per_update
        self.unsampled_steps += batch.unsampled_steps  # rank 0 adds every rank's at the next sync point
        self.flag.started = True  # from now on a stop request checkpoints first
        self.watchdog.last_progress = time.monotonic()
        if self.sim_thread.error is not None:
            raise self.sim_thread.error

    # ---- checkpoints (rank 0)
    def save_checkpoint(self, kept: bool = False, final: bool = False, checksums: list[float] | None = None) -> bool:
        """Rank 0; False when the disk had no room (Checkpoints.save). `checksums`: every rank's, at the end."""
        assert self.checkpoints is not None
        meta = {**self.state.to_meta(), "world_size": self.dist.size, "rehearse_ranks": self.cfg.run.rehearse_ranks,
                "config": self.cfg.to_dict(),
                "rng": {"seed": self.cfg.sim.seed}, "model": self.model_kind, "num_actions": self.sim.num_actions,
                "obs_shape": list(self.sim.obs_shape)}
        if checksums is not None:  # the final checkpoint says whether the ranks ended on the same weights
            meta["rank_weight_checksums"] = checksums
        return self.checkpoints.save(self.state.updates, self.learner.state_arrays(), meta, kept, final)

    # ---- the end
    def _stop_threads(self) -> None:
        # Stopped before the end phase: a long final evaluation must not trip it. A rank that fails
        # from here on exits at once (train.py), which ends the job under mpirun.
        self.watchdog.stop.set()
        self.sim_thread.stop.set()
        self.sim_thread.join(timeout=10)
        self.sim.close()
        self.flag.restore()

    def _finish(self, status: int | None) -> int:
        """Rank 0 writes the final checkpoint and the run's last words while every other rank waits."""
        final_written, checksums = True, None
        if self.dist.size > 1:  # every rank's weights, compared by rank 0 and kept in the final checkpoint
            checksums = self.dist.gather(self.learner.weights_checksum())
            if checksums is not None and len(set(checksums)) > 1:
                print(f"ba3c: warning: the ranks ended on different weights (checksums {checksums})",
                      file=sys.stderr, flush=True)
        if self.report is not None:  # first: a stop signal's grace period must not be spent on evaluation games
            final_written = self.save_checkpoint(final=True, checksums=checksums)
            if not final_written:
                status = EXIT_NO_SPACE  # the disk had no room for it: the run's last line says what to free
        if line := self.actor.finish(self.run_dir, self.dist.rank, self.state.updates):  # every rank, after it
            print(line, flush=True)
        if self.evals is not None:
            self.evals.finish(wait=status is None)
        if self.report is not None:
            assert self.checkpoints is not None
            self.report.finish(self.state, status or 0, status is not None, self.sim_thread.timers.seconds,
                               self.learn_timers.seconds, self.checkpoints.no_space if status == EXIT_NO_SPACE
                               else None, final_written)
        # Nobody leaves before rank 0 has written: mpirun kills the whole job when one rank exits non-zero. The
        # broadcast waits for rank 0 like a barrier, and gives every rank its exit status (a final checkpoint
        # that found no room changes it).
        status = self.dist.broadcast_obj(status)
        return status or 0
