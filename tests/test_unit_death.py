"""benchmarks/unit_death.py: a short real comparison on recorded Pong play (two arms, a few updates)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env


def _run(tmp_path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.unit_death", "--out", str(tmp_path), *args], cwd=ROOT,
                          env=subprocess_env(), capture_output=True, text=True, timeout=300)


def test_arms_train_on_the_same_samples_and_report_feature_health(tmp_path):
    p = _run(tmp_path, "--arms", "2048-value-only,64", "--samples", "4096", "--envs", "4", "--steps", "230",
             "--probe", "40", "--points", "2", "--name", "t")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    result = json.loads((tmp_path / "t.json").read_text())
    assert result["recorded_samples"] == 4 * 30  # 230 steps per emulator, the last 200 left out
    assert -3 < result["return_mean"] <= 1  # Pong's clipped rewards, discounted
    big, small = result["arms"]["2048-value-only"], result["arms"]["64"]
    assert [r["updates"] for r in big] == [0, 1, 2] and big[-1]["samples"] == small[-1]["samples"] == 4096
    assert small[-1]["updates"] == 64
    for key in ("units_active", "feature_std", "logit_std", "value_std", "value_mean"):  # the same untrained
        assert big[0][key] == pytest.approx(small[0][key], rel=1e-5, abs=1e-7)       # network, same observations
    for r in big + small:
        assert 0 <= r["units_active"] <= 1 and r["feature_std"] >= 0
    # the value-only arm trains no policy: its logits move only through the shared layers, far less
    # than the whole loss moves them at batch 64 (logit spread 1e-3 vs ~1 here)
    assert big[-1]["logit_std"] < small[-1]["logit_std"]
    assert (tmp_path / "t.png").stat().st_size > 0


def test_bad_arguments_fail_before_recording(tmp_path):
    p = _run(tmp_path, "--arms", "2048-sqrt,nope")
    assert p.returncode == 2 and "unknown nope" in p.stderr
    p = _run(tmp_path, "--steps", "100")
    assert p.returncode == 2 and "--steps must exceed 200" in p.stderr
