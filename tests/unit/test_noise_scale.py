"""--noise-scale-every: the estimator on gradients of known noise, the learner's squared norms against an
independent computation, the config check and a real run that logs the pooled noise scale."""
from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from ba3c.batching import noise_sub_batch
from ba3c.config import Config, ConfigError, validate
from ba3c.learner import noise_scale
from conftest import run_train


def test_estimator_recovers_the_noise_of_synthetic_gradients():
    """Per-sample gradients G + noise of known variance: pooled over many batches, the two-batch-size
    estimates find |G|^2, tr(Sigma) and their ratio."""
    rng = np.random.default_rng(0)
    d, sigma, b_small, parts = 50, 3.0, 8, 16
    g = rng.normal(size=d)
    true_g2, true_trace = float(g @ g), d * sigma ** 2
    small, big = [], []
    for _ in range(400):
        samples = g + sigma * rng.normal(size=(b_small * parts, d))
        subs = samples.reshape(parts, b_small, d).mean(1)
        small.append(float(np.mean(np.sum(subs ** 2, -1))))
        whole = subs.mean(0)
        big.append(float(whole @ whole))
    g2, trace, b_simple = noise_scale(float(np.mean(small)), float(np.mean(big)), b_small, b_small * parts)
    assert g2 == pytest.approx(true_g2, rel=0.1)
    assert trace == pytest.approx(true_trace, rel=0.05)
    assert b_simple == pytest.approx(true_trace / true_g2, rel=0.15)
    # a single noisy measurement may find no signal; the ratio is then undefined, not negative
    assert math.isnan(noise_scale(10.0, 0.1, 8, 128)[2])


def test_config_sub_batches_and_refusal():
    assert noise_sub_batch(Config().replace(train_batch=64, rehearse_ranks=4)) == 64   # one per rehearsed rank
    assert noise_sub_batch(Config().replace(train_batch=64)) == 16                     # a quarter of the batch
    with pytest.raises(ConfigError, match="--noise-scale-every needs sub-batches"):
        validate(Config().replace(noise_scale_every=5, train_batch=4))
    with pytest.raises(ConfigError, match="--noise-scale-every"):
        validate(Config().replace(noise_scale_every=-1))


def test_learner_measures_squared_norms_of_sub_batches_and_of_the_batch():
    """The learner's numbers equal squared norms of gradients computed apart, with the weights before the update."""
    import tensorflow as tf

    from ba3c.config import LearnConfig
    from ba3c.dist import Dist
    from ba3c.experience import TrainBatch
    from ba3c.learner import Learner
    from ba3c.model import build_model

    rng = np.random.default_rng(2)
    cfg = LearnConfig(noise_scale_every=2)
    learner = Learner(build_model("mlp", (4,), 3, seed=0), cfg, Dist(), lr=1e-2, warmup_updates=0, noise_sub_batch=6)
    twin = build_model("mlp", (4,), 3, seed=0)
    for update in range(3):
        b = TrainBatch(rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20).astype(np.int32),
                       rng.normal(size=20).astype(np.float32), rng.normal(size=20).astype(np.float32))
        twin.set_weights(learner.model.get_weights())

        def grad(lo: int, hi: int, policy_only: bool = False, b: TrainBatch = b) -> np.ndarray:
            with tf.GradientTape() as tape:
                logits, value = twin(b.obs[lo:hi])
                logp = tf.nn.log_softmax(logits)
                pl = -tf.reduce_mean(tf.gather(logp, b.actions[lo:hi], batch_dims=1) * b.advantages[lo:hi])
                vl = 0.5 * tf.reduce_mean(tf.square(b.returns[lo:hi] - tf.squeeze(value, -1)))
                ent = -tf.reduce_mean(tf.reduce_sum(tf.exp(logp) * logp, -1))
                loss = pl if policy_only else pl + cfg.value_coef * vl - cfg.entropy_coef * ent
            gs = tape.gradient(loss, twin.trainable_variables)
            return np.concatenate([np.zeros(v.shape).ravel() if g is None else np.ravel(g)
                                   for g, v in zip(gs, twin.trainable_variables)]).astype(np.float64)

        s = learner.train(b)
        if update % 2:  # not measured
            assert math.isnan(s.grad_sq_small) and s.b_big == 0
            continue
        subs = [grad(6 * i, 6 * (i + 1)) for i in range(3)]  # 20 samples: 3 sub-batches of 6, the last 2 unused
        whole = grad(0, 18)
        assert (s.b_small, s.b_big) == (6, 18)
        assert s.grad_sq_small == pytest.approx(np.mean([x @ x for x in subs]), rel=1e-4)
        assert s.grad_sq_big == pytest.approx(whole @ whole, rel=1e-4)
        pg_subs = [grad(6 * i, 6 * (i + 1), policy_only=True) for i in range(3)]
        pg_whole = grad(0, 18, policy_only=True)
        assert s.pg_sq_small == pytest.approx(np.mean([x @ x for x in pg_subs]), rel=1e-4)
        assert s.pg_sq_big == pytest.approx(pg_whole @ pg_whole, rel=1e-4)
        assert 0 < s.pg_sq_big < s.grad_sq_big  # the value head's gradient is in the whole loss's only


@pytest.mark.slow
def test_run_logs_the_pooled_noise_scale(tmp_path):
    run = tmp_path / "noise"
    run_train(["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "16",
               "--rehearse-ranks", "2", "--noise-scale-every", "2", "--run-dir", str(run), "--log-interval-s", "0.01",
               "--stats-interval-updates", "5", "--total-frames", "1600"], timeout=200)
    with open(run / "progress.csv", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["noise_n"]]
    assert rows and sum(int(r["noise_n"]) for r in rows) == 25  # 50 updates, every 2nd measured
    for r in rows:
        assert (int(r["noise_b_small"]), int(r["noise_b_big"])) == (16, 32)
        small, big = float(r["grad_sq_small"]), float(r["grad_sq_big"])
        assert small > 0 and big > 0
        for col, (a, b) in (("noise_scale", (small, big)),
                            ("noise_scale_policy", (float(r["pg_sq_small"]), float(r["pg_sq_big"])))):
            want = noise_scale(a, b, 16, 32)[2]
            assert (math.isnan(want) and r[col] == "nan") or float(r[col]) == pytest.approx(want)
