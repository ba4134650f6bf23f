"""--lr-adapt kl: the rule, the policy change the learner measures, and a real run that saves and resumes it
(the multi-rank agreement is in test_multirank)."""
from __future__ import annotations

import csv
import math

import numpy as np
import pytest

from ba3c import checkpoint as ckpt
from ba3c.config import Config, ConfigError, LearnConfig, validate
from ba3c.learner import KL_CUT, KL_RAISE, LR_ADAPT_MIN, adapt_lr
from conftest import run_train


def test_rule_raises_while_the_policy_barely_moves_and_cuts_when_it_jumps():
    t, most = 0.01, 16.0
    assert adapt_lr(1.0, 0.001, t, most) == pytest.approx(KL_RAISE)      # below half the target
    assert adapt_lr(1.0, 0.03, t, most) == pytest.approx(1 / KL_CUT)     # above twice it
    assert all(adapt_lr(1.0, kl, t, most) == 1.0 for kl in (0.01, 0.019, 0.006))
    assert adapt_lr(1.0, float("nan"), t, most) == pytest.approx(1 / KL_CUT)  # non-finite: as if too large
    s = 1.0
    for _ in range(1000):
        s = adapt_lr(s, 0.0, t, most)
    assert s == most
    for _ in range(1000):
        s = adapt_lr(s, 1.0, t, most)
    assert s == LR_ADAPT_MIN
    # --kl-lr-max 1 (the default): cut, then raised back no higher than the rule's lr
    s = adapt_lr(adapt_lr(1.0, 1.0, t, 1.0), 1.0, t, 1.0)
    assert s == pytest.approx(1 / KL_CUT ** 2)
    for _ in range(100):
        s = adapt_lr(s, 0.0, t, 1.0)
    assert s == 1.0


def test_config_refuses_kl_with_the_overlapped_exchange():
    with pytest.raises(ConfigError, match="--lr-adapt kl needs --exchange sync"):
        validate(Config().replace(lr_adapt="kl", exchange="overlap"))
    with pytest.raises(ConfigError, match="--kl-target"):
        validate(Config().replace(lr_adapt="kl", kl_target=0.0))
    with pytest.raises(ConfigError, match="--kl-lr-max"):
        validate(Config().replace(lr_adapt="kl", kl_lr_max=0.0))


def test_learner_measures_the_policy_change_of_its_update():
    """The KL the learner reports is the change of the policy on the measured subset, computed apart from
    the weights before and after the update; the next lr follows the rule."""
    from ba3c.dist import Dist
    from ba3c.experience import TrainBatch
    from ba3c.learner import Learner
    from ba3c.model import build_model

    rng = np.random.default_rng(0)
    cfg = LearnConfig(lr_adapt="kl", kl_target=1e-3, kl_samples=5)
    learner = Learner(build_model("mlp", (4,), 3, seed=0), cfg, Dist(), lr=1e-2, warmup_updates=0)
    scale = 1.0
    for _ in range(4):
        b = TrainBatch(rng.normal(size=(20, 4)).astype(np.float32), rng.integers(0, 3, 20).astype(np.int32),
                       rng.normal(size=20).astype(np.float32), rng.normal(size=20).astype(np.float32))
        sub = b.obs[::4][:5]  # batch 20, 5 samples: every 4th
        old = learner.model(sub)[0].numpy().astype(np.float64)
        lr_used = learner.current_lr()
        s = learner.train(b)
        new = learner.model(sub)[0].numpy().astype(np.float64)
        lp_old = old - np.log(np.exp(old).sum(-1, keepdims=True))
        lp_new = new - np.log(np.exp(new).sum(-1, keepdims=True))
        want = float(np.mean(np.sum(np.exp(lp_old) * (lp_old - lp_new), -1)))
        assert want > 0 and s.kl == pytest.approx(want, rel=1e-3, abs=1e-8)
        assert lr_used == pytest.approx(1e-2 * scale)
        scale = adapt_lr(scale, s.kl_step, cfg.kl_target, cfg.kl_lr_max)
        assert learner.lr_adapt == pytest.approx(scale)
    plain = Learner(build_model("mlp", (4,), 3, seed=0), LearnConfig(), Dist(), lr=1e-2, warmup_updates=0)
    assert math.isnan(plain.train(b).kl) and plain.lr_adapt == 1.0  # off by default: nothing measured


