"""studies/preset_compare on two short CartPole runs (default and paper presets)."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env


def _train(run_dir, preset: str) -> None:
    p = subprocess.run([sys.executable, "-m", "ba3c.train", "--env", "CartPole-v1", "--preset", preset,
                        "--total-frames", "30000", "--num-envs", "8", "--predict-batch", "8", "--log-interval-s", "1",
                        "--run-dir", str(run_dir)], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]


@pytest.mark.slow
def test_preset_compare_cartpole(tmp_path):
    _train(tmp_path / "d", "default")
    _train(tmp_path / "p", "paper")
    cmd = [sys.executable, "-m", "studies.preset_compare", "--runs", f"default={tmp_path / 'd'},paper={tmp_path / 'p'}",
           "--thresholds", "15,20", "--out", str(tmp_path / "out")]
    p = subprocess.run(cmd + ["--measure-seconds", "5", "--warmup", "1"], cwd=ROOT, env=subprocess_env(),
                       capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "preset_compare-CartPole-v1.json").read_text())
    # two cost runs per preset, alternating, each with a positive rate and CPU cost
    assert [c["preset"] for c in res["cost"]] == ["default", "paper", "paper", "default"]
    assert all(c["frames_per_s"] > 0 and c["cpu_s_per_mframe"] > 0 for c in res["cost"])
    # the paper preset updates every 32 samples, the default every 64 (one rank)
    paper = [c for c in res["cost"] if c["preset"] == "paper"][0]
    default = [c for c in res["cost"] if c["preset"] == "default"][0]
    assert abs(paper["updates_per_mframe"] / default["updates_per_mframe"] - 2.0) < 0.2
    for name, preset in (("default", "default"), ("paper", "paper")):
        run = res["runs"][name]
        # both runs costed alike from the cost runs; each run's own CPU seconds reported beside
        assert run["preset"] == preset and run["core_hours_basis"].startswith("modelled")
        assert run["frames_total"] >= 30000 and 0 < run["core_hours_total"] and run["own_cpu_hours_total"] > 0
        assert set(run["reach"]) == {"15.0", "20.0"}
    assert (tmp_path / "out" / "preset_compare-CartPole-v1.png").stat().st_size > 5000

    # without cost runs each run's own cpu_s is used ...
    p = subprocess.run(cmd + ["--measure-seconds", "0"], cwd=ROOT, env=subprocess_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "preset_compare-CartPole-v1.json").read_text())
    assert res["cost"] == [] and res["runs"]["paper"]["core_hours_basis"].startswith("measured")
    # ... and a run without cpu_s then is a clear error, not a silent guess
    csv_path = tmp_path / "d" / "progress.csv"
    lines = csv_path.read_text().splitlines()
    header = lines[0].split(",")
    i = header.index("cpu_s")
    csv_path.write_text("\n".join(",".join(c for k, c in enumerate(l.split(",")) if k != i) for l in lines) + "\n")
    p = subprocess.run(cmd + ["--measure-seconds", "0"], cwd=ROOT, env=subprocess_env(), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0 and "no cpu_s column" in p.stderr
