"""studies/dqn_loss: each variant trains with its own --dqn-loss and --dqn-target, is evaluated, and a second
invocation runs only what is missing; the seed-by-seed comparison and the rotated order."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env
from studies.dqn_loss.dqn_loss import RunResult, paired, pairs, schedule


def _study(tmp_path, *more: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "studies.dqn_loss", "--seeds", "1", "--frames", "2000",
                        "--eval-episodes", "2", "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out"),
                        *more], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return p


@pytest.mark.slow
def test_each_variant_trains_with_its_loss_and_target(tmp_path):
    first = _study(tmp_path, "--variants", "mse-double")
    assert first.returncode == 0 and "run 1/1: mse-double-s0" in first.stdout
    # a second invocation with the baseline added trains only the baseline; the finished run is kept
    again = _study(tmp_path, "--variants", "huber-max,mse-double")
    assert "run 1/1: huber-max-s0" in again.stdout and "mse-double-s0" not in again.stdout.split("\n\n")[0]
    for name, loss, target in (("huber-max-s0", "huber", "max"), ("mse-double-s0", "mse", "double")):
        cfg = json.loads((tmp_path / "runs" / name / "config.json").read_text())
        g = cfg["gorila"]
        assert (cfg["learn"]["algo"], g["dqn_loss"], g["dqn_target"]) == ("gorila", loss, target)
        assert json.loads((tmp_path / "runs" / name / "eval-greedy.json").read_text())["episodes"] == 2
    res = json.loads((tmp_path / "out" / "dqn_loss.json").read_text())
    assert {r["run"] for r in res["runs"]} == {"huber-max-s0", "mse-double-s0"}
    assert all(r["frames"] >= 2000 and r["updates"] > 0 and 0 < r["eval_mean"] <= 500 for r in res["runs"])
    assert res["paired"]["mse-double vs huber-max"]["eval_mean"]["seeds"] == 1
    assert (tmp_path / "out" / "dqn_loss.png").exists()


def test_schedule_rotates_the_variants_per_seed():
    assert schedule(["a", "b", "c"], 2) == [("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1)]


def test_paired_counts_seeds_higher_and_lower():
    def res(variant: str, seed: int, ev: float | None) -> RunResult:
        return RunResult(f"{variant}-s{seed}", variant, seed, 0, 0, None, None, None, ev, 2, [], [])

    runs = [res("base", 0, 10.0), res("new", 0, 30.0), res("base", 1, 50.0), res("new", 1, 40.0),
            res("base", 2, 5.0), res("new", 2, None), res("new", 3, 99.0)]  # seed 2 incomplete, seed 3 unpaired
    assert paired(runs, "new", "base", "eval_mean") == {"seeds": 2, "higher": 1, "lower": 1,
                                                        "median_difference": 5.0}


def test_pairs_compare_with_the_default_and_double_with_max():
    assert pairs(["huber-max", "mse-max", "huber-double", "mse-double"]) == [
        ("mse-max", "huber-max"), ("huber-double", "huber-max"), ("mse-double", "huber-max"), ("mse-double", "mse-max")]
    assert pairs(["mse-max", "mse-double"]) == [("mse-double", "mse-max")]
