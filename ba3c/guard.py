"""The collapse guard: notices a policy that has collapsed onto one action and puts training back on a
healthy state, without a person.

Why it is needed: once the softmax saturates, the policy gradient of the sampled (argmax) actions
and the entropy bonus both vanish with the saturation, so nothing pulls the policy back; it can sit
there for thousands of updates (docs/topics/collapse-guard.md). What the guard does,
at every sync point:

* `IntervalRecorder` (every rank) sums what each update reported since the last sync point: the
  policy entropy (a local quantity) and the gradient norm before clipping (the same on every rank).
* `CollapseDetector` (rank 0) turns an interval's statistics into a verdict: collapsed (entropy
  below an absolute floor, or below a fraction of its recent median, or not
  finite), suspect (the interval's largest gradient norm a multiple of the median largest one: no
  snapshot is taken from it), or healthy. The medians are over the last 10 intervals that were not
  collapsed.
* `Guard.plan` (rank 0) decides what to do: nothing, take a snapshot, roll back, or give up. The
  plan is broadcast, and `Guard.apply` (every rank) carries it out, so every rank snapshots and
  restores the same state at the same update.

Snapshots are in memory (weights and Adam state as numpy arrays, ~20 MB for the Nature CNN), taken
at healthy sync points every `--guard-snapshot-updates` updates, and one when the process starts.
A rollback returns to the older of the last two: damage can begin before it shows, and the newer
one is then the evidence that the older one was followed by healthy training. No TensorFlow and no
collectives here: the runner hands the arrays over and does the broadcast.
"""
from __future__ import annotations

import collections
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ba3c.config import RunConfig

HEALTHY, SUSPECT, COLLAPSED = "healthy", "suspect", "collapsed"
HISTORY = 10  # intervals (the last that were not collapsed) whose medians are the reference levels
EXIT_COLLAPSED = 3  # the guard gave up: the policy kept collapsing after --guard-max-rollbacks rollbacks


@dataclass(frozen=True)
class IntervalStats:
    """One sync interval, all ranks together."""

    updates: int                  # the update count at its end
    entropy: float                # policy entropy, mean over its updates (and ranks)
    grad_norm_max: float          # largest gradient norm before clipping
    episode_length: float | None  # mean length (agent steps) of the episodes finished in it; None: none finished


@dataclass(frozen=True)
class Verdict:
    state: str                    # HEALTHY, SUSPECT or COLLAPSED
    reason: str                   # why, in words ('' when healthy)
    entropy_ref: float | None     # medians over the last intervals not collapsed (None before the first): of entropy,
    grad_ref: float | None        # of the largest gradient norm, and of the episode length
    episode_length_ref: float | None


@dataclass(frozen=True)
class Plan:
    """What every rank does at this sync point."""

    stats: IntervalStats
    verdict: Verdict
    action: str                   # "none", "snapshot", "rollback", "give_up" or "warn"
    target: int | None = None     # rollback / give_up: the snapshot's update
    attempt: int = 0              # rollback: how many times to this snapshot, this one included
    lr_scale: float = 1.0         # the lr multiplier from now on


