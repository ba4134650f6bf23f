"""benchmarks/time_to_score.py on CartPole: stops at the target greedy-evaluation score and records when."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env


@pytest.mark.slow
def test_time_to_score_cartpole(tmp_path):
    # target 1: every CartPole evaluation reaches it, so this checks the harness's mechanics, not whether CartPole
    # learns within a few minutes (a learning outcome a loaded machine may not give)
    p = subprocess.run([sys.executable, "-m", "benchmarks.time_to_score", "--env", "CartPole-v1", "--target", "1",
                        "--total-frames", "400000", "--max-hours", "0.05", "--eval-every-frames", "20000",
                        "--eval-episodes", "4", "--run-dir", str(tmp_path / "run"), "--out-dir", str(tmp_path / "out"),
                        "--keep-every-frames", "10000", "--state-dir", str(tmp_path / "state"), "--",
                        "--num-envs", "8", "--predict-batch", "8", "--train-batch", "40", "--lr", "1e-3",
                        "--lr-scaling", "none"],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "time_to_score-cartpole-v1.json").read_text())
    assert res["reached"] and res["metric"].startswith("periodic evaluation mean")
    assert res["best_criterion"] >= 1 and 20000 <= res["frames_to_target"] <= res["frames_total"] < 400000
    assert res["updates_to_target"] * 40 == res["frames_to_target"] - res["frames_to_target"] % 40
    assert (tmp_path / "out" / "time_to_score-cartpole-v1-config.json").exists()
    assert list((tmp_path / "run" / "checkpoints").glob("keep-*.npz"))  # --keep-every-frames reached the trainer
    assert (tmp_path / "out" / "time_to_score-cartpole-v1.png").stat().st_size > 5000  # drawn from the CSVs
    # the CSVs kept with the results: eval.csv as it is, progress.csv with its main columns
    out = tmp_path / "out"
    assert (out / "time_to_score-cartpole-v1-eval.csv").read_text() == (tmp_path / "run" / "eval.csv").read_text()
    kept = (out / "time_to_score-cartpole-v1-progress.csv").read_text().splitlines()
    assert kept[0].split(",")[:3] == ["time_s", "cpu_s", "frames"] and "return_mean20" in kept[0]
    assert kept[0].split(",")[-9:] == ["units_active", "feature_std", "logit_std", "value_std",  # the last 5: Gorila's
                                       "td_loss", "q_mean", "td_abs_mean", "q_abs_max", "epsilon"]
    assert len(kept) == len((tmp_path / "run" / "progress.csv").read_text().splitlines())
    # core-hours are the CPU seconds the run used, not wall x cores
    assert res["core_hours_basis"].startswith("measured")
    assert 0 < res["core_hours_to_target"] <= res["core_hours_total"]

    # the state kept for a fresh checkout: the newest checkpoint pair and the CSVs
    state = tmp_path / "state"
    assert len(list((state / "checkpoints").glob("ckpt-*.npz"))) == 1
    assert (state / "config.json").exists() and (state / "progress.csv").exists() and (state / "eval.csv").exists()

    # --resume continues the same run (frames and CPU seconds carry on), --tag names the output
    p = subprocess.run([sys.executable, "-m", "benchmarks.time_to_score", "--env", "CartPole-v1", "--target", "1e9",
                        "--total-frames", "400000", "--max-hours", "0.006", "--eval-every-frames", "20000",
                        "--eval-episodes", "2", "--resume", "--run-dir", str(tmp_path / "run"),
                        "--out-dir", str(tmp_path / "out"), "--tag", "more"],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    more = json.loads((tmp_path / "out" / "time_to_score-cartpole-v1-more.json").read_text())
    assert more["resumed"] and not more["reached"]
    assert more["frames_total"] > res["frames_total"] and more["core_hours_total"] > res["core_hours_total"]
    assert more["core_hours_basis"].startswith("measured")

    # a fresh checkout (no run directory, another path): the same command continues from --state-dir
    p = subprocess.run([sys.executable, "-m", "benchmarks.time_to_score", "--env", "CartPole-v1", "--target", "1e9",
                        "--total-frames", "400000", "--max-hours", "0.006", "--eval-every-frames", "20000",
                        "--eval-episodes", "2", "--run-dir", str(tmp_path / "elsewhere"), "--state-dir", str(state),
                        "--out-dir", str(tmp_path / "out"), "--tag", "fresh"],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "continuing from the state kept in" in p.stdout
    fresh = json.loads((tmp_path / "out" / "time_to_score-cartpole-v1-fresh.json").read_text())
    assert fresh["resumed"] and fresh["frames_total"] > res["frames_total"]
    assert fresh["updates_total"] > res["updates_total"]
    # the state now holds the newer checkpoint, still one
    [ckpt] = (state / "checkpoints").glob("ckpt-*.npz")
    assert ckpt.name in {c.name for c in (tmp_path / "elsewhere" / "checkpoints").glob("ckpt-*.npz")}


def test_resume_needs_a_run_or_a_kept_state(tmp_path):
    p = subprocess.run([sys.executable, "-m", "benchmarks.time_to_score", "--env", "CartPole-v1", "--target", "1",
                        "--resume", "--run-dir", str(tmp_path / "none"), "--state-dir", str(tmp_path / "nostate")],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--state-dir holding a kept state" in p.stderr
    assert not (tmp_path / "none").exists()


def test_the_trainer_keeps_the_budget_itself():
    """The budget goes to the trainer as --max-minutes (it gives up evaluations when it runs out), unless
    the caller set one; a trainer that finished its frames is then left time for its last evaluations."""
    from benchmarks import time_to_score as tts
    args, extra, _ = tts.parse(["--env", "pong", "--max-hours", "1.5", "--run-dir", "r"])
    cmd = tts.trainer_command(args, "r", extra)
    assert cmd[cmd.index("--max-minutes") + 1] == "90.0000"
    assert cmd[cmd.index("--keep-every-frames") + 1] == "5000000"  # kept checkpoints are on for long runs
    args, extra, _ = tts.parse(["--env", "pong", "--max-hours", "1.5", "--run-dir", "r", "--", "--max-minutes", "5"])
    cmd = tts.trainer_command(args, "r", extra)
    assert cmd.count("--max-minutes") == 1 and cmd[cmd.index("--max-minutes") + 1] == "5"
