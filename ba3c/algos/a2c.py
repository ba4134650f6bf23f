"""BA3C (Adamski et al. 2018, arXiv 1801.02852): Batch A3C, the synchronous batched actor-critic.

The actor samples its policy and turns each environment's steps into n-step returns and advantages
(`ba3c.experience.Experience`), queued as train batches; the loss is the policy gradient with a value
baseline and an entropy bonus (`A2CLoss`). Every option it reads is a shared one (the learn group's).

No TensorFlow at import time: the loss imports it when called.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ba3c.algos.base import Actor, ActorContext, Algorithm
from ba3c.config import LearnConfig
from ba3c.experience import Experience, TrainBatch

if TYPE_CHECKING:
    from ba3c.config import Config


class A2CLoss:
    """BA3C's loss: policy gradient + value_coef x value regression - entropy_coef x entropy, on n-step returns.

    The interface every algorithm's loss has (ba3c.algos.base): `names` (its statistics), `inputs(batch)`,
    `__call__(model, *inputs)` (in graph: the loss and its statistics), `after_update(updates)` and
    `state_variables()`. `terms` is its own: --noise-scale-every measures the policy-gradient term alone."""

    names = ("policy_loss", "value_loss", "entropy")

    def __init__(self, cfg: LearnConfig) -> None:
        self.value_coef, self.entropy_coef = cfg.value_coef, cfg.entropy_coef

    @staticmethod
    def inputs(batch: TrainBatch) -> tuple[np.ndarray, ...]:
        return batch.obs, batch.actions, batch.returns, batch.advantages

    @staticmethod
    def terms(model, obs, actions, returns, advantages) -> tuple[Any, Any, Any]:
        """The loss's terms on a batch: policy gradient, value regression, entropy."""
        import tensorflow as tf

        logits, value = model(obs, training=True)
        logp = tf.nn.log_softmax(logits)
        policy_loss = -tf.reduce_mean(tf.gather(logp, actions, batch_dims=1) * advantages)
        value_loss = 0.5 * tf.reduce_mean(tf.square(returns - tf.squeeze(value, -1)))
        entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp) * logp, -1))
        return policy_loss, value_loss, entropy

    def __call__(self, model, *inputs) -> tuple[Any, Any]:
        import tensorflow as tf

        policy_loss, value_loss, entropy = self.terms(model, *inputs)
        loss = policy_loss + self.value_coef * value_loss - self.entropy_coef * entropy
        return loss, tf.stack([policy_loss, value_loss, entropy])

    def after_update(self, updates: int) -> None:
        pass

    def state_variables(self) -> list:
        return []


class NStepActor(Actor):
    """Actions sampled from the policy into n-step returns; the simulation thread queues the train batches."""

    def __init__(self, experience: Experience, decorrelate_steps: int) -> None:
        self.experience, self.decorrelate_steps = experience, decorrelate_steps


class BA3C(Algorithm):
    name = "ba3c"
    eval_policy = "paper"  # the BA3C authors' protocol
    policy_gradient = True
    defaults: ClassVar[dict[str, Any]] = {}

    def make_loss(self, cfg: Config, model: Any, build_network: Any) -> A2CLoss:
        return A2CLoss(cfg.learn)

    def make_actor(self, cfg: Config, ctx: ActorContext) -> NStepActor:
        s, l, sim = cfg.sim, cfg.learn, ctx.sim
        exp = Experience(sim.num_envs, sim.obs_shape, sim.obs_dtype, l.n_step, l.gamma,
                         l.train_batch * cfg.run.rehearse_ranks, clip_rewards=ctx.clip_rewards,
                         life_loss_terminal=s.life_loss == "terminal")
        return NStepActor(exp, s.decorrelate_steps)
