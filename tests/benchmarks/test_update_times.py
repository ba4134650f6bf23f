"""benchmarks/update_times.py on the real trainer: one end time per update the run reports.

It wraps `ba3c.runner.Trainer._train`; were that method renamed (and the wrapper's target kept alive
elsewhere), the file would hold no times and this test fails on the count."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from ba3c import checkpoint as ckpt
from conftest import ROOT, subprocess_env


@pytest.mark.slow
def test_one_increasing_time_per_update_of_a_tiny_cartpole_run(tmp_path, tiny_cartpole):
    run, out = tmp_path / "cp", tmp_path / "ends.npy"
    cmd = [sys.executable, "-m", "benchmarks.update_times", str(out), *tiny_cartpole,
           "--total-frames", "1600", "--run-dir", str(run)]
    p = subprocess.run(cmd, cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, f"exited {p.returncode}\nstdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
    ends = np.load(out)
    updates = json.loads((run / "meta.json").read_text())["final_update"]
    last = ckpt.load_latest(str(run / "checkpoints"))
    assert updates > 1 and last is not None and last.meta["updates"] == updates
    assert ends.dtype == np.float64 and ends.shape == (updates,)
    assert np.isfinite(ends).all() and (np.diff(ends) > 0).all()


def test_refuses_an_output_that_is_not_npy():
    p = subprocess.run([sys.executable, "-m", "benchmarks.update_times", "out.json", "--env", "CartPole-v1"],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "usage" in p.stderr and "Traceback" not in p.stderr
