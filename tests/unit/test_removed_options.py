"""Options removed after runs were saved with them (config.REMOVED_OPTIONS: --lr-adapt with its --kl-* knobs,
--advantage-norm, --lr-decay, --exchange): a run directory written before the removal still resumes and
evaluates; one that trained with a removed behaviour is refused on resume in one line naming it, and still
evaluates (same network)."""
from __future__ import annotations

import csv
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from ba3c import checkpoint as ckpt
from ba3c.config import Config, ConfigError, all_option_names, saved_config
from ba3c.evaluation import checkpoint_config
from ba3c.removed import REMOVED_IN, REMOVED_OPTIONS
from ba3c.resume import config_changes
from ba3c.state import RunState
from ba3c.train import resolve
from conftest import ROOT, run_train, subprocess_env

# What runs saved before the removal hold (their defaults then), and a run that used the removed behaviours
OLD_DEFAULTS = {"lr_adapt": "none", "kl_target": 0.002, "kl_lr_max": 1.0, "kl_samples": 256, "advantage_norm": "none",
                "lr_decay": "none", "lr_decay_frames": 0, "exchange": "sync"}
OLD_KL = {**OLD_DEFAULTS, "lr_adapt": "kl", "kl_lr_max": 16.0}
OLD_ADVNORM = {**OLD_DEFAULTS, "advantage_norm": "batch"}
OLD_DECAY = {**OLD_DEFAULTS, "lr_decay": "linear", "lr_decay_frames": 20_000_000}
OLD_OVERLAP = {**OLD_DEFAULTS, "exchange": "overlap"}
OLD_PROGRESS_EXTRA = ("kl", "kl_step", "step_kept")  # progress.csv columns that only --lr-adapt kl filled