def test_trust_region_shortens_a_step_that_changes_the_policy_too_much():
    """Two learners from the same weights and batch: one with a target its first step overshoots. Its step is
    the other's Adam step shortened by the reported fraction, and the policy change applied is near the limit."""
    from ba3c.dist import Dist
    from ba3c.experience import TrainBatch
    from ba3c.learner import Learner
    from ba3c.model import build_model

    rng = np.random.default_rng(1)
    b = TrainBatch(rng.normal(size=(32, 4)).astype(np.float32), rng.integers(0, 3, 32).astype(np.int32),
                   rng.normal(size=32).astype(np.float32), rng.normal(size=32).astype(np.float32))
    whole = Learner(build_model("mlp", (4,), 3, seed=0), LearnConfig(lr_adapt="kl", kl_target=10.0), Dist(),
                    lr=1e-2, warmup_updates=0)
    tight = Learner(build_model("mlp", (4,), 3, seed=0), LearnConfig(lr_adapt="kl", kl_target=1e-6), Dist(),
                    lr=1e-2, warmup_updates=0)
    w0 = np.concatenate([w.ravel() for w in whole.model.get_weights()])
    s_whole, s_tight = whole.train(b), tight.train(b)
    assert s_whole.step_kept == 1.0 and s_whole.kl == s_whole.kl_step  # under its limit: untouched
    assert s_tight.kl_step == pytest.approx(s_whole.kl_step, rel=1e-4) and s_tight.kl_step > 2e-6
    assert 0 < s_tight.step_kept < 1 and s_tight.kl < s_tight.kl_step
    assert s_tight.kl <= 2e-6 * 1.5  # near the limit (KL ~ quadratic in the step), not far above it
    d_whole = np.concatenate([w.ravel() for w in whole.model.get_weights()]) - w0
    d_tight = np.concatenate([w.ravel() for w in tight.model.get_weights()]) - w0
    np.testing.assert_allclose(d_tight, s_tight.step_kept * d_whole, rtol=1e-3, atol=1e-7)
    assert tight.lr_adapt == pytest.approx(1 / KL_CUT)  # the lr rule follows the whole step's change


def test_run_logs_the_kl_and_resumes_its_lr(tmp_path):
    run = tmp_path / "kl"
    common = ["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "20",
              "--lr-scaling", "none", "--lr-adapt", "kl", "--kl-target", "1e-5", "--kl-lr-max", "4", "--run-dir", str(run),
              "--log-interval-s", "0.01", "--stats-interval-updates", "5"]
    run_train([*common, "--total-frames", "2000"], timeout=200)
    c = ckpt.load_latest(str(run / "checkpoints"))
    assert c is not None and c.meta["lr_adapt"] != 1.0  # the multiplier moved and was saved
    with open(run / "progress.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(math.isfinite(float(r["kl"])) for r in rows)
    assert all(float(r["lr"]) <= 4 * 5e-4 * (1 + 1e-6) for r in rows)  # never above --kl-lr-max x the rule's
    # the lr column is the next update's lr: the rule's 5e-4 times the multiplier the checkpoint saved
    assert float(rows[-1]["lr"]) == pytest.approx(5e-4 * c.meta["lr_adapt"], rel=1e-6)
    p = run_train(["--resume", str(run), "--total-frames", "2400"], timeout=200)
    assert "resuming from" in p.stdout and "starts again at 1" not in p.stdout
    with open(run / "progress.csv", newline="") as fh:
        after = [r for r in csv.DictReader(fh) if int(r["updates"]) > c.meta["updates"]]
    # the first update after the resume ran at the saved lr, so the first logged lr is within one step of it
    first = float(after[0]["lr"]) / (5e-4 * c.meta["lr_adapt"])
    assert after and (1 / KL_CUT) ** 5 - 1e-9 <= first <= KL_RAISE ** 5 + 1e-9
