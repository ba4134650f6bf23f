"""Gorila (`--algo gorila`; Nair et al. 2015, "Massively Parallel Methods for Deep Reinforcement Learning",
arXiv 1507.04296): distributed DQN behind the algorithm interface (`Gorila`, ba3c.algos.base).

Gorila has four parts; in its bundled mode each machine runs one of each of the first three:
* an actor: plays with epsilon-greedy on the Q-network's current weights -> here the rank's
  simulation thread, choosing actions by `GorilaActor.choose` on the live network (the predictor
  reads the learner's weights in the same process);
* its shard of the experience store: a replay memory of the actor's own transitions -> `ba3c.algos.replay`,
  written by `GorilaActor.add`;
* a learner: the DQN loss against a target network, trained on samples of the local replay ->
  `DQNLoss` in the shared `ba3c.learner.Learner`, fed by `GorilaActor.next_batch`;
* a distributed network: a sharded parameter server that applies the learners' gradients -> the
  synchronous gradient exchange every rank already has (`ba3c.dist`): every rank applies the same
  average, so every actor acts with the same weights. (Gorila's asynchronous parameter server, with
  stale gradients dropped, was measured and not built: studies/gorila_async.)

Pacing keeps the replay ratio fixed, as single-process DQN does (CleanRL's dqn_atari: one update of
32 samples per 4 agent steps): the learner takes its k-th batch of this process once the rank's actor
has played `learning_starts + k * train_every` agent steps, and the actor waits when it is more than
`ahead_steps` beyond what the learner has taken, so that acting and learning overlap without the
ratio drifting. `learning_starts` is played again by every process, less the transitions a resume
loaded from the replay saved at the end of the previous one (`--replay-save end`; see docs/gorila.md).

No TensorFlow at import time: `DQNLoss` and `TargetNetwork` import it when built.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ba3c.algos.base import Actor, ActorContext, Algorithm, MemoryCost
from ba3c.algos.replay import Replay, ReplaySample, replay_bytes
from ba3c.config import ConfigError
from ba3c.experience import Episode
from ba3c.files import SPACE_ERRNOS, fmt_bytes, free_bytes
from ba3c.predictor import epsilon_greedy_actions
from ba3c.simulators import Batch

if TYPE_CHECKING:
    from ba3c.config import Config
    from ba3c.dist import Dist
    from ba3c.simulators import Simulator


def epsilon_at(agent_steps: int, start: float, end: float, decay_steps: int) -> float:
    """The exploration schedule: linear from `start` at step 0 to `end` at `decay_steps`, then `end`
    (CleanRL's linear_schedule; Nature DQN's annealing). `agent_steps`: all ranks together."""
    if decay_steps <= 0 or agent_steps >= decay_steps:
        return end
    return start + (end - start) * agent_steps / decay_steps


class EpisodeTracker:
    """Scores and lengths of the games the actor plays (full games: a lost life does not end one), and how
    many of its observations were agent steps (all but an episode's first, which no action of ours led to)."""

    def __init__(self, num_envs: int) -> None:
        self.score = np.zeros(num_envs, np.float64)
        self.length = np.zeros(num_envs, np.int64)
        self.starting = np.ones(num_envs, bool)  # the environment's next observation opens an episode

    def add(self, b: Batch) -> tuple[list[Episode], int]:
        episodes: list[Episode] = []
        ids = np.asarray(b.env_ids, np.int64)
        stepped = ~self.starting[ids]
        self.score[ids[stepped]] += b.reward[stepped]
        self.length[ids[stepped]] += 1
        ended = np.asarray(b.terminated) | np.asarray(b.truncated)
        for j in np.flatnonzero(ended):
            e = int(ids[j])
            episodes.append(Episode(e, float(self.score[e]), int(self.length[e]),
                                    bool(b.truncated[j] and not b.terminated[j])))
            self.score[e], self.length[e] = 0.0, 0
        self.starting[ids] = ended
        return episodes, int(stepped.sum())


class GorilaActor(Actor):
    """One rank's actor and its replay shard, with the pacing between it and the learner.

    The simulation thread calls `choose` (actions for a predictor batch), `add` (record it) and `hand_over`
    (wait while too far ahead of the learner); the learner calls `next_batch`. It is its own `experience` and
    `feed` (ba3c.algos.base.Actor)."""

    def __init__(self, replay: Replay, *, train_batch: int, train_every: int, learning_starts: int,
                 ahead_steps: int, epsilon: tuple[float, float, int], ranks: int, steps_before: int,
                 life_loss_terminal: bool, seed: int) -> None:
        self.replay, self.train_batch, self.train_every = replay, train_batch, train_every
        self.learning_starts, self.ahead_steps = learning_starts, ahead_steps
        self.eps_start, self.eps_end, self.eps_decay = epsilon
        self.ranks, self.steps_before = ranks, steps_before  # all ranks' agent steps before this process
        self.life_loss_terminal = life_loss_terminal
        self.episodes = EpisodeTracker(replay.num_envs)
        self.rng = np.random.default_rng(seed)  # the learner's draws (the actor has its own generator)
        self.played = 0    # this rank's agent steps in this process
        self.taken = 0     # batches the learner has taken in this process
        self._counted = 0  # agent steps already handed to the trainer's frame count (with the batches)
        self._cond = threading.Condition()
        self.experience = self.feed = self
        self.configured_starts = learning_starts  # --learning-starts, before a loaded replay shortens it
        self.replay_save = False  # --replay-save end: save the shard when the process ends

    # ---- the trainer's side (ba3c.algos.base.Actor)
    @property
    def warmup_steps(self) -> int:
        return self.learning_starts

    def steps_played(self) -> int:
        return self.played

    def stats(self) -> dict[str, float]:
        return {"epsilon": self.epsilon()}  # the exploration schedule, beside the loss's statistics

    def describe(self) -> str:
        held = "an empty replay memory" if self.learning_starts == self.configured_starts else "a replay memory"
        return (f"ba3c: gorila: {held} of {self.replay.capacity:,} transitions per rank; each rank plays "
                f"{self.learning_starts:,} agent steps at epsilon {self.epsilon():.3g} before the first update, "
                f"then one update per {self.train_every} agent steps")

    def restore(self, run_dir: str, dist: Dist) -> None:
        """Every rank loads its saved shard (--replay-save end); all shorten their warm-up by the fewest
        transitions any rank loaded (the same on every rank, so that they agree on the run's last update)."""
        loaded, line = load_replay(self.replay, run_dir, dist.rank)
        if line:
            print(line, flush=True)
        counts = dist.gather(loaded)
        fewest = dist.broadcast_obj(min(counts) if counts is not None else None)
        if fewest:
            self.learning_starts = max(0, self.configured_starts - fewest)

    def finish(self, run_dir: str, rank: int, updates: int) -> str:
        return save_replay(self.replay, run_dir, rank, updates) if self.replay_save else ""

    # ---- the actor's side (simulation thread)
    def epsilon(self) -> float:
        """Now, from the agent steps of all ranks (this rank's times the ranks: they play in step)."""
        return epsilon_at(self.steps_before + self.played * self.ranks, self.eps_start, self.eps_end, self.eps_decay)

    def choose(self, q: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return epsilon_greedy_actions(q, self.epsilon(), rng)

    def add(self, b: Batch, values: np.ndarray, actions: np.ndarray, version: int = 0) -> tuple[list, list[Episode]]:
        """Record one predictor batch (the signature of BA3C's `Experience.add`); no train batches come out
        here: the learner samples them."""
        life_end = b.life_lost if (self.life_loss_terminal and b.life_lost is not None) else None
        self.replay.add(b.env_ids, b.obs, b.reward, b.terminated, b.truncated, life_end, actions, version)
        episodes, steps = self.episodes.add(b)
        with self._cond:
            self.played += steps
            self._cond.notify_all()
        return [], episodes

    def due(self, k: int) -> int:
        """Agent steps this rank must have played before the learner takes its k-th batch (k from 1)."""
        return self.learning_starts + k * self.train_every

    def hand_over(self, batches: list, stop: threading.Event) -> None:
        """Wait while the actor is more than `ahead_steps` beyond what the learner has taken (or until `stop`)."""
        with self._cond:
            while self.played >= self.due(self.taken) + self.ahead_steps and not stop.is_set():
                self._cond.wait(0.2)

    # ---- the learner's side
    def next_batch(self, timeout: float) -> ReplaySample | None:
        """The learner's next sample once the actor has played enough, or None after `timeout` seconds.

        Its `unsampled_steps` carries the agent steps played since the previous batch beyond the
        `train_every` the trainer counts per update (the warm-up with the first; afterwards the actor's lead
        coming and going), so that the trainer's frame count is what was played."""
        with self._cond:
            if not self._cond.wait_for(lambda: self.played >= self.due(self.taken + 1), timeout):
                return None
            self.taken += 1
            played = self.played
            self._cond.notify_all()
        batch = self.replay.sample(self.train_batch, self.rng)
        batch.unsampled_steps = played - self._counted - self.train_every
        self._counted = played
        return batch

    def discard_queued(self) -> int:
        return 0  # nothing is queued: batches are sampled when the learner asks


class TargetNetwork:
    """A copy of the Q-network that the TD target reads; replaced by the online weights every `every`
    updates (a hard copy: Nature DQN, CleanRL). Every rank copies at the same update, so the targets agree."""

    def __init__(self, model, target_model, every: int) -> None:
        import tensorflow as tf

        self.model, self.every = target_model, every
        pairs = list(zip(target_model.weights, model.weights))
        self._copy = tf.function(lambda: [t.assign(o) for t, o in pairs])
        self._copy()

    def after_update(self, updates: int) -> bool:
        """Copy when `updates` (the count after this update) is a multiple of `every`; True if it copied."""
        if updates % self.every:
            return False
        self._copy()
        return True


def huber(x, delta: float = 1.0):  # tf tensors in, out
    """0.5 x^2 within +-delta, linear beyond (Nature DQN's clipped error term: its gradient is clip(x, -1, 1))."""
    import tensorflow as tf

    a = tf.abs(x)
    return tf.where(a <= delta, 0.5 * tf.square(x), delta * (a - 0.5 * delta))


class DQNLoss:
    """The learner's loss in Gorila mode: one-step TD error against the target network.

    y = r + gamma (1 - done) Q_target(s', a'), a' = argmax_a Q_target(s', a) (DQN) or argmax_a Q(s', a)
    (Double DQN, van Hasselt et al. 2016); the loss is the batch mean of huber(y - Q(s, a)) (Nature DQN) or
    of (y - Q(s, a))^2 (CleanRL's F.mse_loss). y carries no gradient. Statistics: the loss, the mean Q(s, a),
    the mean |y - Q(s, a)| and the largest |Q(s, a)| over the batch's states and all actions (a few diverging
    states show there long before they move the mean: `value_bound`)."""

    names = ("td_loss", "q_mean", "td_abs_mean", "q_abs_max")

    def __init__(self, target: TargetNetwork, gamma: float, loss: str, double: bool) -> None:
        if loss not in ("huber", "mse"):
            raise ValueError(f"unknown DQN loss '{loss}'")
        self.target, self.gamma, self.kind, self.double = target, gamma, loss, double

    @staticmethod
    def inputs(batch: ReplaySample) -> tuple[np.ndarray, ...]:
        return batch.obs, batch.actions, batch.rewards, batch.next_obs, batch.dones

    def __call__(self, model, obs, actions, rewards, next_obs, dones) -> tuple[Any, Any]:
        """(loss, its three statistics), in graph."""
        import tensorflow as tf

        if self.double:  # one forward pass for s and s' (the trunk has no batch statistics)
            q_both, _ = model(tf.concat([obs, next_obs], 0), training=True)
            q, q_next_online = tf.split(q_both, 2)
        else:
            q, _ = model(obs, training=True)
        q_next_target, _ = self.target.model(next_obs, training=False)
        if self.double:
            best = tf.argmax(q_next_online, axis=-1, output_type=tf.int32)
            q_next = tf.gather(q_next_target, best, batch_dims=1)
        else:
            q_next = tf.reduce_max(q_next_target, axis=-1)
        y = tf.stop_gradient(rewards + self.gamma * (1.0 - dones) * q_next)
        q_taken = tf.gather(q, actions, batch_dims=1)
        td = y - q_taken
        loss = tf.reduce_mean(huber(td) if self.kind == "huber" else tf.square(td))
        return loss, tf.stack([loss, tf.reduce_mean(q_taken), tf.reduce_mean(tf.abs(td)), tf.reduce_max(tf.abs(q))])

    def after_update(self, updates: int) -> None:
        self.target.after_update(updates)

    def state_variables(self) -> list:
        """What a checkpoint and the start-up broadcast carry besides the network and Adam: the target's weights."""
        return list(self.target.model.weights)


# ---- the algorithm (ba3c.algos.base.Algorithm)

def value_bound(gamma: float, clipped_rewards: bool) -> float | None:
    """The most any state can be worth, |Q| <= sum_k gamma^k = 1 / (1 - gamma), when rewards are clipped to
    [-1, 1] (Atari games); None when rewards are not bounded by the trainer. A Q-network past it is diverging:
    the Breakout run with the Huber loss valued rare states at 143, 631 and 16,238 (bound 100) on its way
    from an evaluation of 69 to 18 (docs/gorila.md)."""
    return 1.0 / (1.0 - gamma) if clipped_rewards and gamma < 1.0 else None


def update_frames(cfg: Config, world_size: int, frames_per_step: int) -> tuple[int, int]:
    """(frames per update, frames played before the first update of a process) on `world_size` ranks: each
    update stands for --train-every agent steps of every rank; each process first plays --learning-starts."""
    g = cfg.gorila
    return g.train_every * world_size * frames_per_step, g.learning_starts * world_size * frames_per_step


def make_loss(cfg: Config, model, build_q) -> DQNLoss:
    """The DQN loss for `model`, with a target network made by `build_q()` (the same network, built again)."""
    g = cfg.gorila
    return DQNLoss(TargetNetwork(model, build_q(), g.target_every), cfg.learn.gamma, g.dqn_loss,
                   g.dqn_target == "double")


def make_actor(cfg: Config, sim: Simulator, clip_rewards: bool, ranks: int, steps_before: int,
               seed: int) -> GorilaActor:
    """The rank's actor with an empty replay memory (`steps_before`: the run's agent steps so far, all ranks).
    It may run --queue-batches predictor batches ahead of the learner."""
    s, g = cfg.sim, cfg.gorila
    replay = Replay(g.replay_size, sim.num_envs, sim.obs_shape, sim.obs_dtype, clip_rewards)
    actor = GorilaActor(replay, train_batch=cfg.learn.train_batch, train_every=g.train_every,
                        learning_starts=g.learning_starts, ahead_steps=cfg.run.queue_batches * s.predict_batch,
                        epsilon=(g.eps_start, g.eps_end, g.eps_decay_steps), ranks=ranks, steps_before=steps_before,
                        life_loss_terminal=s.life_loss == "terminal", seed=seed)
    actor.replay_save = g.replay_save == "end"
    return actor


class Gorila(Algorithm):
    """Every rank a Gorila bundle: an epsilon-greedy actor, its replay shard and a DQN learner (the options
    of the config's gorila group)."""

    name = "gorila"
    title = "Gorila"
    head = "q"
    option_group = "gorila"
    eval_policy = "egreedy"  # DQN's protocol, which Gorila used (epsilon 0.05)
    # CleanRL dqn_atari's Adam (lr 1e-4, epsilon 1e-8, PyTorch's default), batch 32 and no gradient clipping (as
    # CleanRL); the lr not scaled with the ranks (none measured); 8 synchronous simulators per rank (CleanRL plays
    # 1); no collapse guard (it watches a policy's entropy); DQN's evaluation (epsilon 0.05). docs/gorila.md. Adam's
    # betas are PyTorch's (0.9, 0.999), as Gorila was measured with, not BA3C's.
    defaults: ClassVar[dict[str, Any]] = dict(
        lr=1e-4, beta1=0.9, beta2=0.999, adam_eps=1e-8, train_batch=32, clip_norm=0.0, lr_scaling="none", num_envs=8,
        predict_batch=8, collapse_guard="off", eval_policy="egreedy")

    # a short warm-up and a replay of 0.7 GB on Atari: the steady state after it is the same (benchmarks.throughput)
    quick_start_flags = ("--learning-starts", "2000", "--replay-size", "100000")

    def check(self, cfg: Config) -> None:
        g, s, l, r = cfg.gorila, cfg.sim, cfg.learn, cfg.run
        # a stacked observation needs its 4 frames and its successor in one environment's stream of the replay
        if g.replay_size // s.num_envs < 6:
            raise ConfigError(f"--replay-size {g.replay_size} leaves {g.replay_size // s.num_envs} transitions to "
                              f"each of --num-envs {s.num_envs} simulators; use at least {6 * s.num_envs}")
        not_with = [("--collapse-guard", r.collapse_guard, "off", "the guard watches a policy's entropy, and a "
                     "Q-network has none"),
                    ("--rehearse-ranks", r.rehearse_ranks, 1, "a rehearsal of Gorila ranks is not built"),
                    ("--noise-scale-every", l.noise_scale_every, 0, "it measures BA3C's policy-gradient term"),
                    ("--decorrelate-steps", s.decorrelate_steps, 0, "an epsilon of 1 at the start already plays at "
                     "random")]
        for flag, value, want, why in not_with:
            if value != want:
                raise ConfigError(f"{flag} {value} does not go with --algo gorila ({why}); use {flag} {want}")

    def frames_per_update(self, cfg: Config, world_size: int, frames_per_step: int) -> int:
        return update_frames(cfg, world_size, frames_per_step)[0]

    def memory(self, cfg: Config, obs_shape: tuple[int, ...], itemsize: int) -> MemoryCost:
        """The replay memory, counted full at --replay-size."""
        slot = replay_bytes(1, obs_shape, itemsize)
        g = cfg.gorila
        return MemoryCost(g.replay_size * slot, "--replay-size", g.replay_size, slot, 6 * cfg.sim.num_envs,
                          "a replay memory")

    def value_bound(self, cfg: Config, clipped_rewards: bool) -> float | None:
        return value_bound(cfg.learn.gamma, clipped_rewards)

    def choose(self, out: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return epsilon_greedy_actions(out, 0.1, rng)

    def example_batch(self, cfg: Config, obs: np.ndarray, num_actions: int, rng: np.random.Generator) -> ReplaySample:
        n = len(obs)
        return ReplaySample(obs, rng.integers(num_actions, size=n, dtype=np.int32), np.zeros(n, np.float32),
                            obs.copy(), np.zeros(n, np.float32), np.zeros(n, np.int64))

    def make_loss(self, cfg: Config, model: Any, build_network: Any) -> DQNLoss:
        return make_loss(cfg, model, build_network)

    def make_actor(self, cfg: Config, ctx: ActorContext) -> GorilaActor:
        return make_actor(cfg, ctx.sim, ctx.clip_rewards, ctx.ranks, ctx.steps_before, ctx.seed)


# ---- the replay memory across a resume (--replay-save end)

def replay_dir(run_dir: str, rank: int) -> str:
    """Where rank `rank` keeps its saved replay shard: RUN_DIR/replay/rankR."""
    return os.path.join(run_dir, "replay", f"rank{rank}")


def save_replay(replay: Replay, run_dir: str, rank: int, updates: int) -> str:
    """Write this rank's replay for the next resume; returns the line to print. The new shard is written beside
    the old one and renamed over it only when complete, so a kill or a full disk part-way leaves the old shard
    (or none), never a torn one; a failure for want of room removes what it wrote and is reported, not raised."""
    final = replay_dir(run_dir, rank)
    tmp = f"{final}.tmp.{os.getpid()}"
    parent = os.path.dirname(final)
    need = replay.saved_bytes()
    os.makedirs(parent, exist_ok=True)
    for stale in os.listdir(parent):  # what an earlier save that was killed left behind
        if stale.startswith(f"rank{rank}.tmp.") or stale == f"rank{rank}.old":
            shutil.rmtree(os.path.join(parent, stale), ignore_errors=True)
    free = free_bytes(parent)
    if free is not None and free < need + (1 << 26):
        return (f"ba3c: gorila: replay memory not saved: it needs {fmt_bytes(need)} and {parent} has "
                f"{fmt_bytes(free)} free; the next resume refills it")
    t0 = time.monotonic()
    try:
        written = replay.save(tmp, {"updates": updates, "rank": rank})
        if os.path.exists(final):
            os.replace(final, f"{final}.old")
        os.replace(tmp, final)
        shutil.rmtree(f"{final}.old", ignore_errors=True)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):  # the old shard back in place, if the swap was cut between renames
            if not os.path.exists(final) and os.path.exists(f"{final}.old"):
                os.replace(f"{final}.old", final)
        if e.errno not in SPACE_ERRNOS:
            raise
        return f"ba3c: gorila: replay memory not saved ({e.strerror}: {parent}); the next resume refills it"
    return (f"ba3c: gorila: replay memory saved: {fmt_bytes(written)} in {time.monotonic() - t0:.0f} s -> "
            f"{final}")


def load_replay(replay: Replay, run_dir: str, rank: int) -> tuple[int, str]:
    """Fill `replay` from this rank's saved shard, if there is one that fits; returns the transitions loaded
    (0 if none) and the line to print (empty if nothing was saved)."""
    path = replay_dir(run_dir, rank)
    if not os.path.isdir(path):
        return 0, ""
    t0 = time.monotonic()
    try:
        n = replay.load(path)
    except (ValueError, OSError) as e:
        replay.clear()  # nothing of a load cut short may be sampled
        return 0, f"ba3c: gorila: rank {rank}: the saved replay memory in {path} was not loaded ({e}); refilling it"
    return n, f"ba3c: gorila: rank {rank}: {n:,} transitions loaded from {path} in {time.monotonic() - t0:.0f} s"
