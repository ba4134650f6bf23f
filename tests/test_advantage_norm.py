"""--advantage-norm batch: standardised per rank's batch (per rehearsed rank's), so a shared bias of the
advantages, or their scale, no longer moves the policy."""
from __future__ import annotations

import numpy as np
import pytest

from ba3c.config import Config, ConfigError, LearnConfig, validate
from ba3c.learner import standardise


def test_each_ranks_chunk_is_standardised_on_its_own():
    rng = np.random.default_rng(0)
    adv = np.concatenate([rng.normal(5, 2, 16), rng.normal(-3, 0.1, 16), rng.normal(0, 1, 5)]).astype(np.float32)
    out = standardise(adv, 16)
    assert out.dtype == np.float32 and out.shape == adv.shape
    for lo, hi in ((0, 16), (16, 32), (32, 37)):
        assert out[lo:hi].mean() == pytest.approx(0, abs=1e-5) and out[lo:hi].std() == pytest.approx(1, rel=1e-4)
        want = (adv[lo:hi] - adv[lo:hi].mean()) / adv[lo:hi].std()
        np.testing.assert_allclose(out[lo:hi], want, rtol=1e-4, atol=1e-5)
    assert np.all(standardise(np.full(8, 3.0, np.float32), 8) == 0)  # no spread: no policy gradient, not nan


def test_config_refuses_a_batch_of_one():
    with pytest.raises(ConfigError, match="--advantage-norm batch"):
        validate(Config().replace(advantage_norm="batch", train_batch=1))
    with pytest.raises(ConfigError, match="--advantage-norm"):
        validate(Config().replace(advantage_norm="mean"))


def _weights_after(cfg: LearnConfig, advantages: np.ndarray, seed: int = 0) -> np.ndarray:
    from ba3c.dist import Dist
    from ba3c.experience import TrainBatch
    from ba3c.learner import Learner
    from ba3c.model import build_model

    rng = np.random.default_rng(seed)
    learner = Learner(build_model("mlp", (4,), 3, seed=0), cfg, Dist(), lr=1e-2, warmup_updates=0)
    b = TrainBatch(rng.normal(size=(24, 4)).astype(np.float32), rng.integers(0, 3, 24).astype(np.int32),
                   rng.normal(size=24).astype(np.float32), advantages.astype(np.float32))
    learner.train(b)
    return np.concatenate([w.ravel() for w in learner.model.get_weights()])


def test_a_shared_shift_or_scale_of_the_advantages_changes_nothing():
    adv = np.random.default_rng(3).normal(size=24)
    on = LearnConfig(advantage_norm="batch", train_batch=12)
    base = _weights_after(on, adv)
    for shifted in (adv - 4.0, 3.0 * adv + 1.0):
        np.testing.assert_allclose(_weights_after(on, shifted), base, rtol=1e-4, atol=1e-6)
    off = LearnConfig(train_batch=12)
    assert not np.allclose(_weights_after(off, adv - 4.0), _weights_after(off, adv), atol=1e-6)  # off: it does
