"""`Trainer`: one rank's pipeline wired together, and the training loop.

Construction builds simulators, model, learner and the worker threads, restores a resumed run
(rank 0 reads the checkpoint, every rank gets its state by broadcast) and, on rank 0, opens the
report. `run()` is the loop: take a train batch, make one update, and every
--stats-interval-updates updates a sync point (`_sync`) in which every rank takes part; `_finish()`
writes the end. The threads live in `ba3c.workers`, rank 0's words and files in `ba3c.report`.
"""
from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from typing import Any, NamedTuple

import numpy as np

from ba3c import checkpoint as ckpt, gorila
from ba3c.config import (
    IMPLIED_BY_OLDER_CONFIGS,
    MAX_SEED,
    Config,
    data_ranks,
    global_batch,
    noise_sub_batch,
    scaled_lr,
)
from ba3c.dist import Dist
from ba3c.evaluation import evaluate_model
from ba3c.experience import Experience, TrainBatch
from ba3c.files import EXIT_NO_SPACE, NoSpaceError
from ba3c.guard import COLLAPSED, EXIT_COLLAPSED, Guard, IntervalRecorder, Plan, policy_entropy
from ba3c.learner import Learner, StepStats
from ba3c.model import PROBE_OBS, HealthProbe, build_model, head_for, resolve_model_kind
from ba3c.predictor import Predictor
from ba3c.report import Reporter
from ba3c.rundir import base_meta, last_eval_frames, now_iso
from ba3c.signals import EXIT_SIGNALLED, SignalFlag
from ba3c.simulators import EnvSpec, make_simulator
from ba3c.state import RunState
from ba3c.workers import EvalThread, SimulationThread, Timers, WatchdogThread, cores_available


class RankStats(NamedTuple):
    """What each rank sends rank 0 at a sync point."""

    episodes: list[tuple[float, int]]  # (score, length) of the episodes finished since the last sync point
    sim_s: dict[str, float]            # simulation thread's seconds per stage so far
    learn_s: dict[str, float]          # learner's seconds per stage so far
    cpu_s: float                       # this process's CPU seconds since it began training
    entropy: float                     # this rank's policy entropy, mean over the updates since the last sync point
                                       # (after the last update: of the final weights, on the last batch)
    unsampled_steps: int = 0           # agent steps played with the batches trained since then that no sample holds


def config_changes(old: dict[str, dict[str, Any]], new: Config) -> dict[str, list[Any]]:
    """Option -> [old value, new value] for every option a resume changes (the resume path aside)."""
    before = {**IMPLIED_BY_OLDER_CONFIGS, **{k: v for group in old.values() for k, v in group.items()}}
    after = {k: v for group in new.to_dict().values() for k, v in group.items()}
    return {k: [before.get(k), v] for k, v in after.items() if before.get(k) != v and k != "resume"}


def train(cfg: Config, spec: EnvSpec, dist: Dist, run_dir: str, resume: bool, flag: SignalFlag | None = None) -> int:
    """Run training to `total_frames`; returns the process exit status."""
    return Trainer(cfg, spec, dist, run_dir, resume, flag).run()


