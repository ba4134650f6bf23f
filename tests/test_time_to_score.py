"""benchmarks/time_to_score.py on CartPole: stops at the target greedy-evaluation score and records when."""
from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT, subprocess_env


def test_time_to_score_cartpole(tmp_path):
    p = subprocess.run([sys.executable, "benchmarks/time_to_score.py", "--env", "CartPole-v1", "--target", "120",
                        "--total-frames", "400000", "--max-hours", "0.05", "--eval-every-frames", "20000",
                        "--eval-episodes", "4", "--run-dir", str(tmp_path / "run"), "--out-dir", str(tmp_path / "out"),
                        "--", "--num-envs", "8", "--predict-batch", "8", "--train-batch", "40", "--lr", "1e-3",
                        "--lr-scaling", "none"],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "time_to_score-cartpole-v1.json").read_text())
    assert res["reached"] and res["metric"] == "greedy evaluation mean"
    assert res["best_criterion"] >= 120 and 0 < res["frames_to_target"] <= res["frames_total"] < 400000
    assert res["updates_to_target"] * 40 == res["frames_to_target"] - res["frames_to_target"] % 40
    assert (tmp_path / "out" / "time_to_score-cartpole-v1-config.json").exists()