def to_old_format(run, learn: dict) -> dict:
    """Rewrite a run directory as the version before the removal wrote it: config.json and every checkpoint's
    meta with the removed options in `learn` (and the meta's --lr-adapt multiplier), progress.csv with the
    columns only they filled. Returns the old config."""
    cfg = json.loads((run / "config.json").read_text())
    cfg["learn"].update(learn)
    (run / "config.json").write_text(json.dumps(cfg, indent=2))
    for path in ckpt.list_all(str(run / "checkpoints")):
        c = ckpt.read_verified(path)
        meta = {**c.meta, "config": cfg, "lr_adapt": 1.0 if learn["lr_adapt"] == "none" else 3.2}
        ckpt.save(str(run / "checkpoints"), int(meta["updates"]), c.arrays, meta, keep=10)
    with open(run / "progress.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        fields, rows = list(reader.fieldnames or []), list(reader)
    i = fields.index("noise_scale")
    fields[i:i] = OLD_PROGRESS_EXTRA
    with open(run / "progress.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows({**r, **dict.fromkeys(OLD_PROGRESS_EXTRA, "")} for r in rows)
    return cfg


def old_run_without_training(run, learn: dict) -> dict:
    """A run directory of the old format with one checkpoint (arrays that no network reads), no training."""
    saved = Config().replace(env="CartPole-v1", run_dir=str(run)).to_dict()
    saved["learn"].update(learn)
    run.mkdir()
    (run / "config.json").write_text(json.dumps(saved))
    meta = {"config": saved, "model": "mlp", "num_actions": 2, "obs_shape": [4], "updates": 7, "frames": 140,
            "episodes": 1, "lr_adapt": 1.0}
    ckpt.save(str(run / "checkpoints"), 7, [np.zeros(2, np.float32)], meta, 3)
    return saved


def test_the_removed_options_are_gone_and_named_with_a_commit():
    assert not set(REMOVED_OPTIONS) & set(all_option_names())
    assert set(REMOVED_IN) == set(REMOVED_OPTIONS)
    assert all(re.fullmatch(r"[0-9a-f]{12}", c) for c in REMOVED_IN.values()), REMOVED_IN


def test_old_configs_holding_the_remaining_behaviour_load_silently(tmp_path):
    """`none` was what every other run did: resume and evaluation read the config as if the options never
    existed, and the resume records no change."""
    run = tmp_path / "old"
    old = old_run_without_training(run, OLD_DEFAULTS)
    assert saved_config(old) == saved_config({g: {k: v for k, v in o.items() if k not in REMOVED_OPTIONS}
                                              for g, o in old.items()})
    resumed, is_resume = resolve(["--resume", str(run)])
    assert is_resume and config_changes(old, resumed) == {}
    c = ckpt.load_latest(str(run / "checkpoints"))
    assert c is not None and checkpoint_config(c)[1].sim.env == "CartPole-v1"
    assert RunState.from_meta(c.meta).updates == 7  # the meta's lr_adapt is not read
    flat = tmp_path / "flat.json"  # a flat --config file of that time
    flat.write_text(json.dumps({"lr": 1e-3, **OLD_DEFAULTS}))
    assert resolve(["--config", str(flat)])[0].learn.lr == 1e-3


@pytest.mark.parametrize("learn, flag", [(OLD_KL, "--lr-adapt kl"), (OLD_ADVNORM, "--advantage-norm batch"),
                                         (OLD_DECAY, "--lr-decay linear"), (OLD_OVERLAP, "--exchange overlap")])
def test_a_run_that_used_a_removed_behaviour_is_refused_on_resume_but_evaluates(tmp_path, learn, flag):
    run = tmp_path / "removed"
    old_run_without_training(run, learn)
    # one line before TensorFlow, naming the option and the commit that still has it
    p = subprocess.run([sys.executable, "-m", "ba3c.train", "--resume", str(run)], cwd=ROOT, env=subprocess_env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ba3c: error: --resume:"), p.stderr
    commit = REMOVED_IN[flag.split()[0][2:].replace("-", "_")]
    assert flag in lines[0] and "no longer has" in lines[0] and f"git commit {commit}" in lines[0]
    with pytest.raises(ConfigError, match=re.escape(flag)):  # its config.json given as --config
        resolve(["--config", str(run / "config.json")])
    c = ckpt.load_latest(str(run / "checkpoints"))
    assert c is not None and checkpoint_config(c)[1].learn.lr == Config().learn.lr  # evaluation reads it


@pytest.mark.slow
def test_an_old_run_directory_resumes_and_evaluates(tmp_path, tiny_cartpole):
    """A real run rewritten into the old format resumes to the end; as one that trained with --lr-adapt kl it is
    refused on resume and still evaluates (the old format's checkpoint meta and config read by ba3c.evaluate)."""
    run = tmp_path / "old"
    run_train([*tiny_cartpole, "--total-frames", "400", "--run-dir", str(run)], timeout=300)
    to_old_format(run, OLD_DEFAULTS)
    before = ckpt.load_latest(str(run / "checkpoints"))
    p = run_train(["--resume", str(run), "--total-frames", "800"], timeout=300)
    assert "resuming from" in p.stdout and "resume changes total_frames: 400 -> 800\n" in p.stdout  # nothing else
    after = ckpt.load_latest(str(run / "checkpoints"))
    assert before is not None and after is not None and after.meta["updates"] > before.meta["updates"]
    assert "lr_adapt" not in after.meta and "lr_adapt" not in json.loads((run / "config.json").read_text())["learn"]
    with open(run / "progress.csv", newline="") as fh:
        reader = csv.DictReader(fh)
        rows = list(reader)
    assert not set(OLD_PROGRESS_EXTRA) & set(reader.fieldnames or [])  # the resume rewrote the header
    updates = [int(r["updates"]) for r in rows]
    assert updates == sorted(updates) and int(rows[-1]["frames"]) >= 800

    # the same run as one that trained with --lr-adapt kl: refused on resume, evaluated all the same
    to_old_format(run, OLD_KL)
    p = run_train(["--resume", str(run), "--total-frames", "1200"], timeout=60, check=False)
    assert p.returncode == 2 and "--lr-adapt kl" in p.stderr
    e = subprocess.run([sys.executable, "-m", "ba3c.evaluate", str(run), "--episodes", "2", "--num-envs", "2",
                        "--json", str(run / "eval.json")], cwd=ROOT, env=subprocess_env(), capture_output=True,
                       text=True, timeout=300)
    assert e.returncode == 0, e.stderr
    assert json.loads((run / "eval.json").read_text())["episodes"] == 2
