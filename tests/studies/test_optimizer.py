"""The optimizer study (issue 62) and the default it chose: the arms mean the same whatever the default, the
default is the arm the study chose, old runs resume with the optimizer they trained with, and the analysis of
the kept CSVs counts the guard's rollbacks from events.csv."""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

from ba3c.config import Config
from ba3c.train import resolve
from conftest import ROOT, subprocess_env
from studies.optimizer import optimizer

ADAM = ("beta1", "beta2", "adam_eps")


def _adam(argv: list[str]) -> tuple[float, float, float]:
    cfg, _ = resolve(["--env", "breakout", *argv])
    return cfg.learn.beta1, cfg.learn.beta2, cfg.learn.adam_eps


def test_every_adam_arm_names_its_betas_and_epsilon():
    """An arm that left one to the default would change meaning when the default changed (as it did)."""
    for arm in ("old-default", "adam-b2-0.75", "adam-b2-0.99", "adam-b2-0.9"):
        flags = optimizer.ARMS[arm]
        assert all(f"--{name.replace('_', '-')}" in flags for name in ADAM), arm
    assert _adam(optimizer.ARMS["old-default"]) == (0.9, 0.999, 1e-5)
    assert _adam(optimizer.ARMS["adam-b2-0.9"]) == (0.9, 0.9, 1e-5)


def test_the_default_is_the_arm_the_study_chose_and_gorila_keeps_its_own():
    assert _adam([]) == _adam(optimizer.ARMS["adam-b2-0.75"]) == (0.8, 0.75, 1e-8)
    assert _adam(["--algo", "gorila"]) == (0.9, 0.999, 1e-8)  # PyTorch's betas, as Gorila was measured with
    assert _adam(["--algo", "gorila", "--beta2", "0.75"])[1] == 0.75  # a flag still wins over the algorithm


def test_a_run_saved_with_the_old_default_resumes_with_it(tmp_path):
    run = tmp_path / "old"
    run.mkdir()
    old = Config().replace(run_dir=str(run), beta1=0.9, beta2=0.999, adam_eps=1e-5).to_dict()
    (run / "config.json").write_text(json.dumps(old))
    resumed, is_resume = resolve(["--resume", str(run)])
    assert is_resume and (resumed.learn.beta1, resumed.learn.beta2, resumed.learn.adam_eps) == (0.9, 0.999, 1e-5)


def test_analysis_counts_rollbacks_from_the_kept_events(tmp_path):
    """--analyze-only over copies of the committed screen's CSVs: each run's rollbacks are its events.csv's
    rollback rows (none without an events.csv)."""
    runs = [("old-default", 0), ("old-default", 1), ("adam-b2-0.75", 0), ("adam-b2-0.75", 1)]
    out = tmp_path / "out"
    out.mkdir()
    kept = sorted(Path(optimizer.RESULTS).glob("optimizer-breakout-*-s[01]-*.csv"))
    for f in kept:
        shutil.copy(f, out / f.name)
    p = subprocess.run([sys.executable, "-m", "studies.optimizer", "--env", "breakout", "--arms",
                        "old-default,adam-b2-0.75", "--seeds", "0,1", "--runs-dir", str(tmp_path / "none"),
                        "--out", str(out), "--analyze-only"],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    res = json.loads((out / "optimizer-breakout.json").read_text())
    by_name = {r["run"]: r for r in res["runs"]}
    assert set(by_name) == {f"{arm}-s{seed}" for arm, seed in runs}
    for arm, seed in runs:
        events = out / f"optimizer-breakout-{arm}-s{seed}-events.csv"
        want = 0
        if events.exists():
            with open(events) as fh:
                want = sum(1 for e in csv.DictReader(fh) if e["event"] == "rollback")
        assert by_name[f"{arm}-s{seed}"]["rollbacks"] == want
    assert sum(by_name[f"old-default-s{s}"]["rollbacks"] for s in (0, 1)) > 0  # the screen's finding, kept
