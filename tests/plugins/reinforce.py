"""A third algorithm from outside the package, in one file: REINFORCE with a learned value baseline
(Williams 1992; Sutton & Barto 2018, section 13.4).

Each environment's steps are kept until its episode ends; then every step gets its Monte Carlo return G_t
(bootstrapped from the value only where the episode was cut short), and the loss is
-log pi(a_t | s_t) (G_t - V(s_t)) + value_coef x (G_t - V(s_t))^2 / 2 - entropy_coef x entropy, with the
baseline V(s_t) of the current weights, held out of the policy gradient.

Found by its import path: `python -m ba3c.train --algo tests.plugins.reinforce:Reinforce` (from the repository
root), or `ba3c.algos.register("reinforce", Reinforce)` in a library caller.
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ba3c.algos import Actor, ActorContext, Algorithm
from ba3c.config import Config
from ba3c.experience import Experience, TrainBatch

WHOLE_EPISODES = 2**31 - 1  # an n-step horizon no episode reaches: returns run to the episode's end


class ReinforceLoss:
    names = ("pg_loss", "baseline_loss", "entropy")  # progress.csv columns; `entropy` feeds the collapse guard

    def __init__(self, value_coef: float, entropy_coef: float) -> None:
        self.value_coef, self.entropy_coef = value_coef, entropy_coef

    @staticmethod
    def inputs(batch: TrainBatch) -> tuple[np.ndarray, ...]:
        return batch.obs, batch.actions, batch.returns

    def __call__(self, model, obs, actions, returns) -> tuple[Any, Any]:
        import tensorflow as tf

        logits, value = model(obs, training=True)
        value = tf.squeeze(value, -1)
        logp = tf.nn.log_softmax(logits)
        advantage = tf.stop_gradient(returns - value)
        pg_loss = -tf.reduce_mean(tf.gather(logp, actions, batch_dims=1) * advantage)
        baseline_loss = 0.5 * tf.reduce_mean(tf.square(returns - value))
        entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp) * logp, -1))
        loss = pg_loss + self.value_coef * baseline_loss - self.entropy_coef * entropy
        return loss, tf.stack([pg_loss, baseline_loss, entropy])

    def after_update(self, updates: int) -> None:
        pass

    def state_variables(self) -> list:
        return []


class EpisodeActor(Actor):
    """Samples the policy; whole episodes become train batches of Monte Carlo returns (the trainer's queue)."""

    def __init__(self, experience: Experience) -> None:
        self.experience = experience


class Reinforce(Algorithm):
    name = "reinforce"
    title = "REINFORCE"
    eval_policy = "sampled"  # a stochastic policy is evaluated as it acts
    defaults: ClassVar[dict[str, Any]] = dict(lr_scaling="none", entropy_coef=0.001)

    def make_loss(self, cfg: Config, model: Any, build_network: Any) -> ReinforceLoss:
        return ReinforceLoss(cfg.learn.value_coef, cfg.learn.entropy_coef)

    def make_actor(self, cfg: Config, ctx: ActorContext) -> EpisodeActor:
        sim = ctx.sim
        return EpisodeActor(Experience(sim.num_envs, sim.obs_shape, sim.obs_dtype, WHOLE_EPISODES, cfg.learn.gamma,
                                       cfg.learn.train_batch * cfg.run.rehearse_ranks, ctx.clip_rewards,
                                       life_loss_terminal=cfg.sim.life_loss == "terminal"))
