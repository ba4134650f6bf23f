"""Loss, compiled train step, Adam, gradient clipping and the gradient exchange between ranks."""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ba3c.config import LearnConfig
from ba3c.dist import Dist
from ba3c.experience import TrainBatch


@dataclass
class StepStats:
    policy_loss: float
    value_loss: float
    entropy: float
    grad_norm: float
    train_s: float       # whole update, wall time
    allreduce_s: float   # host-side exchange (mpi backend); 0 where it runs inside the graph


def _clip(tf, grads: list, mode: str, threshold: float) -> tuple[list, object]:
    norm = tf.linalg.global_norm(grads)
    if threshold <= 0:
        return grads, norm
    if mode == "global":
        clipped, _ = tf.clip_by_global_norm(grads, threshold, use_norm=norm)
        return clipped, norm
    # "avg": each tensor scaled so that its l2 norm / element count is at most threshold (paper)
    out = []
    for g in grads:
        avg = tf.norm(g) / tf.cast(tf.size(g), g.dtype)
        out.append(g * tf.minimum(1.0, threshold / tf.maximum(avg, 1e-12)))
    return out, norm


class Learner:
    """Owns the optimizer; `train(batch)` makes one synchronous update on every rank."""

    def __init__(self, model, cfg: LearnConfig, dist: Dist, lr: float, warmup_updates: int) -> None:
        import keras
        import tensorflow as tf

        self._tf = tf
        self.model, self.cfg, self.dist = model, cfg, dist
        self.base_lr, self.warmup = lr, warmup_updates
        self.opt = keras.optimizers.Adam(learning_rate=lr, beta_1=cfg.beta1, beta_2=cfg.beta2, epsilon=cfg.adam_eps)
        self.opt.build(model.trainable_variables)
        self.updates = 0
        exchange_in_graph = dist.graph_allreduce and dist.size > 1  # one rank: skip the ~3 ms allreduce
        self._fused = tf.function(lambda o, a, r, adv: self._step(o, a, r, adv, exchange_in_graph), jit_compile=False)
        self._grads = tf.function(self._loss_and_grads)
        self._apply = tf.function(self._apply_grads)
        self._exchange_apply_graph = tf.function(lambda gs: self._apply_grads(self.dist.graph_average(list(gs))))
        # overlap mode: one worker thread averages and applies update k while the caller computes k+1
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ExchangeThread") if cfg.exchange == "overlap" else None
        self._pending: Future | None = None

    # ---- graph pieces
    def _loss_and_grads(self, obs, actions, returns, advantages):
        tf = self._tf
        with tf.GradientTape() as tape:
            logits, value = self.model(obs, training=True)
            value = tf.squeeze(value, -1)
            logp = tf.nn.log_softmax(logits)
            logp_a = tf.gather(logp, actions, batch_dims=1)
            policy_loss = -tf.reduce_mean(logp_a * advantages)
            value_loss = 0.5 * tf.reduce_mean(tf.square(returns - value))
            entropy = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp) * logp, -1))
            loss = policy_loss + self.cfg.value_coef * value_loss - self.cfg.entropy_coef * entropy
        grads = tape.gradient(loss, self.model.trainable_variables)
        return grads, tf.stack([policy_loss, value_loss, entropy])

    def _apply_grads(self, grads):
        clipped, norm = _clip(self._tf, list(grads), self.cfg.clip_mode, self.cfg.clip_norm)
        self.opt.apply_gradients(zip(clipped, self.model.trainable_variables))
        return norm

    def _step(self, obs, actions, returns, advantages, exchange: bool):
        grads, losses = self._loss_and_grads(obs, actions, returns, advantages)
        if exchange:
            grads = self.dist.graph_average(list(grads))
        return losses, self._apply_grads(grads)

    # ---- host side
    def current_lr(self) -> float:
        if self.warmup <= 0:
            return self.base_lr
        return self.base_lr * min(1.0, (self.updates + 1) / self.warmup)

    def train(self, batch: TrainBatch) -> StepStats:
        tf = self._tf
        t0 = time.perf_counter()
        args = (tf.constant(batch.obs), tf.constant(batch.actions), tf.constant(batch.returns),
                tf.constant(batch.advantages))
        ex_s = 0.0
        if self._pool is not None:
            grads, losses = self._grads(*args)  # runs while the previous update is exchanged and applied
            t1 = time.perf_counter()
            norm = self.flush()
            ex_s = time.perf_counter() - t1  # exchange time not hidden behind this gradient computation
            self.opt.learning_rate.assign(self.current_lr())
            self._pending = self._pool.submit(self._exchange_apply, list(grads))
        elif self.dist.size == 1 or self.dist.graph_allreduce:
            self.opt.learning_rate.assign(self.current_lr())
            losses, norm = self._fused(*args)
        else:
            self.opt.learning_rate.assign(self.current_lr())
            grads, losses = self._grads(*args)
            t1 = time.perf_counter()
            grads = self._average_host(grads)
            ex_s = time.perf_counter() - t1
            norm = self._apply(grads)
        pl, vl, ent = (float(x) for x in losses.numpy())
        self.updates += 1
        return StepStats(pl, vl, ent, float(norm), time.perf_counter() - t0, ex_s)

    def _average_host(self, grads: list) -> list:
        """mpi4py path: one flattened float32 buffer, allreduced in place."""
        tf = self._tf
        shapes = [g.shape for g in grads]
        flat = self.dist.average_flat(np.concatenate([g.numpy().ravel() for g in grads]))
        out, i = [], 0
        for s in shapes:
            n = int(np.prod(s))
            out.append(tf.constant(flat[i:i + n].reshape(s)))
            i += n
        return out

    def _exchange_apply(self, grads: list) -> float:
        if self.dist.size == 1:
            return float(self._apply(grads))
        if self.dist.graph_allreduce:
            return float(self._exchange_apply_graph(grads))
        return float(self._apply(self._average_host(grads)))

    def flush(self) -> float:
        """Wait for an update still being exchanged (overlap mode); returns its gradient norm."""
        if self._pending is None:
            return 0.0
        norm, self._pending = self._pending.result(), None
        return norm

    # ---- state for checkpoints and the start-up broadcast
    def state_arrays(self) -> list[np.ndarray]:
        self.flush()
        return [np.asarray(v.numpy()) for v in self.model.weights] + [np.asarray(v.numpy()) for v in self.opt.variables]

    def load_state_arrays(self, arrays: list[np.ndarray]) -> None:
        targets = list(self.model.weights) + list(self.opt.variables)
        if len(arrays) != len(targets):
            raise ValueError(f"checkpoint holds {len(arrays)} arrays, this model and optimizer need {len(targets)}")
        for v, a in zip(targets, arrays):
            if tuple(v.shape) != tuple(a.shape):
                raise ValueError(f"checkpoint array for {v.path} has shape {a.shape}, model needs {tuple(v.shape)}")
            v.assign(a)

    def broadcast_from_root(self) -> None:
        """Every rank takes rank 0's weights and optimizer state (start and resume)."""
        if self.dist.size > 1:
            self.load_state_arrays(self.dist.broadcast_arrays(self.state_arrays()))

    def weights_checksum(self) -> float:
        self.flush()
        return float(sum(np.sum(np.asarray(v.numpy(), np.float64)) for v in self.model.weights))
