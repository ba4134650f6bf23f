"""The sync point: every --stats-interval-updates updates, every rank in the same order gathers its statistics
to rank 0, carries out the collapse guard's plan and votes on stopping; rank 0 then reports, evaluates and
checkpoints when they are due (ba3c.schedule). The trainer (`ba3c.runner.Trainer`) calls it from its loop.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ba3c.files import EXIT_NO_SPACE
from ba3c.guard import COLLAPSED, EXIT_COLLAPSED, Plan, policy_entropy
from ba3c.signals import EXIT_SIGNALLED

if TYPE_CHECKING:
    from ba3c.runner import Trainer


class RankStats(NamedTuple):
    """What each rank sends rank 0 at a sync point."""

    episodes: list[tuple[float, int]]  # (score, length) of the episodes finished since the last sync point
    sim_s: dict[str, float]            # simulation thread's seconds per stage so far
    learn_s: dict[str, float]          # learner's seconds per stage so far
    cpu_s: float                       # this process's CPU seconds since it began training
    entropy: float                     # this rank's policy entropy, mean over the updates since the last sync point
                                       # (after the last update: of the final weights, on the last batch)
    unsampled_steps: int = 0           # agent steps played with the batches trained since then that no sample holds


class SyncPoint:
    """One rank's part of the sync points of a `Trainer`."""

    def __init__(self, trainer: Trainer) -> None:
        self.t = trainer

    def __call__(self) -> int | None:
        """Every rank, in the same order: gather statistics to rank 0, the collapse guard's plan, vote on
        stopping. Returns the exit status when the run stops here, else None."""
        t, r = self.t, self.t.cfg.run
        gathered = t.dist.gather(self._mine())
        plan = self._guard(gathered)  # None on ranks > 0 when the guard only warns
        timed_out = r.max_minutes > 0 and time.time() - t.state.t_start > r.max_minutes * 60
        # rank 0 stops the run after --checkpoint-max-failures checkpoints in a row found no room
        out_of_space = t.checkpoints is not None and t.checkpoints.out_of_space()
        stop = t.dist.any_true(t.flag.received is not None or timed_out or out_of_space)
        if t.report is not None:
            assert gathered is not None and plan is not None
            self._root(gathered, stop, plan)
        if plan is not None and plan.action == "give_up":
            return EXIT_COLLAPSED
        if not stop:
            return None
        signalled = t.flag.received is not None
        if t.dist.size > 1:  # every rank exits with the same reason (all of them are here: they agreed to stop)
            out_of_space = t.dist.broadcast_obj(out_of_space)
            # each rank's own clock: one past --max-minutes while another is not must still mean status 0 on both
            # (seen: 4 ranks stopped by --max-minutes exited 75, "stopped by signal", with no signal sent)
            timed_out, signalled = t.dist.any_true(timed_out), t.dist.any_true(signalled)
        if out_of_space:
            return EXIT_NO_SPACE
        return 0 if (timed_out and not signalled) else EXIT_SIGNALLED

    def _mine(self) -> RankStats:
        t = self.t
        episodes = [(e.score, e.length) for e in t.sim_thread.drain_episodes()]
        entropy = t.interval.entropy_mean()
        if t.last_update() and not t.guard.off:
            # The weights about to be written: each update's entropy is measured before its own step, so the
            # last step would go unjudged, and one step at a high lr can saturate a policy (a CartPole run at
            # lr 0.015 measured entropy 0.39 in its last update, before that step, and saved one action).
            assert t.last_obs is not None
            entropy = policy_entropy(np.asarray(t.model(t.last_obs, training=False)[0]))
        mine = RankStats(episodes, dict(t.sim_thread.timers.seconds), dict(t.learn_timers.seconds),
                         t.state.cpu_here(), entropy, t.unsampled_steps)
        t.unsampled_steps = 0
        return mine

    def _guard(self, gathered: list[RankStats] | None) -> Plan | None:
        """Rank 0 judges the interval and plans; in rollback mode every rank receives the plan and carries
        it out at this same update (snapshot, or restore weights and Adam state)."""
        t = self.t
        plan = None
        if gathered is not None:
            lengths = [n for g in gathered for _, n in g.episodes]
            plan = t.guard.plan(t.interval.take(t.state.updates, [g.entropy for g in gathered], lengths))
        t.interval.clear()
        if not t.guard.needs_snapshots:  # warn mode: rank 0 reports, nobody else acts
            return plan
        if t.dist.size > 1:
            plan = t.dist.broadcast_obj(plan)
        assert plan is not None
        if plan.action == "snapshot":
            t.guard.take_snapshot(t.state.updates, t.learner.state_arrays())
        elif plan.action in ("rollback", "give_up"):
            self._roll_back(plan)
        return plan

    def _roll_back(self, plan: Plan) -> None:
        t = self.t
        t.learner.load_state_arrays(t.guard.restore(plan), "the guard's snapshot")
        # batches already queued were played by the collapsed policy
        t.sim_thread.discard_queued()
        t.learner.lr_scale = t.state.lr_scale = t.guard.lr_scale
        t.learner.lr_step = plan.target  # the warm-up goes back with Adam's state
        if plan.action == "rollback":
            t.state.rollbacks += 1
        if t.dist.size > 1:  # every rank restored its own copy: check that they are the same
            sums = t.dist.gather(t.learner.weights_checksum())
            if sums is not None and len(set(sums)) > 1:
                raise RuntimeError(f"ranks disagree after the rollback to update {plan.target:,} "
                                   f"(weight checksums {sums})")

    def _root(self, gathered: list[RankStats], stop: bool, plan: Plan) -> None:
        """Rank 0 at a sync point: count, report, evaluate and checkpoint when they are due."""
        t = self.t
        assert t.report is not None and t.stats is not None and t.checkpoints is not None
        state = t.state
        episodes = [e for g in gathered for e in g.episodes]
        state.episodes += len(episodes)
        # Steps the batches came with that no sample holds (the FIRE step after a lost life, a replay's warm-up):
        # played frames too. Only rank 0's count has them; the other ranks' state.frames is not read after start-up.
        state.frames += sum(g.unsampled_steps for g in gathered) * t.spec.frames_per_step
        state.cpu_s = state.prior_cpu_s + sum(g.cpu_s for g in gathered)
        now = time.time()
        t.report.guard(plan, state, state.elapsed(now))
        t.report.sync(state, episodes, {**gathered[0].sim_s, **gathered[0].learn_s}, t.stats, plan.stats,
                      plan.verdict.state, t.learner.current_lr(), now,
                      force=stop or t.last_update() or plan.action not in ("none", "snapshot"), health=t.probe)
        if t.evals is not None:
            t.evals.at_sync(t.model.get_weights, state, state.elapsed(now))
        t.checkpoints.at_sync(now, state.frames, not stop and plan.verdict.state != COLLAPSED,
                              lambda kept: t.save_checkpoint(kept=kept))
