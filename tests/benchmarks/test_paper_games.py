"""benchmarks/paper_games.py on CartPole: trains to the target, keeps the state, evaluates once, rebuilds
the scores table, and a second invocation finds the game done."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env

TRAINER = ["--", "--num-envs", "8", "--predict-batch", "8", "--train-batch", "40", "--lr", "1e-3",
           "--lr-scaling", "none"]


def run(tmp_path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.paper_games", "--runs-dir", str(tmp_path / "runs"),
                           "--state-root", str(tmp_path / "state"), "--out", str(tmp_path / "out"), "--nice", "0",
                           *args], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_a_game_is_trained_kept_evaluated_and_then_done(tmp_path):
    # target 1: every evaluation reaches it (a CartPole episode scores >= 8), so the test does not hang on learning
    plan = ["--games", "CartPole-v1:1:60000", "--eval-every-frames", "10000", "--eval-episodes", "4",
            "--final-episodes", "6", "--max-hours", "0.1"]
    p = run(tmp_path, *plan, *TRAINER)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "time_to_score" / "time_to_score-cartpole-v1-games.json").read_text())
    # trained to the cap; the first evaluation at the target is recorded, not a reason to stop
    assert res["frames_total"] >= 60000
    assert res["reached"] and res["best_criterion"] >= 1 and res["frames_to_target"] < res["frames_total"]
    assert list((tmp_path / "state" / "cartpole-v1" / "checkpoints").glob("ckpt-*.npz"))
    ev = json.loads((tmp_path / "out" / "scores" / "eval-cartpole-v1-paper.json").read_text())
    assert ev["policy"] == "paper" and ev["episodes"] == 6 and ev["frames"] == res["frames_total"]
    assert "| CartPole-v1 |" in (tmp_path / "out" / "scores" / "SCORES.md").read_text()
    assert p.stdout.rstrip().splitlines()[-1].endswith("done, target reached by a periodic evaluation")

    # again: nothing to train or evaluate
    p = run(tmp_path, *plan, *TRAINER, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "training" not in p.stdout and "ba3c.evaluate" not in p.stdout
    again = json.loads((tmp_path / "out" / "time_to_score" / "time_to_score-cartpole-v1-games.json").read_text())
    assert again["frames_total"] == res["frames_total"]


def test_status_and_bad_plans(tmp_path):
    p = run(tmp_path, "--status", timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert [ln.split()[0] for ln in lines[1:]] == ["breakout", "boxing", "space_invaders", "seaquest", "beam_rider",
                                                   "pong"]
    assert all(ln.endswith("not started") for ln in lines[1:])
    # an evaluation of older frames than the run's does not count: the game is evaluated again
    (tmp_path / "out" / "time_to_score").mkdir(parents=True)
    (tmp_path / "out" / "scores").mkdir()
    (tmp_path / "out" / "time_to_score" / "time_to_score-breakout-games.json").write_text(json.dumps(
        {"frames_total": 40_000_000, "best_criterion": 371.5}))
    (tmp_path / "out" / "scores" / "eval-breakout-paper.json").write_text(json.dumps({"frames": 18_616_320}))
    p = run(tmp_path, "--status", timeout=120)
    assert p.stdout.splitlines()[1].endswith("trained, not evaluated, target reached by a periodic evaluation")
    p = run(tmp_path, "--games", "pong:20", timeout=120)
    assert p.returncode == 2 and "NAME:TARGET:FRAME_CAP" in p.stderr
    p = run(tmp_path, "--max-hours", "0", timeout=120)
    assert p.returncode == 2 and "--max-hours must be > 0" in p.stderr
