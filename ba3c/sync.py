"""The sync point: every --stats-interval-updates updates, every rank in the same order gathers its statistics
to rank 0, carries out the collapse guard's plan and votes on stopping; rank 0 then reports, evaluates and
checkpoints when they are due (ba3c.schedule). `ba3c.runner.Trainer` has these methods and calls `sync` from its
loop.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from ba3c.files import EXIT_NO_SPACE
from ba3c.guard import COLLAPSED, EXIT_COLLAPSED, Plan, policy_entropy
from ba3c.signals import EXIT_SIGNALLED

if TYPE_CHECKING:
    from ba3c.config import Config
    from ba3c.dist import Dist
    from ba3c.guard import Guard, IntervalRecorder
    from ba3c.learner import Learner, StepStats
    from ba3c.model import HealthProbe
    from ba3c.report import Reporter
    from ba3c.schedule import Checkpoints, EvalSchedule
    from ba3c.signals import SignalFlag
    from ba3c.simulators import EnvSpec
    from ba3c.state import RunState
    from ba3c.workers import SimulationThread, Timers


class RankStats(NamedTuple):
    """What each rank sends rank 0 at a sync point."""

    episodes: list[tuple[float, int]]  # (score, length) of the episodes finished since the last sync point
    sim_s: dict[str, float]            # simulation thread's seconds per stage so far
    learn_s: dict[str, float]          # learner's seconds per stage so far
    cpu_s: float                       # this process's CPU seconds since it began training
    entropy: float                     # this rank's policy entropy, mean over the updates since the last sync point
                                       # (after the last update: of the final weights, on the last batch)
    unsampled_steps: int = 0           # agent steps played with the batches trained since then that no sample holds


class SyncPoints:
    """One rank's part of the sync points: a base of `ba3c.runner.Trainer`, which builds what is named here."""

    cfg: Config
    spec: EnvSpec
    dist: Dist
    flag: SignalFlag
    state: RunState
    total_updates: int
    model: Any  # keras.Model
    learner: Learner
    guard: Guard
    interval: IntervalRecorder
    sim_thread: SimulationThread
    learn_timers: Timers
    report: Reporter | None
    checkpoints: Checkpoints | None
    evals: EvalSchedule | None
    stats: StepStats | None
    probe: HealthProbe | None
    last_obs: np.ndarray | None
    unsampled_steps: int

    def last_update(self) -> bool:
        return self.state.updates == self.total_updates

    def save_checkpoint(self, kept: bool = False, final: bool = False, checksums: list[float] | None = None) -> bool:
        raise NotImplementedError  # the Trainer's

    def sync(self) -> int | None:
        """Every rank, in the same order: gather statistics to rank 0, the collapse guard's plan, vote on
        stopping. Returns the exit status when the run stops here, else None."""
        r = self.cfg.run
        gathered = self.dist.gather(self._mine())
        plan = self._guard(gathered)  # None on ranks > 0 when the guard only warns
        timed_out = r.max_minutes > 0 and time.time() - self.state.t_start > r.max_minutes * 60
        # rank 0 stops the run after --checkpoint-max-failures checkpoints in a row found no room
        out_of_space = self.checkpoints is not None and self.checkpoints.out_of_space()
        stop = self.dist.any_true(self.flag.received is not None or timed_out or out_of_space)
        if self.report is not None:
            assert gathered is not None and plan is not None
            self._root(gathered, stop, plan)
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

    def _mine(self) -> RankStats:
        episodes = [(e.score, e.length) for e in self.sim_thread.drain_episodes()]
        entropy = self.interval.entropy_mean()
        if self.last_update() and not self.guard.off:
            # The weights about to be written: each update's entropy is measured before its own step, so the
            # last step would go unjudged, and one step at a high lr can saturate a policy (a CartPole run at
            # lr 0.015 measured entropy 0.39 in its last update, before that step, and saved one action).
            assert self.last_obs is not None
            entropy = policy_entropy(np.asarray(self.model(self.last_obs, training=False)[0]))
        mine = RankStats(episodes, dict(self.sim_thread.timers.seconds), dict(self.learn_timers.seconds),
                         self.state.cpu_here(), entropy, self.unsampled_steps)
        self.unsampled_steps = 0
        return mine

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
            self._roll_back(plan)
        return plan

    def _roll_back(self, plan: Plan) -> None:
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

    def _root(self, gathered: list[RankStats], stop: bool, plan: Plan) -> None:
        """Rank 0 at a sync point: count, report, evaluate and checkpoint when they are due."""
        assert self.report is not None and self.stats is not None and self.checkpoints is not None
        state = self.state
        episodes = [e for g in gathered for e in g.episodes]
        state.episodes += len(episodes)
        # Steps the batches came with that no sample holds (the FIRE step after a lost life, a replay's warm-up):
        # played frames too. Only rank 0's count has them; the other ranks' state.frames is not read after start-up.
        state.frames += sum(g.unsampled_steps for g in gathered) * self.spec.frames_per_step
        state.cpu_s = state.prior_cpu_s + sum(g.cpu_s for g in gathered)
        now = time.time()
        self.report.guard(plan, state, state.elapsed(now))
        self.report.sync(state, episodes, {**gathered[0].sim_s, **gathered[0].learn_s}, self.stats, plan.stats,
                      plan.verdict.state, self.learner.current_lr(), now,
                      force=stop or self.last_update() or plan.action not in ("none", "snapshot"), health=self.probe)
        if self.evals is not None:
            self.evals.at_sync(self.model.get_weights, state, state.elapsed(now))
        self.checkpoints.at_sync(now, state.frames, not stop and plan.verdict.state != COLLAPSED,
                              lambda kept: self.save_checkpoint(kept=kept))
