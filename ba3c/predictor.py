"""Batched predictor: one compiled forward pass per ready batch, actions sampled from the policy."""
from __future__ import annotations

import numpy as np


def sample_actions(logits: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Categorical samples from softmax(logits), one per row (inverse CDF)."""
    z = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(z)
    cdf = np.cumsum(p, axis=1)
    u = rng.random(len(logits)) * cdf[:, -1]
    return np.minimum((u[:, None] > cdf).sum(axis=1), logits.shape[1] - 1).astype(np.int32)


class Predictor:
    """Reads the learner's live weights (same process), so the policy lags by at most an update or two."""

    def __init__(self, model, obs_shape: tuple[int, ...], obs_dtype: np.dtype) -> None:
        import tensorflow as tf

        spec = tf.TensorSpec((None, *obs_shape), tf.as_dtype(obs_dtype))
        self._forward = tf.function(lambda o: model(o, training=False), input_signature=[spec])

    def __call__(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        logits, value = self._forward(obs)
        return logits.numpy(), value.numpy()[:, 0]
