"""studies/life_loss_compare on tiny Breakout runs: both variants to the same frames, in
alternating turns, continued by a second invocation, and compared at the same frame marks."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env

TINY = ["--", "--num-envs", "8", "--predict-batch", "4", "--train-batch", "32", "--log-interval-s", "0.5",
        "--stats-interval-updates", "5"]


def _compare(tmp_path, frames: int, *more: str) -> subprocess.CompletedProcess:
    p = subprocess.run([sys.executable, "-m", "studies.life_loss_compare", "--env", "breakout", "--frames",
                        str(frames), "--seeds", "3", "--segment-minutes", "5", "--mark-every", "1024", "--nice", "0",
                        "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path / "out"), *more, *TINY],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    return p


@pytest.mark.slow
def test_life_loss_compare_breakout(tmp_path):
    first = _compare(tmp_path, 1500)
    turns = [line.split(":")[1].strip() for line in first.stdout.splitlines() if "frames so far" in line]
    assert turns == ["ignore-s3", "terminal-s3"]
    assert "evaluating" not in first.stdout  # no --eval-episodes
    second = _compare(tmp_path, 3000, "--eval-episodes", "2")  # continues both runs, then evaluates them
    assert [line.split(":")[1].strip() for line in second.stdout.splitlines() if "frames so far" in line] == \
        ["ignore-s3", "terminal-s3"]
    res = json.loads((tmp_path / "out" / "life_loss_compare-breakout.json").read_text())
    runs = {r["run"]: r for r in res["runs"]}
    assert set(runs) == {"ignore-s3", "terminal-s3"}
    for name, variant in (("ignore-s3", "ignore"), ("terminal-s3", "terminal")):
        d = tmp_path / "runs" / name
        assert json.loads((d / "config.json").read_text())["sim"]["life_loss"] == variant
        assert json.loads((d / "meta.json").read_text())["resumed_from_update"] > 0
        assert runs[name]["frames"] >= 3000 and runs[name]["seed"] == 3
        assert (tmp_path / "out" / f"life_loss_compare-breakout-{name}-progress.csv").exists()
        ev = runs[name]["evaluation"]  # the paper protocol at the final checkpoint; its JSON stays in the run
        assert ev["policy"] == "paper" and ev["episodes"] == 2 and ev["frames"] == runs[name]["frames"]
        assert (d / "eval-paper-final.json").exists() and not list((tmp_path / "out").glob("eval-*.json"))
        assert ev["fire_after_life_loss"].startswith("FIRE") == (variant == "terminal")
    assert set(res["final_eval_mean_per_variant"]) == {"ignore", "terminal"}
    assert all(m is not None for m in res["final_eval_mean_per_variant"].values())
    assert res["marks"] == [1024, 2048]
    assert res["curve_mean_frames"] == min(r["frames"] for r in res["runs"])  # the stretch every run has
    assert set(res["curve_mean_per_run"]) == set(runs) and set(res["curve_mean_per_variant"]) == {"ignore", "terminal"}
    # --analyze-only reads the kept progress copies when the run directories are gone
    shutil.rmtree(tmp_path / "runs")
    p = subprocess.run([sys.executable, "-m", "studies.life_loss_compare", "--env", "breakout", "--frames", "3000",
                        "--seeds", "3", "--mark-every", "1024", "--runs-dir", str(tmp_path / "runs"), "--out",
                        str(tmp_path / "out"), "--analyze-only"], cwd=ROOT, env=subprocess_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    again = json.loads((tmp_path / "out" / "life_loss_compare-breakout.json").read_text())
    assert [r["frames"] for r in again["runs"]] == [r["frames"] for r in res["runs"]]
    assert [r["evaluation"] for r in again["runs"]] == [r["evaluation"] for r in res["runs"]]  # kept in the JSON


def test_marks_and_variant_means():
    from measure.harness import curve_mean
    from studies.life_loss_compare.life_loss_compare import RunResult, at_mark, variant_means

    rows = [{"frames": "500", "return_mean20": ""}, {"frames": "900", "return_mean20": "1.5"},
            {"frames": "1100", "return_mean20": "2.5"}, {"frames": "2100", "return_mean20": "4.0"}]
    assert at_mark(rows, 400) is None                # nothing finished before it
    assert at_mark(rows, 1000) == 1.5 and at_mark(rows, 2000) == 2.5 and at_mark(rows, 2100) == 4.0
    assert at_mark(rows, 3000) is None               # not reached yet
    # the curve averaged over frames: 2.5 over 900-1100, then 4.0 over 1100-2100 (the first value has no span)
    assert curve_mean(rows, 2100) == (2.5 * 200 + 4.0 * 1000) / 1200
    assert curve_mean(rows, 2000) == 2.5             # rows past the end are left out
    assert curve_mean(rows, 900) is None and curve_mean(rows, 3000) is None

    def res(variant, seed, marks):
        return RunResult(f"{variant}-s{seed}", variant, seed, 0, 0, 0.0, None, marks, [], [], [])

    results = [res("ignore", 0, {"1000": 1.0, "2000": 3.0}), res("ignore", 1, {"1000": 2.0, "2000": None}),
               res("terminal", 0, {"1000": 5.0, "2000": 6.0})]
    means = variant_means(results, [1000, 2000], ["ignore", "terminal"], [0, 1])
    assert means["ignore"] == {"1000": 1.5, "2000": None}       # a mean only where every seed has a value
    assert means["terminal"] == {"1000": None, "2000": None}    # seed 1 has not run at all
