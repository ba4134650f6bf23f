"""The algorithm interface proven from outside the package: REINFORCE (tests/plugins/reinforce.py, one file)
trains CartPole through the trainer's own entry point, checkpoints, resumes, evaluates and runs on two ranks
with identical weights; registered by one line (its import path on the command line, or `register`)."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import pytest

from ba3c import checkpoint as ckpt
from conftest import ROOT, mpirun, run_train, subprocess_env

PLUGIN = "tests.plugins.reinforce:Reinforce"  # the registration: --algo takes an import path
CARTPOLE = ["--algo", PLUGIN, "--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch",
            "32", "--stats-interval-updates", "5", "--log-interval-s", "0.5", "--intra-op-threads", "1"]


def rows(run) -> list[dict]:
    with open(run / "progress.csv", newline="") as fh:
        return list(csv.DictReader(fh))


def test_the_plugin_is_found_by_its_import_path_and_by_register():
    from ba3c import algos
    from ba3c.config import Config, ConfigError
    from tests.plugins.reinforce import Reinforce

    assert isinstance(algos.get(PLUGIN), Reinforce)
    algos.register("reinforce-test", Reinforce)
    cfg = Config().replace(algo="reinforce-test")
    assert algos.get(cfg.learn.algo).eval_policy == "sampled"
    with pytest.raises(ConfigError, match="unknown algorithm 'nope'"):
        algos.checked(Config().replace(algo="nope"))
    with pytest.raises(ConfigError, match="cannot be loaded"):
        algos.algorithm("tests.plugins.reinforce:Missing")
    with pytest.raises(ValueError, match="built-in"):
        algos.register("gorila", Reinforce)


@pytest.mark.slow
def test_a_plugin_trains_checkpoints_resumes_and_evaluates(tmp_path):
    run = tmp_path / "reinforce"
    first = run_train([*CARTPOLE, "--total-frames", "3000", "--run-dir", str(run)])
    assert "ba3c: done" in first.stdout
    saved = json.loads((run / "config.json").read_text())
    assert saved["learn"]["algo"] == PLUGIN and saved["learn"]["lr_scaling"] == "none"  # the plug-in's default
    assert {"pg_loss", "baseline_loss", "entropy"} <= set(rows(run)[-1])  # its loss's statistics, by name
    second = run_train(["--resume", str(run), "--total-frames", "6000"])
    assert "resuming from" in second.stdout and "ba3c: done" in second.stdout
    assert int(rows(run)[-1]["frames"]) >= 6000
    # a child process, as a user runs it: in this (pytest-xdist) process TensorFlow may already be initialised by an
    # earlier test, and the evaluation sets its thread counts
    ev = subprocess.run([sys.executable, "-m", "ba3c.evaluate", str(run), "--episodes", "2", "--num-envs", "2"],
                        cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert ev.returncode == 0, ev.stdout[-2000:] + ev.stderr[-2000:]
    assert json.loads((run / "eval-sampled.json").read_text())["protocol"]["name"] == "sampled"


@pytest.mark.mpi
def test_a_plugin_on_two_ranks_ends_on_identical_weights(tmp_path):
    run = tmp_path / "reinforce2"
    p = mpirun(2, ["-m", "ba3c.train", *CARTPOLE, "--total-frames", "4000", "--run-dir", str(run), "--dist", "mpi"],
               timeout=300)
    assert p.stdout.count("ba3c: done") == 1
    meta = json.loads((run / "meta.json").read_text())
    assert meta["ranks"] == 2
    sums = ckpt.load_latest(str(run / "checkpoints")).meta["rank_weight_checksums"]
    assert len(sums) == 2 and sums[0] == sums[1]
