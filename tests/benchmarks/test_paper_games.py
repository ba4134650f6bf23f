"""benchmarks/paper_games.py on CartPole: trains each seed to the cap, keeps its state, evaluates it once into its
own JSON, rebuilds the scores table with the seeds together, and a later invocation skips what is done."""
from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys

import pytest

from benchmarks import compare, paper_games
from conftest import ROOT, subprocess_env

TRAINER = ["--", "--num-envs", "8", "--predict-batch", "8", "--train-batch", "40", "--lr", "1e-3",
           "--lr-scaling", "none"]


def run(tmp_path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "benchmarks.paper_games", "--runs-dir", str(tmp_path / "runs"),
                           "--state-root", str(tmp_path / "state"), "--out", str(tmp_path / "out"), "--nice", "0",
                           *args], cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=timeout)


def status_rows(stdout: str) -> list[tuple[str, str]]:
    """(game, seed) of each row of the first status table printed."""
    lines = stdout.splitlines()
    assert lines[0].split()[:2] == ["game", "seed"]
    rows = []
    for ln in lines[1:]:
        if ln.startswith(("game ", "paper_games:", "time_to_score:")) or not ln.strip():
            break
        rows.append(tuple(ln.split()[:2]))
    return rows


@pytest.mark.slow
def test_two_seeds_are_trained_kept_evaluated_and_shown_together(tmp_path):
    # target 1: every evaluation reaches it (a CartPole episode scores >= 8), so the test does not hang on learning
    common = ["--eval-every-frames", "10000", "--eval-episodes", "4", "--final-episodes", "6", "--max-hours", "0.1"]
    # seed 0 alone first; then the plan with seeds 0 and 1: seed 0 is done and skipped, seed 1 trained
    p = run(tmp_path, "--games", "CartPole-v1:1:40000:0", *common, *TRAINER)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    p = run(tmp_path, "--games", "CartPole-v1:1:40000:0,1", *common, *TRAINER)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "cartpole-v1-s0: training" not in p.stdout and "cartpole-v1-s1: training" in p.stdout
    assert p.stdout.count("-m ba3c.evaluate") == 1

    tts, scores = tmp_path / "out" / "time_to_score", tmp_path / "out" / "scores"
    evals = []
    for seed in (0, 1):
        res = json.loads((tts / f"time_to_score-cartpole-v1-games2-s{seed}.json").read_text())
        # trained to the cap with its own seed; the first evaluation at the target is recorded, not a reason to stop
        assert res["frames_total"] >= 40000 and "--seed" in res["command"]
        assert res["command"][res["command"].index("--seed") + 1] == str(seed)
        assert res["reached"] and res["frames_to_target"] < res["frames_total"]
        assert list((tmp_path / "state" / f"cartpole-v1-s{seed}" / "checkpoints").glob("ckpt-*.npz"))
        ev = json.loads((scores / f"eval-cartpole-v1-paper-games2-s{seed}.json").read_text())
        assert ev["policy"] == "paper" and ev["episodes"] == 6 and ev["frames"] == res["frames_total"]
        assert ev["train_seed"] == seed and ev["campaign"] == "games2"
        evals.append(ev)
    assert [ln.endswith("done, target reached by a periodic evaluation")
            for ln in p.stdout.rstrip().splitlines()[-2:]] == [True, True]

    # the two seeds as one row: the mean of their 50-game (here 6-game) means, their range, all core-hours
    means = [ev["score"]["mean"] for ev in evals]
    [row] = compare.campaign_rows(compare.build_rows(compare.find_evals([scores]), {}))
    assert row.game == "CartPole-v1" and row.seeds == (0, 1) and row.campaign == "games2"
    assert row.mean == pytest.approx(statistics.fmean(means))
    assert (row.low, row.high) == (min(means), max(means))
    assert row.core_hours == pytest.approx(sum(ev["core_hours"] for ev in evals))
    md = (scores / "SCORES.md").read_text()
    line = next(ln for ln in md.split("## Campaigns")[1].splitlines() if ln.startswith("| CartPole-v1 |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    m = re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cells[1])
    assert m, cells[1]
    shown = [float(x.replace(",", "")) for x in m.groups()]
    assert shown == pytest.approx([statistics.fmean(means), min(means), max(means)], abs=0.051)  # as rounded
    assert cells[2] == "2 seeds (0, 1), games2"
    assert float(cells[5]) == pytest.approx(sum(ev["core_hours"] for ev in evals), abs=0.0051)
    # each seed also has its own row
    seed_rows = [ln for ln in md.split("## Campaigns")[0].splitlines() if ln.startswith("| CartPole-v1 |")]
    assert len(seed_rows) == 2 and "campaign games2" in seed_rows[1] and "training seed 1" in seed_rows[1]

    # again: nothing to train or evaluate
    p = run(tmp_path, "--games", "CartPole-v1:1:40000:0,1", *common, *TRAINER, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "training" not in p.stdout and "-m ba3c.evaluate" not in p.stdout


def test_the_plan_runs_every_game_once_before_the_extra_seeds():
    order = [(r.game.name, r.seed) for r in paper_games.plan(paper_games.GAMES)]
    assert order == [("breakout", 0), ("boxing", 0), ("space_invaders", 0), ("seaquest", 0), ("beam_rider", 0),
                     ("pong", 0), ("breakout", 1), ("boxing", 1), ("breakout", 2), ("boxing", 2)]
    assert {g.frame_cap for g in paper_games.GAMES} == {40_000_000}
    assert paper_games.parse_game("cartpole:1:1e4:2,0") == paper_games.Game("cartpole", 1.0, 10_000, (2, 0))
    assert paper_games.parse_game("cartpole:1:1e4").seeds == (0,)


def test_status_and_bad_plans(tmp_path):
    p = run(tmp_path, "--status", timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert status_rows(p.stdout) == [("breakout", "0"), ("boxing", "0"), ("space_invaders", "0"), ("seaquest", "0"),
                                     ("beam_rider", "0"), ("pong", "0"), ("breakout", "1"), ("boxing", "1"),
                                     ("breakout", "2"), ("boxing", "2")]
    assert all(ln.endswith("not started") for ln in lines[1:])
    # an evaluation of older frames than the run's does not count: the run is evaluated again; the collapse guard's
    # rollbacks are counted from the kept events CSV
    tts, scores = tmp_path / "out" / "time_to_score", tmp_path / "out" / "scores"
    tts.mkdir(parents=True)
    scores.mkdir()
    (tts / "time_to_score-breakout-games2-s0.json").write_text(json.dumps(
        {"frames_total": 40_000_000, "best_criterion": 371.5}))
    (tts / "time_to_score-breakout-games2-s0-events.csv").write_text(
        "time_s,frames,event\n90.8,450560,rollback\n95.0,460000,restore\n")
    (scores / "eval-breakout-paper-games2-s0.json").write_text(json.dumps({"frames": 18_616_320}))
    # the earlier campaign's files are not this campaign's runs
    (tts / "time_to_score-boxing-games.json").write_text(json.dumps({"frames_total": 20_000_000}))
    (scores / "eval-boxing-paper.json").write_text(json.dumps({"frames": 20_000_000}))
    p = run(tmp_path, "--status", timeout=120)
    lines = p.stdout.splitlines()
    assert lines[1].endswith("trained, not evaluated, target reached by a periodic evaluation")
    assert lines[1].split()[6] == "1"  # rollbacks
    assert lines[2].split()[:2] == ["boxing", "0"] and lines[2].endswith("not started")

    p = run(tmp_path, "--games", "cartpole:1:1000:0,1", "--status", timeout=120)
    assert p.returncode == 0 and status_rows(p.stdout) == [("cartpole", "0"), ("cartpole", "1")]
    for bad, says in (("pong:20", "NAME:TARGET:FRAME_CAP[:SEEDS]"), ("cartpole:1:1000:0,x", "SEEDS must be"),
                      ("cartpole:1:1000:1,1", "SEEDS must be"), ("cartpole:1:1000:-1", "SEEDS must be"),
                      ("cartpole:1:1000:", "SEEDS must be"), ("cartpole:1:1000:0:1", "NAME:TARGET:FRAME_CAP")):
        p = run(tmp_path, "--games", bad, "--status", timeout=120)
        errors = [ln for ln in p.stderr.splitlines() if "error:" in ln]
        assert p.returncode == 2 and len(errors) == 1 and says in errors[0], (bad, p.stderr)
    p = run(tmp_path, "--games", "cartpole:1:1000:0", "--", "--seed", "3", timeout=120)
    assert p.returncode == 2 and "each run's seed comes from the plan" in p.stderr
    p = run(tmp_path, "--games", "cartpole:1:1000:0", "cartpole:1:1000:1", timeout=120)
    assert p.returncode == 2 and "names a game twice" in p.stderr
    p = run(tmp_path, "--max-hours", "0", timeout=120)
    assert p.returncode == 2 and "--max-hours must be > 0" in p.stderr
