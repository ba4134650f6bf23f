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
