"""Per-environment n-step buffers, bootstrapped returns and advantages, and batch assembly.

Pure numpy. Fed one predictor batch at a time (a simulator `Batch`: observations with the
reward/termination of the step that produced them, plus the value and action the predictor
chose for them). Each
environment keeps up to `n_step` transitions; a segment is flushed when it is full (bootstrap
from the value of the next observation), on termination (bootstrap 0) or on truncation
(bootstrap from the value of the final observation, which is a real state, not a terminal one).

With `life_loss_terminal`, a lost life (`Batch.life_lost`) ends the segment like a termination
(bootstrap 0) while the game goes on: the observation that lost the life takes no trained action
(the simulator answers it with FIRE where the game has one), and the step after it counts in the
game's score and length but in no return. Episodes, and their statistics, stay full games. Such
steps are played all the same: each train batch says how many of them came before it
(`TrainBatch.unsampled_steps`), so that the trainer's frame count includes them.

`start_mid_game` is for simulators that played before their first recorded batch (the random steps
that put games out of step): those steps are counted the same way, and the games under way, seen
only in part, are not reported as episodes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ba3c.simulators import Batch


@dataclass
class TrainBatch:
    obs: np.ndarray
    actions: np.ndarray     # int32
    returns: np.ndarray     # float32 bootstrapped n-step returns
    advantages: np.ndarray  # float32 returns - value at acting time
    # int64 learner updates made when each action was chosen (policy lag = now - this); synthetic batches: 0
    versions: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    # agent steps played since the previous train batch that no sample holds (the FIRE step after a lost
    # life with life_loss_terminal): emulator frames the trainer counts along with this batch's
    unsampled_steps: int = 0


@dataclass
class Episode:
    env_id: int
    score: float   # raw (unclipped) game score
    length: int    # agent steps
    truncated: bool


def nstep_returns(rewards: np.ndarray, bootstrap: float, gamma: float) -> np.ndarray:
    """R_k = r_k + gamma * R_{k+1}, R_m = bootstrap, for one segment of m rewards."""
    out = np.empty(len(rewards), np.float32)
    acc = float(bootstrap)
    for k in range(len(rewards) - 1, -1, -1):
        acc = float(rewards[k]) + gamma * acc
        out[k] = acc
    return out


@dataclass
class _EnvBuffer:
    obs: list = field(default_factory=list)
    actions: list = field(default_factory=list)
    values: list = field(default_factory=list)
    versions: list = field(default_factory=list)
    rewards: list = field(default_factory=list)
    resetting: bool = True  # the next obs starts an episode (the first one, or after an episode's last obs)
    partial: bool = False   # the game under way began before recording: not reported when it ends
    score: float = 0.0
    length: int = 0


class Experience:
    """Turns the stream of predictor batches into fixed-size training batches."""

    def __init__(self, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: np.dtype, n_step: int,
                 gamma: float, train_batch: int, clip_rewards: bool, life_loss_terminal: bool = False) -> None:
        self.n_step, self.gamma, self.train_batch, self.clip_rewards = n_step, gamma, train_batch, clip_rewards
        self.life_loss_terminal = life_loss_terminal
        self._bufs = [_EnvBuffer() for _ in range(num_envs)]
        self._obs = np.empty((train_batch, *obs_shape), obs_dtype)
        self._act = np.empty(train_batch, np.int32)
        self._ret = np.empty(train_batch, np.float32)
        self._adv = np.empty(train_batch, np.float32)
        self._ver = np.empty(train_batch, np.int64)
        self._fill = 0
        self._unsampled = 0  # steps played since the last train batch that no sample holds

    def start_mid_game(self, steps_played: int) -> None:
        """Before the first `add`: every environment has played `steps_played` steps in all (not recorded),
        and the games under way began then."""
        for b in self._bufs:
            b.partial = True
        self._unsampled += steps_played

    def add(self, batch: Batch, values: np.ndarray, actions: np.ndarray,
            version: int = 0) -> tuple[list[TrainBatch], list[Episode]]:
        """Record one predictor batch and the predictor's values and actions for it (chosen by the
        policy after `version` updates); return the training batches and episodes it completed."""
        obs, rewards, terminated, truncated = batch.obs, batch.reward, batch.terminated, batch.truncated
        life_end = batch.life_lost if (self.life_loss_terminal and batch.life_lost is not None) \
            else np.zeros(len(batch.env_ids), bool)
        batches: list[TrainBatch] = []
        episodes: list[Episode] = []
        for j, e in enumerate(batch.env_ids):
            b = self._bufs[int(e)]
            if b.resetting:  # this obs opens a new episode; its reward belongs to no action of ours
                b.resetting = False
            else:
                r = float(rewards[j])
                b.score += r
                b.length += 1
                if b.obs:
                    b.rewards.append(np.sign(r) if self.clip_rewards else r)
                else:  # the step after a lost life: the game's, but no trained action's
                    self._unsampled += 1
            if terminated[j] or truncated[j]:
                boot = 0.0 if (terminated[j] or life_end[j]) else float(values[j])
                self._flush(b, boot, batches)
                if not b.partial:
                    episodes.append(Episode(int(e), b.score, b.length, bool(truncated[j] and not terminated[j])))
                b.score, b.length, b.resetting, b.partial = 0.0, 0, True, False
                continue
            if life_end[j]:  # the return ends here; the game, its score and its length go on
                self._flush(b, 0.0, batches)
                continue
            if len(b.rewards) == self.n_step:
                self._flush(b, float(values[j]), batches)
            b.obs.append(obs[j].copy())
            b.actions.append(int(actions[j]))
            b.values.append(float(values[j]))
            b.versions.append(version)
        return batches, episodes

    def _flush(self, b: _EnvBuffer, bootstrap: float, out: list[TrainBatch]) -> None:
        m = len(b.rewards)  # transitions whose reward is known (all of them, at a flush)
        if m:
            rets = nstep_returns(np.asarray(b.rewards, np.float32), bootstrap, self.gamma)
            for k in range(m):
                i = self._fill
                self._obs[i] = b.obs[k]
                self._act[i] = b.actions[k]
                self._ret[i] = rets[k]
                self._adv[i] = rets[k] - b.values[k]
                self._ver[i] = b.versions[k]
                self._fill += 1
                if self._fill == self.train_batch:
                    out.append(TrainBatch(self._obs.copy(), self._act.copy(), self._ret.copy(),
                                          self._adv.copy(), self._ver.copy(), self._unsampled))
                    self._fill = self._unsampled = 0
        for part in (b.obs, b.actions, b.values, b.versions, b.rewards):
            part.clear()
