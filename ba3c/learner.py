"""Loss, compiled train step, Adam, gradient clipping and the gradient exchange between ranks."""
from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ba3c.checkpoint import assign_arrays
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
    policy_lag: float    # mean over the batch of updates made since its actions were chosen


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
        # Where the lr schedule (warm-up) is: `updates`, except that a rollback takes it back with the weights
        # and Adam's state (a rollback into the warm-up must not meet fresh Adam moments with the full lr).
        self.lr_step = 0
        self.lr_scale = 1.0  # the collapse guard's cut after a rollback (ba3c.guard)
        self._pending: Future | None = None
        self._pool: ThreadPoolExecutor | None = None
        # How gradients are exchanged is decided here, once: inside the compiled step (Horovod),
        # on the host as one flat buffer (mpi4py), or not at all (one rank: skip the ~3 ms allreduce).
        in_graph = dist.graph_allreduce and dist.size > 1
        on_host = not dist.graph_allreduce and dist.size > 1
        average_in_graph = dist.graph_average if in_graph else list
        self._grads = tf.function(self._loss_and_grads)
        self._apply = tf.function(lambda grads: self._apply_grads(average_in_graph(list(grads))))
        self._average_on_host = self._average_host if on_host else list
        if cfg.exchange == "overlap":
            # one worker thread averages and applies update k while the caller computes k+1
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="ExchangeThread")
            self._update = self._update_overlapped
        elif on_host:
            self._update = self._update_host
        else:  # gradients, (in-graph) average, clipping and Adam as one compiled call
            self._fused = tf.function(lambda *batch: self._fused_step(average_in_graph, *batch))
            self._update = self._update_fused

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

    def _fused_step(self, average, obs, actions, returns, advantages):
        grads, losses = self._loss_and_grads(obs, actions, returns, advantages)
        return losses, self._apply_grads(average(list(grads)))

    # ---- host side
    def current_lr(self) -> float:
        if self.warmup <= 0:
            return self.base_lr * self.lr_scale
        return self.base_lr * self.lr_scale * min(1.0, (self.lr_step + 1) / self.warmup)

    def train(self, batch: TrainBatch) -> StepStats:
        t0 = time.perf_counter()
        lag = float(self.updates - batch.versions.mean())
        tf = self._tf
        args = (tf.constant(batch.obs), tf.constant(batch.actions), tf.constant(batch.returns),
                tf.constant(batch.advantages))
        losses, norm, exchange_s = self._update(args)
        pl, vl, ent = (float(x) for x in losses.numpy())
        self.updates += 1
        self.lr_step += 1
        return StepStats(pl, vl, ent, float(norm), time.perf_counter() - t0, exchange_s, lag)

    # One of these is `_update`: (batch tensors) -> (losses, gradient norm, exposed host exchange seconds).
    def _update_fused(self, args: tuple) -> tuple:
        self.opt.learning_rate.assign(self.current_lr())
        losses, norm = self._fused(*args)
        return losses, norm, 0.0

    def _update_host(self, args: tuple) -> tuple:
        self.opt.learning_rate.assign(self.current_lr())
        grads, losses = self._grads(*args)
        t1 = time.perf_counter()
        grads = self._average_host(grads)
        exchange_s = time.perf_counter() - t1
        return losses, self._apply(grads), exchange_s

    def _update_overlapped(self, args: tuple) -> tuple:
        grads, losses = self._grads(*args)  # runs while the previous update is exchanged and applied
        t1 = time.perf_counter()
        norm = self.flush()
        exchange_s = time.perf_counter() - t1  # exchange time not hidden behind this gradient computation
        self.opt.learning_rate.assign(self.current_lr())
        self._pending = self._pool.submit(self._exchange_apply, list(grads))
        return losses, norm, exchange_s

    def _exchange_apply(self, grads: list) -> float:
        return float(self._apply(self._average_on_host(grads)))

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

    def load_state_arrays(self, arrays: list[np.ndarray], source: str = "checkpoint") -> None:
        self.flush()  # an overlapped update still in flight must not land on top of the restored state
        assign_arrays(list(self.model.weights) + list(self.opt.variables), arrays, f"{source} (weights and Adam state)")

    def broadcast_from_root(self) -> None:
        """Every rank takes rank 0's weights and optimizer state (start and resume)."""
        if self.dist.size > 1:
            self.load_state_arrays(self.dist.broadcast_arrays(self.state_arrays()), "rank 0's broadcast")

    def weights_checksum(self) -> float:
        self.flush()
        return float(sum(np.sum(np.asarray(v.numpy(), np.float64)) for v in self.model.weights))
