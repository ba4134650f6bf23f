"""Smoke test: `python -m benchmarks.throughput --quick` runs end to end and writes sane JSON and a PNG.

No speed assertions: the machine may be busy; only that every rate is measured (positive, finite).
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RATES = ("env_steps_per_s", "forward_samples_per_s", "train_samples_per_s", "pipeline_steps_per_s",
         "ceiling_steps_per_s", "efficiency", "frames_per_s")


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["ba3c", "gorila"])
def test_throughput_quick(tmp_path: Path, algo: str) -> None:
    out = tmp_path / "results"
    proc = subprocess.run([sys.executable, "-m", "benchmarks.throughput", "--quick", "--algo", algo, "--out", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=900,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    name = "throughput-gorila" if algo == "gorila" else "throughput"
    data = json.loads((out / f"{name}.json").read_text())
    assert data["algo"] == algo and data["config"]["learn"]["algo"] == algo
    if algo == "gorila":  # the learner keeps the replay ratio it was given: 32 samples per 4 agent steps
        assert data["samples_per_agent_step"] == 8 and 7 < data["replay_ratio_measured"] < 9
        assert data["updates_per_s"] > 0
    for key in RATES:
        assert isinstance(data[key], float) and math.isfinite(data[key]) and data[key] > 0, (key, data[key])
    assert data["frames_per_s"] == data["pipeline_steps_per_s"] * 4
    assert data["machine"]["cores"] >= 1 and data["machine"]["cpu"]
    for key in ("config", "date", "note"):
        assert data[key]
    assert (out / f"{name}.png").stat().st_size > 0
    # the steady-window stage split comes from progress.csv's t_* columns: shares of wall time
    stages = data["pipeline"]["steady_stage_fraction_of_wall"]
    assert {"train", "predict", "queue_wait"} <= set(stages) and 0 < stages["train"] <= 1.5, stages
