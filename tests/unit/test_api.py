"""ba3c.api: what benchmarks and studies build on, for each built-in algorithm."""
from __future__ import annotations

import pytest

from ba3c import api
from ba3c.algos import builtin_names, get
from ba3c.config import Config


@pytest.mark.parametrize("name", builtin_names())
def test_an_update_and_a_forward_pass_of_each_algorithm(name):
    cfg = Config().replace(algo=name, **{**get(name).defaults, "train_batch": 8, "predict_batch": 4, "num_envs": 4})
    assert api.update_step(cfg, (4,), 2)() == 8
    assert api.forward_step(cfg, (4,), 2)() == 4
    learner = api.learner(cfg, (4,), 2)
    layers = {layer.name for layer in learner.model.layers}
    assert ("q" if get(name).head == "q" else "logits") in layers  # the algorithm's head


def test_samples_per_agent_step_is_the_replay_ratio():
    assert api.samples_per_agent_step(Config()) == 1.0
    gorila = Config().replace(algo="gorila", **get("gorila").defaults)
    assert api.samples_per_agent_step(gorila) == 32 / 4  # --train-batch 32 per --train-every 4 agent steps


def test_the_update_taken_apart_matches_the_learners_own_clipping():
    """update_parts and clip_gradients (the floor and step-time probes): the optimizer piece returns the global
    norm the clipping reports, and steps the optimizer once."""
    import numpy as np
    import tensorflow as tf

    cfg = Config().replace(train_batch=8, predict_batch=4, num_envs=4)
    learner = api.plain_learner(api.network(cfg, (4,), 2, kind="mlp", seed=0), cfg.learn, 1e-4)
    grads = [tf.fill(v.shape, 0.5) for v in learner.model.trainable_variables]
    _, norm = api.clip_gradients(grads, cfg.learn.clip_mode, cfg.learn.clip_norm)
    n = sum(int(np.prod(v.shape)) for v in learner.model.trainable_variables)
    assert float(norm) == pytest.approx(0.5 * n ** 0.5, rel=1e-5)
    parts = api.update_parts(learner)
    assert float(parts.optimizer(grads)) == pytest.approx(float(norm), rel=1e-5)
    assert int(learner.opt.iterations.numpy()) == 1