class Trainer:
    def __init__(self, cfg: Config, spec: EnvSpec, dist: Dist, run_dir: str, resume: bool,
                 flag: SignalFlag | None = None) -> None:
        self.cfg, self.spec, self.dist, self.run_dir = cfg, spec, dist, run_dir
        self.ckpt_dir = os.path.join(run_dir, "checkpoints")
        if flag is None:  # the entry point installs it before the slow start-up; library callers get one here
            flag = SignalFlag()
            flag.install()
        self.flag = flag
        self._build_pipeline()
        state, changes = self._restore() if resume and dist.is_root else (RunState(), {})
        self.state = state.broadcast(dist)
        self.learner.broadcast_from_root()
        self.learner.updates = self.state.updates
        # Adam's step count is where the lr schedule stands (it differs from `updates` after a rollback)
        self.learner.lr_step = int(self.learner.opt.iterations.numpy())
        self.guard = Guard(cfg.run, dist.is_root, self.state.lr_scale)
        self.learner.lr_scale = self.state.lr_scale  # earlier rollbacks' lr cuts hold for the whole run
        self.interval = IntervalRecorder()
        # BA3C: each update trains on the agent steps it samples; Gorila: it stands for --train-every agent steps
        # per rank, after --learning-starts of them that each process plays first
        self.frames_per_update, warmup_frames = (
            gorila.update_frames(cfg, data_ranks(cfg, dist.size), spec.frames_per_step) if self.gorila
            else (global_batch(cfg, dist.size) * spec.frames_per_step, 0))
        self.warmup_frames = warmup_frames  # this process's, before a saved replay shortens it
        self.total_updates = self._updates_to_go(warmup_frames)
        self.report = self._open_report(resume, changes) if dist.is_root else None
        self._build_workers()
        self.stats: StepStats | None = None  # the last update's
        self.last_obs: np.ndarray | None = None  # the last batch trained on (rank-local)
        self.probe: HealthProbe | None = None  # rank 0's feature-health probe, from its first train batch
        self.unsampled_steps = 0  # this rank's, since the last sync point (TrainBatch.unsampled_steps)
        self.last_checkpoint_t = 0.0
        self.failed_checkpoints = 0  # rank 0: checkpoints in a row the disk had no room for
        self.no_space: NoSpaceError | None = None  # rank 0: the last such failure
        self.rank_checksums: list[float] | None = None  # rank 0, at the end: every rank's weight checksum
        k = cfg.run.keep_every_frames  # the next multiple of it past which a kept checkpoint is due
        self.next_keep = (self.state.frames // k + 1) * k if k else 0

    def _build_pipeline(self) -> None:
        s, l = self.cfg.sim, self.cfg.learn
        self.gorila = l.algo == "gorila"  # what differs is in ba3c.gorila: the loss, the actor, the frame count
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
        loss = gorila.make_loss(self.cfg, self.model, self._network) if self.gorila else None  # None: BA3C's
        self.learner = Learner(self.model, l, self.dist, self.lr, l.warmup_updates if self.lr > l.lr else 0,
                               noise_sub_batch(self.cfg), loss)

    def _network(self):  # -> keras.Model
        """The algorithm's network for this simulator (the model, Gorila's target, the evaluation's copy)."""
        return build_model(self.model_kind, self.sim.obs_shape, self.sim.num_actions, seed=self.cfg.sim.seed,
                           head=head_for(self.cfg.learn.algo))

    def _restore(self) -> tuple[RunState, dict[str, list[Any]]]:
        """Rank 0, on resume: the newest valid checkpoint into the learner; returns its run state and the config
        changes."""
        c = ckpt.load_latest(self.ckpt_dir)
        if c is None:
            print(f"ba3c: no valid checkpoint in {self.ckpt_dir}; starting from scratch", file=sys.stderr)
            return RunState(), {}
        self.learner.load_state_arrays(c.arrays)
        changes = config_changes(c.meta.get("config", {}), self.cfg)
        if changes:
            print(f"ba3c: resume changes {', '.join(f'{k}: {a!r} -> {b!r}' for k, (a, b) in changes.items())}")
        if "cpu_s" not in c.meta:
            print("ba3c: this checkpoint predates CPU accounting; cpu_s counts from this resume", file=sys.stderr)
        state = RunState.from_meta(c.meta)
        if state.lr_scale != 1.0 and any(k in changes for k in ("lr", "lr_scaling", "lr_ref_batch")):
            # a learning rate chosen on resume replaces the cut the collapse guard made
            print(f"ba3c: the learning rate changes on resume: the collapse guard's lr cut (x{state.lr_scale:g}) "
                  f"is dropped")
            state.lr_scale = 1.0
        print(f"ba3c: resuming from {c.path} (update {state.updates:,}, {state.frames:,} frames; "
              f"trained on {c.meta.get('world_size')} ranks, now {self.dist.size})")
        return state, changes

    def _open_report(self, resumed: bool, changes: dict[str, list[Any]]) -> Reporter:
        meta = {**base_meta(self.dist.name, self.dist.size), "start": now_iso(), "end": None, "model": self.model_kind,
                "env": {"kind": self.spec.kind, "name": self.spec.name},
                "global_batch": global_batch(self.cfg, self.dist.size),
                # the lr it trains at now: an earlier rollback's cut, restored from the checkpoint, included
                "lr_effective": self.lr * self.state.lr_scale, "lr_scale": self.state.lr_scale,
                "rehearse_ranks": self.cfg.run.rehearse_ranks,
                "num_params": int(self.model.count_params()),
                "resumed_from_update": self.state.updates if resumed else None, "config_changes_on_resume": changes}
        bound = gorila.value_bound(self.cfg.learn.gamma, self.spec.kind == "atari") if self.gorila else None
        return Reporter(self.run_dir, self.cfg, meta, self.state, resumed, value_bound=bound)

    def _build_workers(self) -> None:
        s, l, r = self.cfg.sim, self.cfg.learn, self.cfg.run
        rank, sim = self.dist.rank, self.sim
        rng = np.random.default_rng([s.seed, rank, self.state.updates])
        k = r.rehearse_ranks
        # Disjoint seed blocks per rank (seed + rank), shifted on resume so emulators do not replay starts;
        # a rehearsal's k ranks' simulators take the k consecutive blocks those ranks would have.
        env_seed = (s.seed + rank * k) * s.num_envs + self.state.updates * 7919
        # ALE takes each emulator's seed (env_seed + its index, + up to --decorrelate-steps more) as a 32-bit signed
        # integer: a large --seed, or a resume after ~270,000 updates, would overflow it. Folded, not refused.
        env_seed %= max(1, MAX_SEED - s.num_envs * k - s.decorrelate_steps - 1)
        learner = self.learner
        predictor = Predictor(self.model, sim.obs_shape, sim.obs_dtype)
        if self.gorila:  # epsilon-greedy into the replay memory, which the learner samples
            steps_before = self.state.frames // self.spec.frames_per_step
            actor = gorila.make_actor(self.cfg, sim, self.spec.kind == "atari", self.dist.size, steps_before,
                                      seed=s.seed * 1_000_003 + rank * 7919 + self.state.updates)
            if self.state.frames:  # a resume: the replay saved at the end of the last process, if any (--replay-save)
                self._load_replay(actor)
            self.sim_thread = SimulationThread(sim, predictor, actor, rng, env_seed, r.queue_batches,
                                               policy_version=lambda: learner.updates, choose=actor.choose, feed=actor)
            if self.dist.is_root:
                g = self.cfg.gorila
                held = "an empty replay memory" if actor.learning_starts == g.learning_starts else "a replay memory"
                print(f"ba3c: gorila: {held} of {g.replay_size:,} transitions per rank; each rank plays "
                      f"{actor.learning_starts:,} agent steps at epsilon {actor.epsilon():.3g} before the first "
                      f"update, then one update per {g.train_every} agent steps", flush=True)
        else:  # actions sampled from the policy into n-step returns, queued as train batches
            exp = Experience(s.num_envs * k, sim.obs_shape, sim.obs_dtype, l.n_step, l.gamma, l.train_batch * k,
                             clip_rewards=self.spec.kind == "atari", life_loss_terminal=s.life_loss == "terminal")
            self.sim_thread = SimulationThread(sim, predictor, exp, rng, env_seed, r.queue_batches,
                                               policy_version=lambda: learner.updates,
                                               decorrelate_steps=s.decorrelate_steps)
        self.learn_timers = Timers()
        self.watchdog = WatchdogThread(r.hang_timeout_min * 60, rank)
        self.evaluator: EvalThread | None = None
        if self.report is not None and r.eval_every_frames:
            snapshot = self._network()
            self.evaluator = EvalThread(snapshot, self._evaluate, self.report.evaluation)
        every = r.eval_every_frames
        self.next_eval = (self.state.frames // every + 1) * every if every else 0
        if self.evaluator is not None and self.state.frames >= every and \
                last_eval_frames(self.run_dir) < self.state.frames // every * every:
            # the last evaluation due was given up when the run stopped (or the run ended before it): the
            # restored weights are evaluated at the first sync point, so a resume leaves no gap in eval.csv
            print(f"ba3c: eval.csv has no evaluation at {self.state.frames // every * every:,} frames (the run "
                  f"stopped first): evaluating the restored weights now", flush=True)
            self.next_eval = self.state.frames

    def _load_replay(self, actor: gorila.GorilaActor) -> None:
        """Every rank loads its saved shard; all shorten their warm-up by the fewest transitions any rank loaded
        (the same on every rank, so that they agree on the run's last update)."""
        loaded, line = gorila.load_replay(actor.replay, self.run_dir, self.dist.rank)
        if line:
            print(line, flush=True)
        counts = self.dist.gather(loaded)
        fewest = self.dist.broadcast_obj(min(counts) if counts is not None else None)
        if fewest:
            g = self.cfg.gorila
            actor.learning_starts = max(0, g.learning_starts - fewest)
            self.total_updates = self._updates_to_go(
                self.warmup_frames * actor.learning_starts // max(1, g.learning_starts))

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
                batch = self.sim_thread.next_batch()
                self.learn_timers.add("queue_wait", t)
                self._train(batch)
                if self.state.updates % self.cfg.run.stats_interval_updates == 0 or self._last_update():
                    status = self._sync()
        finally:
            self._stop_threads()
        return self._finish(status)

    def _start(self) -> None:
        if self.guard.needs_snapshots:  # the state this process starts from: the first rollback target
            self.guard.take_snapshot(self.state.updates, self.learner.state_arrays())
        self.state.start_clocks()
        self.last_checkpoint_t = self.state.t_start
        if self.evaluator is not None:
            self.evaluator.start()
        self.sim_thread.start()
        if self.dist.size > 1:
            # It guards the allreduce (a lost or stuck rank). One process has none, and its start-up
            # (thousands of emulators in a rehearsal, on a loaded machine) may outlast any timeout.
            self.watchdog.start()

    def _last_update(self) -> bool:
        return self.state.updates == self.total_updates

    def _train(self, batch: TrainBatch) -> None:
        if self.report is not None and self.probe is None:  # rank 0 keeps the first observations it trains on
            self.probe = HealthProbe(self.model, batch.obs[:PROBE_OBS])
        self.stats = self.learner.train(batch)
        if self.gorila:  # the exploration schedule, beside the loss's statistics in progress.csv
            self.stats.terms["epsilon"] = self.sim_thread.feed.epsilon()
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

    def _sync(self) -> int | None:
        """Every rank, in the same order: gather statistics to rank 0, the collapse guard's plan, vote on
        stopping. Returns the exit status when the run stops here, else None."""
        r = self.cfg.run
        episodes = [(e.score, e.length) for e in self.sim_thread.drain_episodes()]
        entropy = self.interval.entropy_mean()
        if self._last_update() and not self.guard.off:
            # The weights about to be written: each update's entropy is measured before its own step, so the
            # last step would go unjudged, and one step at a high lr can saturate a policy (a CartPole run at
            # lr 0.015 measured entropy 0.39 in its last update, before that step, and saved one action).
            assert self.last_obs is not None
            entropy = policy_entropy(np.asarray(self.model(self.last_obs, training=False)[0]))
        mine = RankStats(episodes, dict(self.sim_thread.timers.seconds), dict(self.learn_timers.seconds),
                         self.state.cpu_here(), entropy, self.unsampled_steps)
        self.unsampled_steps = 0
        gathered = self.dist.gather(mine)
        plan = self._guard(gathered)  # None on ranks > 0 when the guard only warns
        timed_out = r.max_minutes > 0 and time.time() - self.state.t_start > r.max_minutes * 60
        # rank 0 stops the run after --checkpoint-max-failures checkpoints in a row found no room
        out_of_space = self.failed_checkpoints >= r.checkpoint_max_failures
        stop = self.dist.any_true(self.flag.received is not None or timed_out or out_of_space)
        if self.report is not None:
            assert gathered is not None and plan is not None
            self._sync_root(gathered, stop, plan)
        if plan is not None and plan.action == "give_up":
            return EXIT_COLLAPSED
        if not stop:
            return None
        signalled = self.flag.received is not None
        if self.dist.size > 1:  # every rank exits with the same reason (all of them are here: they agreed to stop)
            out_of_space = self.dist.broadcast_obj(out_of_space)
            # each rank's own clock: one past --max-minutes while another is not must still mean status 0 on both
            # (seen: 4 ranks stopped by --max-minutes exited 75, "stopped by signal", with no signal sent)
            timed_out, signalled = self.dist.any_true(timed_out), self.dist.any_true(signalled)
        if out_of_space:
            return EXIT_NO_SPACE
        return 0 if (timed_out and not signalled) else EXIT_SIGNALLED

    def _guard(self, gathered: list[RankStats] | None) -> Plan | None:
        """Rank 0 judges the interval and plans; in rollback mode every rank receives the plan and carries
        it out at this same update (snapshot, or restore weights and Adam state)."""
        plan = None
        if gathered is not None:
            lengths = [n for g in gathered for _, n in g.episodes]
            plan = self.guard.plan(self.interval.take(self.state.updates, [g.entropy for g in gathered], lengths))
        self.interval.clear()
        if not self.guard.needs_snapshots:  # warn mode: rank 0 reports, nobody else acts
            return plan
        if self.dist.size > 1:
            plan = self.dist.broadcast_obj(plan)
        assert plan is not None
        if plan.action == "snapshot":
            self.guard.take_snapshot(self.state.updates, self.learner.state_arrays())
        elif plan.action in ("rollback", "give_up"):
            self.learner.load_state_arrays(self.guard.restore(plan), "the guard's snapshot")
            # batches already queued were played by the collapsed policy
            self.sim_thread.discard_queued()
            self.learner.lr_scale = self.state.lr_scale = self.guard.lr_scale
            self.learner.lr_step = plan.target  # the warm-up goes back with Adam's state
            if plan.action == "rollback":
                self.state.rollbacks += 1
            if self.dist.size > 1:  # every rank restored its own copy: check that they are the same
                sums = self.dist.gather(self.learner.weights_checksum())
                if sums is not None and len(set(sums)) > 1:
                    raise RuntimeError(f"ranks disagree after the rollback to update {plan.target:,} "
                                       f"(weight checksums {sums})")
        return plan

    def _sync_root(self, gathered: list[RankStats], stop: bool, plan: Plan) -> None:
        """Rank 0 at a sync point: count, report, evaluate and checkpoint when they are due."""
        assert self.report is not None and self.stats is not None
        r = self.cfg.run
        episodes = [e for g in gathered for e in g.episodes]
        self.state.episodes += len(episodes)
        # Steps the batches came with that no sample holds (the FIRE step after a lost life): played frames
        # too. Only rank 0's count has them; the other ranks' state.frames is not read after start-up.
        self.state.frames += sum(g.unsampled_steps for g in gathered) * self.spec.frames_per_step
        self.state.cpu_s = self.state.prior_cpu_s + sum(g.cpu_s for g in gathered)
        now = time.time()
        self.report.guard(plan, self.state, self.state.elapsed(now))
        self.report.sync(self.state, episodes, {**gathered[0].sim_s, **gathered[0].learn_s}, self.stats, plan.stats,
                         plan.verdict.state, self.learner.current_lr(), now, total_updates=self.total_updates,
                         force=stop or self._last_update() or plan.action not in ("none", "snapshot"),
                         health=self.probe)
        if self.evaluator is not None and self.state.frames >= self.next_eval:
            if not self.evaluator.submit([np.array(w) for w in self.model.get_weights()], self.state.frames,
                                         self.state.updates, self.state.elapsed(now)):
                # a gap in eval.csv needs a reason: long games (up to the protocol's cap) hold the thread
                print(f"ba3c: evaluation at {self.state.frames:,} frames skipped: an earlier one is still playing "
                      f"and another waits (eval.csv has no row for it)", file=sys.stderr, flush=True)
            self.next_eval += r.eval_every_frames
        # Never over a good checkpoint with a collapsed state: a checkpoint due now waits for an interval that
        # is not collapsed (after a rollback the restored state is written at the next one).
        keep_due = bool(r.keep_every_frames) and self.state.frames >= self.next_keep
        # after a failed checkpoint the next try waits for the interval, a kept one too (a full disk stays full)
        interval_due = now - self.last_checkpoint_t >= r.checkpoint_interval_min * 60
        due = (keep_due and not self.failed_checkpoints) or interval_due
        if due and not stop and plan.verdict.state != COLLAPSED:
            written = self._save_checkpoint(kept=keep_due)
            self.last_checkpoint_t = now
            if keep_due and written:
                self.next_keep = (self.state.frames // r.keep_every_frames + 1) * r.keep_every_frames

    def _evaluate(self, model, updates: int, cancel: threading.Event) -> dict[str, Any]:
        """The periodic evaluation, run by the evaluation thread on a snapshot of the weights."""
        r = self.cfg.run
        cap = None if r.eval_policy == "paper" else self.cfg.sim.max_episode_frames  # None: the paper's own cap
        return evaluate_model(model, self.spec, r.eval_episodes, r.eval_policy, num_envs=min(r.eval_episodes, 16),
                              max_episode_frames=cap, seed=10_000 + updates, num_threads=1,
                              fire_after_life_loss=self.cfg.sim.life_loss == "terminal",
                              sticky_actions=r.eval_sticky_actions, cancel=cancel)

    def _save_checkpoint(self, kept: bool = False, final: bool = False) -> bool:
        """Rank 0. False when the disk or quota had no room (self.no_space says why; nothing of it is left, the
        older checkpoints are intact): a line, unless `final` (the run's last line names it then)."""
        assert self.report is not None
        meta = {**self.state.to_meta(), "world_size": self.dist.size, "rehearse_ranks": self.cfg.run.rehearse_ranks,
                "config": self.cfg.to_dict(),
                "rng": {"seed": self.cfg.sim.seed}, "model": self.model_kind, "num_actions": self.sim.num_actions,
                "obs_shape": list(self.sim.obs_shape)}
        if self.rank_checksums is not None:  # the final checkpoint says whether the ranks ended on the same weights
            meta["rank_weight_checksums"] = self.rank_checksums
        try:
            path = ckpt.save(self.ckpt_dir, self.state.updates, self.learner.state_arrays(), meta,
                             self.cfg.run.keep_checkpoints, kept=kept)
        except NoSpaceError as e:
            self.no_space = e
            self.failed_checkpoints += 1
            if not final:
                self.report.checkpoint_failed(e, self.state.updates, self.failed_checkpoints)
            return False
        self.failed_checkpoints = 0
        self.report.checkpoint_written(path)
        return True

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
        final_written = True
        if self.dist.size > 1:  # every rank's weights, compared by rank 0 and kept in the final checkpoint
            self.rank_checksums = self.dist.gather(self.learner.weights_checksum())
            if self.rank_checksums is not None and len(set(self.rank_checksums)) > 1:
                print(f"ba3c: warning: the ranks ended on different weights (checksums {self.rank_checksums})",
                      file=sys.stderr, flush=True)
        if self.report is not None:  # first: a stop signal's grace period must not be spent on evaluation games
            final_written = self._save_checkpoint(final=True)
            if not final_written:
                status = EXIT_NO_SPACE  # the disk had no room for it: the run's last line says what to free
        if self.gorila and self.cfg.gorila.replay_save == "end":  # every rank its shard, after the checkpoint
            print(gorila.save_replay(self.sim_thread.feed.replay, self.run_dir, self.dist.rank, self.state.updates),
                  flush=True)
        if self.evaluator is not None:
            # At the end of training the last evaluation is waited for and logged; a stopped run gives it up.
            self.evaluator.finish(wait=status is None)
        if self.report is not None:
            self.report.finish(self.state, status or 0, status is not None, self.sim_thread.timers.seconds,
                               self.learn_timers.seconds, self.no_space if status == EXIT_NO_SPACE else None,
                               final_written)
        # Nobody leaves before rank 0 has written: mpirun kills the whole job when one rank exits non-zero. The
        # broadcast waits for rank 0 like a barrier, and gives every rank its exit status (a final checkpoint
        # that found no room changes it).
        status = self.dist.broadcast_obj(status)
        return status or 0
