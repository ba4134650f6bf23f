"""Compiled train step, Adam, gradient clipping and the gradient exchange between ranks.

The loss is the algorithm's (`Algorithm.make_loss`, ba3c.algos); everything else in an update (the compiled
fused step, the exchange, clipping, the optimizer, the state that checkpoints and the start-up broadcast
carry) is shared.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from ba3c.checkpoint import assign_arrays
from ba3c.config import LearnConfig
from ba3c.dist import Dist


@dataclass
class StepStats:
    terms: dict[str, float]  # the loss's statistics by name (its `names`), the actor's: progress.csv columns
    grad_norm: float
    train_s: float       # whole update, wall time
    allreduce_s: float   # exposed exchange: the part of the update spent waiting for averaged gradients after
                         # the local ones were ready (in the graph: between two timestamps; host: the call)
    policy_lag: float    # mean over the batch of updates made since its actions were chosen
    # --noise-scale-every, at the updates that measured it (else nan / 0): the mean squared norm of the sub-batches'
    # gradients and the squared norm of their mean (the batch's gradient), averaged over ranks, for the whole loss
    # and for its policy-gradient term alone (pg_*), and the two batch sizes
    grad_sq_small: float = float("nan")
    grad_sq_big: float = float("nan")
    pg_sq_small: float = float("nan")
    pg_sq_big: float = float("nan")
    b_small: int = 0
    b_big: int = 0

    @property
    def entropy(self) -> float:
        """The policy entropy the collapse guard watches (nan for a loss without a policy)."""
        return self.terms.get("entropy", float("nan"))


def noise_scale(grad_sq_small: float, grad_sq_big: float, b_small: int, b_big: int) -> tuple[float, float, float]:
    """Unbiased estimates (McCandlish et al. 2018, appendix A.1) from E|G_B|^2 = |G|^2 + tr(Sigma) / B measured at
    two batch sizes: the true gradient's squared norm |G|^2, the per-sample gradient variance tr(Sigma), and the
    simple noise scale B_simple = tr(Sigma) / |G|^2 (nan where |G|^2 is not positive). Average the first two over
    many measurements before dividing: each single estimate is noisy, |G|^2 can come out negative."""
    g2 = (b_big * grad_sq_big - b_small * grad_sq_small) / (b_big - b_small)
    trace = (grad_sq_small - grad_sq_big) / (1.0 / b_small - 1.0 / b_big)
    return g2, trace, (trace / g2 if g2 > 0 else float("nan"))


def _clip(tf, grads: list, mode: str, threshold: float) -> tuple[list, object]:
    """The clipped gradients and the global norm before clipping."""
    half_sq = [tf.nn.l2_loss(g) for g in grads]  # sum(g^2) / 2: one pass over each gradient, one kernel
    norm = tf.sqrt(2.0 * tf.reduce_sum(tf.stack(half_sq)))  # tf.linalg.global_norm(grads), as it computes it
    if threshold <= 0:
        return grads, norm
    if mode == "global":
        clipped, _ = tf.clip_by_global_norm(grads, threshold, use_norm=norm)
        return clipped, norm
    # "avg": each tensor scaled so that its l2 norm / element count is at most threshold (paper). The norms come
    # from the sums above (not a second pass), and the rescaling pass over the 1.7 M parameters is made only when
    # some tensor's clip is active, under one tf.cond: 0.77-0.90x the update's time at batch 1 (clip active /
    # inactive; docs/results/scaling.md). A cond per tensor was slower; in "global" mode a cond measured no gain.
    factors = [tf.minimum(1.0, threshold / tf.maximum(tf.sqrt(2.0 * h) / tf.cast(tf.size(g), g.dtype), 1e-12))
               for g, h in zip(grads, half_sq)]
    active = tf.reduce_any(tf.stack(factors) < 1.0)
    return tf.cond(active, lambda: [g * f for g, f in zip(grads, factors)], lambda: list(grads)), norm


def _packed(tf, losses, norm, exposed):
    """The fused step's outputs as one float64 vector (the loss's statistics, the gradient norm, the exposed
    exchange seconds): one read back to the host per update instead of three."""
    return tf.concat([tf.cast(losses, tf.float64), tf.stack([tf.cast(norm, tf.float64), exposed])], 0)


class Learner:
    """Owns the optimizer; `train(batch)` makes one synchronous update on every rank."""

    def __init__(self, model, cfg: LearnConfig, dist: Dist, lr: float, warmup_updates: int,
                 noise_sub_batch: int = 0, loss: Any = None) -> None:
        import keras
        import tensorflow as tf

        self._tf = tf
        self.model, self.cfg, self.dist = model, cfg, dist
        if loss is None:  # callers that time an update (benchmarks, tests) get BA3C's loss
            from ba3c.algos.a2c import A2CLoss

            loss = A2CLoss(cfg)
        self.loss = loss  # the algorithm's (ba3c.algos.base: names, inputs, __call__, after_update, state_variables)
        self.base_lr, self.warmup = lr, warmup_updates
        self.opt = keras.optimizers.Adam(learning_rate=lr, beta_1=cfg.beta1, beta_2=cfg.beta2, epsilon=cfg.adam_eps)
        self.opt.build(model.trainable_variables)
        self.updates = 0
        # Where the lr schedule (warm-up) is: `updates`, except that a rollback takes it back with the weights
        # and Adam's state (a rollback into the warm-up must not meet fresh Adam moments with the full lr).
        self.lr_step = 0
        self.lr_scale = 1.0  # the collapse guard's cut after a rollback (ba3c.guard)
        self.noise_sub_batch = noise_sub_batch  # --noise-scale-every's small batch (ba3c.config.noise_sub_batch)
        self._lr_assigned: float | None = None  # the value last assigned to Adam's lr variable (None: unknown)
        # How gradients are exchanged is decided here, once: inside the compiled step (per gradient,
        # each started during backprop, or Horovod's one grouped op after it), on the host as one
        # flat buffer (mpi4py, grouped), or not at all (one rank: skip the ~3 ms allreduce).
        per_tensor, compression = cfg.allreduce == "per-tensor", cfg.compression
        in_graph = dist.size > 1 and dist.averages_in_graph(per_tensor)
        on_host = dist.size > 1 and not in_graph
        average_in_graph = (lambda ts: dist.graph_average(ts, per_tensor, compression)) if in_graph else list
        # Per-tensor exchange during backprop: the largest gradient (the Nature CNN's dense layer, 95%
        # of the bytes) and the layers after it are computed first, in a backprop pass of their own;
        # the rest of backprop (the convolutions, most of the compute) waits for them. Left to itself,
        # TensorFlow's executor sometimes computes the dense layer's weight gradient only after the
        # convolutions' (seen in the Horovod timeline), leaving nothing to overlap.
        sizes = [int(np.prod(v.shape)) for v in model.trainable_variables]
        self._late_from = int(np.argmax(sizes)) if in_graph and per_tensor else None
        self._grads = tf.function(self._loss_and_grads)
        self._split_grads = tf.function(self._split_grads_graph)
        self._apply = tf.function(lambda grads: self._apply_grads(average_in_graph(list(grads))))
        if on_host:
            self._update = self._update_host
        else:  # gradients, (in-graph) average, clipping and Adam as one compiled call
            self._fused = tf.function(lambda *batch: _packed(tf, *self._fused_step(average_in_graph, in_graph, *batch)))
            self._fused_graphs: dict[tuple, Any] = {}  # its concrete functions by the inputs' types (_fused_for)
            self._update = self._update_fused

    # ---- graph pieces
    def _loss_and_grads(self, *inputs):
        tf = self._tf
        k = self._late_from
        with tf.GradientTape(persistent=k is not None) as tape:
            loss, stats = self.loss(self.model, *inputs)
        variables = self.model.trainable_variables
        if k is None or k == 0:
            grads = tape.gradient(loss, variables)
        else:  # backprop from the loss to the largest variable first, then (after it) to the first layers
            late = tape.gradient(loss, variables[k:])
            with tf.control_dependencies(late):
                grads = tape.gradient(loss, variables[:k]) + late
        return grads, stats

    def _apply_grads(self, grads):
        clipped, norm = _clip(self._tf, list(grads), self.cfg.clip_mode, self.cfg.clip_norm)
        self._adam(clipped)
        return norm

    def _adam(self, grads: list) -> None:
        """keras.optimizers.Adam's update (amsgrad off) made by TensorFlow's fused kernel, one ResourceApplyAdam
        per weight, on the Keras optimizer's own variables (step count, lr, each weight's momentum and velocity),
        so that checkpoints keep their layout. Keras 3 runs about a dozen small ops per weight; the fused kernel
        takes half the time (Nature CNN, one core: ~3 against ~6.5 ms; docs/results/scaling.md). Both compute,
        with t = iterations + 1: m += (g - m)(1 - b1), v += (g^2 - v)(1 - b2),
        w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps); tests/unit/test_adam.py: equal to Keras's update to
        float32 rounding (the kernel forms 1 - b in float32, Keras in double)."""
        tf, opt = self._tf, self.opt
        t = tf.cast(opt.iterations + 1, tf.float32)
        b1, b2 = tf.constant(opt.beta_1, tf.float32), tf.constant(opt.beta_2, tf.float32)
        lr, eps = tf.convert_to_tensor(opt.learning_rate), tf.constant(opt.epsilon, tf.float32)
        b1_t, b2_t = tf.pow(b1, t), tf.pow(b2, t)
        applied = [tf.raw_ops.ResourceApplyAdam(var=w.handle, m=m.handle, v=v.handle, beta1_power=b1_t,
                                                beta2_power=b2_t, lr=lr, beta1=b1, beta2=b2, epsilon=eps, grad=g)
                   for g, w, m, v in zip(grads, self.model.trainable_variables, opt._momentums, opt._velocities)]
        with tf.control_dependencies(applied):
            opt.iterations.assign_add(1)

    def _fused_step(self, average, exchanges: bool, *inputs):
        tf = self._tf
        grads, losses = self._loss_and_grads(*inputs)
        if not exchanges:
            norm, exposed = self._apply_grads(average(list(grads))), tf.constant(0.0, tf.float64)
        else:
            # Two clock readings bracket the exchange's exposed part: after the last local gradient
            # (backprop done) and after the last averaged one. Only control edges: nothing waits on them.
            with tf.control_dependencies(grads):
                t_local = tf.timestamp()
            averaged = average(list(grads))
            with tf.control_dependencies(averaged):
                t_averaged = tf.timestamp()
            norm, exposed = self._apply_grads(averaged), t_averaged - t_local
        return losses, norm, exposed

    # ---- host side
    def current_lr(self) -> float:
        lr = self.base_lr * self.lr_scale
        if self.warmup <= 0:
            return lr
        return lr * min(1.0, (self.lr_step + 1) / self.warmup)

    def _set_lr(self) -> None:
        """Adam's lr variable takes current_lr() when that changed (an eager assign is ~0.1 ms per update)."""
        lr = self.current_lr()
        if lr != self._lr_assigned:
            self.opt.learning_rate.assign(lr)
            self._lr_assigned = lr

    def train(self, batch: Any) -> StepStats:
        """One update on `batch` (what the loss's `inputs` takes: a TrainBatch, a replay sample)."""
        t0 = time.perf_counter()
        lag = float(self.updates - batch.versions.mean())
        tf = self._tf
        args = tuple(tf.constant(a) for a in self.loss.inputs(batch))
        every = self.cfg.noise_scale_every
        noise = self._gradient_noise(args) if every and self.updates % every == 0 else (float("nan"),) * 4 + (0, 0)
        losses, norm, exchange_s = self._update(args)
        terms = dict(zip(self.loss.names, (float(x) for x in np.asarray(losses))))
        self.updates += 1
        self.lr_step += 1
        self.loss.after_update(self.updates)  # a target network's copy, at the same update on every rank
        return StepStats(terms, float(norm), time.perf_counter() - t0, exchange_s, lag, *noise)

    def _gradient_noise(self, args: tuple) -> tuple[float, float, float, float, int, int]:
        """Squared gradient norms at the current weights (before this update): the mean over the batch's
        consecutive sub-batches of |G_small|^2, and |G_big|^2 of their mean, the batch's own gradient
        (the loss is a mean, so the batch's gradient is the mean of equal sub-batches'); for the whole loss
        and for the policy-gradient term alone. Averaged over ranks."""
        b = self.noise_sub_batch
        parts = int(args[0].shape[0]) // b
        sums = [None, None]   # whole loss, policy term: sums of the sub-batch gradients
        small = np.zeros(2)   # sums of their squared norms
        for i in range(parts):
            for j, flat in enumerate(self._split_grads(*(a[i * b:(i + 1) * b] for a in args))):
                g = np.asarray(flat.numpy(), np.float64)
                small[j] += float(g @ g)
                sums[j] = g if sums[j] is None else sums[j] + g
        big = [float(t @ t) / parts ** 2 for t in sums]  # |mean|^2
        sq = np.array([small[0] / parts, big[0], small[1] / parts, big[1]], np.float64)
        if self.dist.size > 1:
            sq = self.dist.average_flat(sq.astype(np.float32)).astype(np.float64)
        return float(sq[0]), float(sq[1]), float(sq[2]), float(sq[3]), b, b * parts

    def _split_grads_graph(self, obs, actions, returns, advantages):
        """The whole loss's gradient and its policy-gradient term's, each flattened (one forward, two backprops)."""
        tf = self._tf
        with tf.GradientTape(persistent=True) as tape:
            policy_loss, value_loss, entropy = self.loss.terms(self.model, obs, actions, returns, advantages)
            rest = self.cfg.value_coef * value_loss - self.cfg.entropy_coef * entropy
        variables = self.model.trainable_variables
        flat = lambda gs: tf.concat([tf.reshape(tf.zeros_like(v) if g is None else g, [-1])
                                     for g, v in zip(gs, variables)], 0)
        pg = flat(tape.gradient(policy_loss, variables))
        return pg + flat(tape.gradient(rest, variables)), pg

    def _fused_for(self, args: tuple) -> Any:
        """The fused step's graph for these inputs' types and shapes (the one tf.function traces). Called directly
        it skips tf.function's dispatch (binding the arguments, the trace-cache lookup): 0.2-0.4 ms on one core."""
        key = tuple((a.dtype, tuple(a.shape)) for a in args)
        fn = self._fused_graphs.get(key)
        if fn is None:
            fn = self._fused_graphs[key] = self._fused.get_concrete_function(*args)
        return fn

    # One of these is `_update`: (batch tensors) -> (losses, gradient norm, exposed host exchange seconds).
    def _update_fused(self, args: tuple) -> tuple:
        self._set_lr()
        out = self._fused_for(args)(*args).numpy()  # one read back: the loss's statistics, the norm, the exchange
        losses, norm, exposed_s = out[:-2], out[-2], out[-1]
        return losses, norm, max(0.0, float(exposed_s))

    def _update_host(self, args: tuple) -> tuple:
        self._set_lr()
        grads, losses = self._grads(*args)
        t1 = time.perf_counter()
        grads = self._average_host(grads)
        exchange_s = time.perf_counter() - t1
        return losses, self._apply(grads), exchange_s

    def _average_host(self, grads: list) -> list:
        """mpi4py path: one flattened float32 buffer, allreduced in place."""
        tf = self._tf
        shapes = [g.shape for g in grads]
        flat = self.dist.average_flat(np.concatenate([g.numpy().ravel() for g in grads]), self.cfg.compression)
        out, i = [], 0
        for s in shapes:
            n = int(np.prod(s))
            out.append(tf.constant(flat[i:i + n].reshape(s)))
            i += n
        return out

    # ---- state for checkpoints and the start-up broadcast
    def _state_variables(self) -> list:
        """The network's weights, Adam's variables, then the loss's own (a target network): the network
        comes first, so that evaluation reads it from any checkpoint."""
        return list(self.model.weights) + list(self.opt.variables) + list(self.loss.state_variables())

    def state_arrays(self) -> list[np.ndarray]:
        return [np.asarray(v.numpy()) for v in self._state_variables()]

    def load_state_arrays(self, arrays: list[np.ndarray], source: str = "checkpoint") -> None:
        self._lr_assigned = None  # the state holds Adam's lr variable: assign current_lr() again before the next update
        what = "weights, Adam state and target network" if self.loss.state_variables() else "weights and Adam state"
        assign_arrays(self._state_variables(), arrays, f"{source} ({what})")

    def broadcast_from_root(self) -> None:
        """Every rank takes rank 0's weights and optimizer state (start and resume)."""
        if self.dist.size > 1:
            self.load_state_arrays(self.dist.broadcast_arrays(self.state_arrays()), "rank 0's broadcast")

    def weights_checksum(self) -> float:
        return float(sum(np.sum(np.asarray(v.numpy(), np.float64)) for v in self.model.weights))