def policy_entropy(logits: np.ndarray) -> float:
    """Mean entropy (nats) of softmax(logits) over the rows."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return float(-(np.exp(logp) * logp).sum(axis=1).mean())


class IntervalRecorder:
    """Per-update statistics since the last sync point (every rank)."""

    def __init__(self) -> None:
        self.entropies: list[float] = []
        self.grad_norms: list[float] = []

    def add(self, entropy: float, grad_norm: float) -> None:
        self.entropies.append(entropy)
        self.grad_norms.append(grad_norm)

    def entropy_mean(self) -> float:
        return float(np.mean(self.entropies)) if self.entropies else float("nan")

    def take(self, updates: int, rank_entropies: Sequence[float], episode_lengths: Sequence[int]) -> IntervalStats:
        """The interval's statistics (rank 0, with every rank's mean entropy), and a fresh start."""
        stats = IntervalStats(updates, float(np.mean(rank_entropies)),
                              float(np.max(self.grad_norms)) if self.grad_norms else float("nan"),
                              float(np.mean(episode_lengths)) if episode_lengths else None)
        self.clear()
        return stats

    def clear(self) -> None:
        self.entropies, self.grad_norms = [], []


class CollapseDetector:
    """Rank 0: a verdict per sync interval against the medians of the last HISTORY intervals that were not
    collapsed."""

    def __init__(self, entropy_floor: float, entropy_drop: float, grad_jump: float) -> None:
        self.entropy_floor, self.entropy_drop, self.grad_jump = entropy_floor, entropy_drop, grad_jump
        self._entropy: collections.deque[float] = collections.deque(maxlen=HISTORY)
        self._grad: collections.deque[float] = collections.deque(maxlen=HISTORY)
        self._length: collections.deque[float] = collections.deque(maxlen=HISTORY)

    def assess(self, s: IntervalStats) -> Verdict:
        e_ref = statistics.median(self._entropy) if self._entropy else None
        g_ref = statistics.median(self._grad) if self._grad else None
        l_ref = statistics.median(self._length) if self._length else None

        def verdict(state: str, reason: str = "") -> Verdict:
            return Verdict(state, reason, e_ref, g_ref, l_ref)

        if not math.isfinite(s.entropy):
            return verdict(COLLAPSED, f"policy entropy is {s.entropy} (non-finite weights or losses)")
        if s.entropy < self.entropy_floor:
            return verdict(COLLAPSED, f"policy entropy {s.entropy:.2g} is below the floor {self.entropy_floor:g}")
        if e_ref is not None and s.entropy < self.entropy_drop * e_ref:
            return verdict(COLLAPSED, f"policy entropy {s.entropy:.2g} fell below {self.entropy_drop:g} x its "
                                      f"recent median {e_ref:.3g}")
        # From here on the policy is alive, so the interval joins the reference (a suspect one too: a lasting
        # rise of the gradient norm, as when rewards first appear, must become the new normal within a few).
        self._entropy.append(s.entropy)
        if s.episode_length is not None:
            self._length.append(s.episode_length)
        if not math.isfinite(s.grad_norm_max):
            return verdict(SUSPECT, f"gradient norm is {s.grad_norm_max}")
        self._grad.append(s.grad_norm_max)
        if g_ref is not None and s.grad_norm_max > self.grad_jump * g_ref:
            return verdict(SUSPECT, f"largest gradient norm {s.grad_norm_max:.3g} is {s.grad_norm_max / g_ref:.1f} x "
                                    f"its recent median {g_ref:.3g}")
        return verdict(HEALTHY)


@dataclass
class Snapshot:
    updates: int
    arrays: list[np.ndarray]  # the learner's state_arrays(): weights, then Adam's variables


class Guard:
    """Snapshots and rollbacks (every rank); the plan is made on rank 0 (`plan`) and broadcast."""

    def __init__(self, cfg: RunConfig, is_root: bool, lr_scale: float = 1.0) -> None:
        self.cfg = cfg
        self.rollback_mode = cfg.collapse_guard == "rollback"
        self.off = cfg.collapse_guard == "off"  # no verdicts at all (Gorila: a Q-network has no policy entropy)
        self.detector = CollapseDetector(cfg.guard_entropy_floor, cfg.guard_entropy_drop,
                                         cfg.guard_grad_jump) if is_root else None
        self.snapshots: collections.deque[Snapshot] = collections.deque(maxlen=2)
        self.attempts: dict[int, int] = {}  # snapshot update -> rollbacks to it so far
        self.lr_scale = lr_scale            # compounded by every rollback, for the rest of the run
        self._collapsed = False             # warn mode: inside a collapse already reported

    @property
    def needs_snapshots(self) -> bool:
        return self.rollback_mode

    def take_snapshot(self, updates: int, arrays: list[np.ndarray]) -> None:
        if self.snapshots and self.snapshots[-1].updates == updates:
            return
        self.snapshots.append(Snapshot(updates, [np.array(a, copy=True) for a in arrays]))
        alive = {s.updates for s in self.snapshots}
        self.attempts = {u: n for u, n in self.attempts.items() if u in alive}

    def plan(self, s: IntervalStats) -> Plan:
        """Rank 0: the verdict on this interval and what every rank does about it."""
        assert self.detector is not None, "plan() is rank 0's"
        if self.off:
            return Plan(s, Verdict(HEALTHY, "", None, None, None), "none", lr_scale=self.lr_scale)
        v = self.detector.assess(s)
        if not self.rollback_mode:
            was, self._collapsed = self._collapsed, v.state == COLLAPSED
            return Plan(s, v, "warn" if v.state == COLLAPSED and not was else "none", lr_scale=self.lr_scale)
        if v.state == COLLAPSED and self.snapshots:
            target = self.snapshots[0].updates
            attempt = self.attempts.get(target, 0) + 1
            if attempt > self.cfg.guard_max_rollbacks:
                return Plan(s, v, "give_up", target, attempt - 1, self.lr_scale)
            return Plan(s, v, "rollback", target, attempt, self.lr_scale * self.cfg.guard_lr_cut)
        due = not self.snapshots or s.updates - self.snapshots[-1].updates >= self.cfg.guard_snapshot_updates
        return Plan(s, v, "snapshot" if v.state == HEALTHY and due else "none", lr_scale=self.lr_scale)

    def restore(self, plan: Plan) -> list[np.ndarray]:
        """Every rank, for a rollback or give-up plan: the target snapshot's arrays; later snapshots are
        dropped (they may hold the start of the damage)."""
        while self.snapshots[-1].updates != plan.target:
            self.snapshots.pop()
        if plan.action == "rollback":
            self.attempts[plan.target] = plan.attempt
            self.lr_scale = plan.lr_scale
        return self.snapshots[-1].arrays
