"""Batched predictor: one compiled forward pass per ready batch; the action rules (sampled, greedy, epsilon-greedy)."""
from __future__ import annotations

import numpy as np


def sample_actions(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Categorical samples from softmax(logits), one per row (inverse CDF)."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    cdf = np.cumsum(p, axis=1)
    u = rng.random(len(logits)) * cdf[:, -1]
    return np.minimum((u[:, None] > cdf).sum(axis=1), logits.shape[1] - 1).astype(np.int32)


def greedy_actions(logits: np.ndarray) -> np.ndarray:
    """Argmax per row (the first of tied maxima)."""
    return np.argmax(logits, axis=1).astype(np.int32)


def epsilon_greedy_actions(logits: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Per row: with probability epsilon a uniformly random action (any of them, the greedy one included), else
    argmax."""
    n, num_actions = logits.shape
    explore = rng.random(n) < epsilon
    return np.where(explore, rng.integers(0, num_actions, n), greedy_actions(logits)).astype(np.int32)


class Predictor:
    """Reads the learner's live weights (same process), so the policy lags by at most an update or two."""

    def __init__(self, model, obs_shape: tuple[int, ...], obs_dtype: np.dtype) -> None:
        import tensorflow as tf

        spec = tf.TensorSpec((None, *obs_shape), tf.as_dtype(obs_dtype))
        self._forward = tf.function(lambda o: model(o, training=False), input_signature=[spec])

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, value = self._forward(obs)
        return logits.numpy(), value.numpy()[:, 0]
