"""The console commands setup.cfg installs beside `python -m`: ba3c-train and ba3c-evaluate, the same entry points."""
from __future__ import annotations

import subprocess

from conftest import BIN, subprocess_env


def test_console_commands_run_the_entry_points(tmp_path):
    train = subprocess.run([str(BIN / "ba3c-train"), "--help"], env=subprocess_env(), capture_output=True, text=True,
                           timeout=60)
    assert train.returncode == 0 and "--total-frames" in train.stdout and "experimental" in train.stdout
    missing = tmp_path / "no-run"
    evaluate = subprocess.run([str(BIN / "ba3c-evaluate"), str(missing)], env=subprocess_env(), capture_output=True,
                              text=True, timeout=60)
    assert evaluate.returncode == 2 and str(missing) in evaluate.stderr  # its one-line refusal, before TensorFlow
    bad = subprocess.run([str(BIN / "ba3c-train"), "--num-envs", "0"], env=subprocess_env(), capture_output=True,
                         text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == "ba3c: error: --num-envs: must be > 0, got 0"
