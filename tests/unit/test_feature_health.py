"""ba3c.model.HealthProbe (dead units, features that no longer vary) and its progress.csv columns in a real run."""
from __future__ import annotations

import csv

import numpy as np
import pytest

from conftest import run_train


@pytest.fixture(scope="module")
def nature():
    from ba3c.model import build_model
    return build_model("nature", (4, 84, 84), 6, seed=0)


def _obs(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 4, 84, 84), dtype=np.uint8)


def test_probe_counts_units_that_died(nature):
    from ba3c.model import HealthProbe

    obs = _obs(32)
    probe = HealthProbe(nature, obs)
    obs[:] = 0  # the probe keeps its own copy
    before = probe()
    assert 0 < before.units_active <= 1 and before.feature_std > 0 and before.logit_std > 0 and before.value_std > 0
    dense = next(layer for layer in nature.layers if getattr(layer, "units", 0) == 512)
    kernel, bias = (np.array(w) for w in dense.get_weights())
    feat = np.maximum(0, HealthProbe(nature, _obs(32))._net([_obs(32)])[0].numpy())  # before any is killed, same obs
    active = (feat > 0).any(axis=0)
    try:
        killed = bias.copy()
        killed[:256] = -1e6  # the first half of the units can no longer fire
        dense.set_weights([kernel, killed])
        half = probe()
        assert half.units_active == pytest.approx(active[256:].sum() / 512)
        assert half.units_active < before.units_active
        killed[:] = -1e6
        dense.set_weights([kernel, killed])
        dead = probe()
        # nothing reaches the heads: one output for every observation
        assert (dead.units_active, dead.feature_std, dead.logit_std, dead.value_std) == (0.0, 0.0, 0.0, 0.0)
    finally:
        dense.set_weights([kernel, bias])
    assert probe() == before  # the same weights, the same observations: the same numbers


def test_probe_refuses_a_single_observation(nature):
    from ba3c.model import HealthProbe
    with pytest.raises(ValueError, match="at least 2 observations"):
        HealthProbe(nature, _obs(1))


@pytest.mark.slow
def test_run_logs_feature_health(tmp_path):
    run = tmp_path / "health"
    run_train(["--env", "CartPole-v1", "--num-envs", "8", "--predict-batch", "8", "--train-batch", "32",
               "--run-dir", str(run), "--log-interval-s", "0.01", "--stats-interval-updates", "5",
               "--total-frames", "3200"], timeout=200)
    with open(run / "progress.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(r["units_active"] for r in rows)
    for r in rows:
        assert 0 <= float(r["units_active"]) <= 1
        assert all(float(r[k]) >= 0 for k in ("feature_std", "logit_std", "value_std"))
