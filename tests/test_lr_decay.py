"""--lr-decay linear: the multiplier, its validation, and a real run whose logged lr follows the frames trained,
across a resume that moves the end of the decay."""
from __future__ import annotations

import pytest

from ba3c.config import Config, ConfigError, lr_decay_factor, validate
from benchmarks.harness import progress_rows
from conftest import run_train


def test_factor_falls_linearly_with_the_frames_to_zero_at_the_end():
    plain = Config().replace(total_frames=1000)
    assert [lr_decay_factor(plain, f) for f in (0, 500, 1000, 5000)] == [1.0, 1.0, 1.0, 1.0]
    cfg = Config().replace(total_frames=1000, lr_decay="linear")
    assert [lr_decay_factor(cfg, f) for f in (0, 250, 1000)] == pytest.approx([1.0, 0.75, 0.0])
    assert lr_decay_factor(cfg, 1200) == 0.0  # never negative (the last update may pass --total-frames)
    later = Config().replace(total_frames=1000, lr_decay="linear", lr_decay_frames=4000)
    assert lr_decay_factor(later, 1000) == pytest.approx(0.75)


def test_config_refuses_a_decay_that_would_train_at_zero_or_do_nothing():
    with pytest.raises(ConfigError, match="--lr-decay-frames 500 is below --total-frames 1000"):
        validate(Config().replace(total_frames=1000, lr_decay="linear", lr_decay_frames=500))
    with pytest.raises(ConfigError, match="no effect without --lr-decay linear"):
        validate(Config().replace(lr_decay_frames=5000))
    with pytest.raises(ConfigError, match="--lr-decay-frames: must be >= 0"):
        validate(Config().replace(lr_decay="linear", lr_decay_frames=-1))
    with pytest.raises(ConfigError, match="--lr-decay: 'cosine' is not one of none, linear"):
        validate(Config().replace(lr_decay="cosine"))


@pytest.mark.slow
def test_run_logs_the_decayed_lr_and_a_resume_follows_the_frames(tmp_path):
    run = tmp_path / "decay"
    common = ["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "20",
              "--lr-scaling", "none", "--lr-decay", "linear", "--run-dir", str(run),
              "--log-interval-s", "0.01", "--stats-interval-updates", "5"]
    run_train([*common, "--total-frames", "2000"], timeout=200)
    rows = [r for r in progress_rows(str(run)) if r["rollbacks"] == "0"]  # a rollback would cut the lr too
    assert len(rows) >= 3
    # the lr column is the next update's lr: 5e-4 times the share of the frames still to train
    for r in rows:
        assert float(r["lr"]) == pytest.approx(5e-4 * max(0.0, 1 - int(r["frames"]) / 2000), rel=1e-5, abs=1e-12)
    assert float(rows[0]["lr"]) > float(rows[-1]["lr"])
    done = int(rows[-1]["frames"])
    # resume with a later end of the decay: the lr comes back up to where the new line is at these frames
    p = run_train(["--resume", str(run), "--total-frames", "2400", "--lr-decay-frames", "4000"], timeout=200)
    assert "resuming from" in p.stdout
    after = [r for r in progress_rows(str(run)) if int(r["frames"]) > done and r["rollbacks"] == "0"]
    assert after
    for r in after:
        assert float(r["lr"]) == pytest.approx(5e-4 * (1 - int(r["frames"]) / 4000), rel=1e-5)
