"""benchmarks/collapse_diagnosis.py, small: the committed runs' collapse rows and a short synchronous probe."""
from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys

import pytest

from conftest import ROOT, subprocess_env


def test_collapse_diagnosis_smoke(tmp_path):
    p = subprocess.run([sys.executable, "-m", "benchmarks.collapse_diagnosis", "--probe-lrs", "0.06", "--probe-seeds", "0",
                        "--probe-updates", "100", "--guard-seeds", "", "--out", str(tmp_path)],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads((tmp_path / "collapse-diagnosis.json").read_text())
    # the Breakout branch: one process from update 20,860 on, its entropy back above 1 at its last row
    b = res["breakout_collapsed_run"]
    assert b["process_first_rows_at_update"][-1] == 20860 and b["rows"][-1]["entropy"] > 1.0
    assert any(r["entropy"] < 1e-6 for r in b["rows"])
    # every committed collapse row is found, each with the rows around it
    assert all(min(r["entropy"] for r in c["rows"]) < 1e-3 for c in res["committed_runs"]) and res["committed_runs"]
    probe = res["probe"][0]
    assert probe["lr"] == 0.06 and probe["updates"] == 100
    # the reproducer reproduces: the softmax saturates within 100 updates (at update 78 on this project's machine)
    assert probe["first_update_entropy_below_1e-3"] is not None, probe
    assert (tmp_path / "collapse-diagnosis.png").stat().st_size > 1000
    assert len(probe["before_vs_burst"]["burst_logit_gap_after"]) == probe["before_vs_burst"]["burst_updates"]
    # every update of the plotted run, one CSV row each, with the heads' extremes and the layer that moved most
    rows = list(csv.DictReader(open(tmp_path / "collapse-diagnosis-probe.csv")))
    assert [int(r["update"]) for r in rows] == list(range(1, 101))
    assert all(float(r["logit_abs_max_after"]) >= 0 and ":" in r["largest_layer_step"] for r in rows)
    assert probe["env"] == "CartPole-v1" and probe["learn"] == {}


def test_probe_learn_overrides():
    from benchmarks.collapse_diagnosis import learn_overrides

    assert learn_overrides("clip_norm=0.1, lr_adapt=kl") == {"clip_norm": 0.1, "lr_adapt": "kl"}
    assert learn_overrides("") == {}
    for bad, says in (("clip_nrom=0.1", "NAME one of"), ("clip_norm", "NAME one of"), ("n_step=five", "takes a int")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            learn_overrides(bad)
    with pytest.raises(argparse.ArgumentTypeError, match="lr-adapt: 'bogus' is not one of"):
        learn_overrides("lr_adapt=bogus")  # the trainer's own validation: choices and ranges


def test_decorrelate_games_puts_fixed_length_games_out_of_step():
    """Boxing's games last a fixed 1,783 agent steps, so environments started together stay in step for the whole
    run; the probe's --probe-decorrelate restarts each one a random number of steps before training begins."""
    import numpy as np

    from benchmarks.collapse_diagnosis import decorrelate_games
    from ba3c.simulators import ATARI, make_simulator, resolve_env

    span, n = 300, 6
    sim = make_simulator(resolve_env("boxing"), n, n, 1, 108_000)
    try:
        sim.reset(0)
        b = decorrelate_games(sim, span, np.random.default_rng(3), 0)
        k = np.random.default_rng(3).integers(0, span, n)  # the steps each environment played into its new game
        assert list(b.env_ids) == list(range(n))
        # each game's frame number: its k agent steps (4 frames each) plus its 0-30 no-op start and the FIRE reset
        slack = ATARI.frameskip * (ATARI.noop_max + 2)
        assert np.all(np.abs(b.episode_frame - ATARI.frameskip * k) <= slack), (b.episode_frame, k)
        assert np.ptp(b.episode_frame) > 2 * slack  # out of step by more than the no-op starts put them
    finally:
        sim.close()
    sim = make_simulator(resolve_env("boxing"), 4, 2, 1, 108_000)  # asynchronous: ALE cannot restart single games
    try:
        sim.reset(0)
        with pytest.raises(ValueError, match="synchronous simulation"):
            sim.reset_some(np.ones(4, bool), 0)
    finally:
        sim.close()
    p = subprocess.run([sys.executable, "-m", "benchmarks.collapse_diagnosis", "--probe-decorrelate", "100",
                        "--guard-seeds", ""], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2 and "needs an Atari --probe-env" in p.stderr
