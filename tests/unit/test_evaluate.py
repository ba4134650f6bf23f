"""Evaluation: statistics and action choice, the score table, and `python -m ba3c.evaluate` end to end."""
from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from ba3c import evaluate as ev, evaluation
from conftest import ROOT, run_train, subprocess_env


def load_compare():
    spec = importlib.util.spec_from_file_location("ba3c_bench_compare", ROOT / "benchmarks" / "compare.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def run_evaluate(args: list[str], timeout: float = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ba3c.evaluate", *args], cwd=ROOT, env=subprocess_env(),
                          capture_output=True, text=True, timeout=timeout)


# ---------------------------------------------------------------- maths

def test_summarize():
    s = evaluation.summarize([1, 2, 3, 4, 10])
    assert s == {"n": 5, "mean": 4.0, "std": pytest.approx(np.sqrt(10.0)), "median": 3.0, "min": 1.0, "max": 10.0}
    one = {"n": 1, "mean": -21.0, "std": 0.0, "median": -21.0, "min": -21.0, "max": -21.0}
    assert evaluation.summarize([-21.0]) == one
    with pytest.raises(ValueError):
        evaluation.summarize([])


def test_greedy_takes_argmax_and_first_of_ties():
    logits = np.array([[0.1, 2.0, -1.0], [5.0, 5.0, 0.0], [-3.0, -2.0, -2.5]], np.float32)
    assert evaluation.greedy_actions(logits).tolist() == [1, 0, 1]
    assert evaluation.choose_actions("greedy", logits, np.random.default_rng(0), 0.05).tolist() == [1, 0, 1]


def test_epsilon_greedy_rates():
    rng = np.random.default_rng(1)
    n, a = 200_000, 4
    logits = np.zeros((n, a), np.float32)
    logits[:, 2] = 1.0  # greedy action is 2 everywhere
    assert (evaluation.epsilon_greedy_actions(logits, 0.0, rng) == 2).all()
    acts = evaluation.epsilon_greedy_actions(logits, 1.0, rng)
    assert np.allclose(np.bincount(acts, minlength=a) / n, 1 / a, atol=0.01)  # uniform over all actions
    acts = evaluation.epsilon_greedy_actions(logits, 0.05, rng)
    # a random action is the greedy one a quarter of the time: P(not greedy) = 0.05 * 3/4
    assert np.mean(acts != 2) == pytest.approx(0.05 * (a - 1) / a, abs=0.003)
    assert acts.dtype == np.int32


def test_sampled_follows_softmax():
    rng = np.random.default_rng(2)
    logits = np.tile(np.log(np.array([0.7, 0.2, 0.1], np.float32)), (100_000, 1))
    freq = np.bincount(evaluation.choose_actions("sampled", logits, rng, 0.05), minlength=3) / len(logits)
    assert np.allclose(freq, [0.7, 0.2, 0.1], atol=0.01)
    with pytest.raises(ValueError, match="unknown policy"):
        evaluation.choose_actions("boltzmann", logits, rng, 0.05)


def prevent_stuck_reference(choices: list[int], repeats: int, action: int) -> list[int]:
    """One episode under tensorpack's PreventStuckPlayer, step by step: the last `repeats` choices
    in a bounded queue; when they are all equal, `action` is played."""
    queue: list[int] = []
    played = []
    for c in choices:
        queue = (queue + [c])[-repeats:]
        played.append(action if len(queue) == repeats and queue.count(queue[0]) == repeats else c)
    return played


def test_anti_stuck_rule_by_hand():
    rule = evaluation.AntiStuck(1, 30, 1)
    on = np.ones(1, bool)
    played = [int(rule(np.zeros(1, np.int32), on)[0]) for _ in range(35)]
    assert played == [0] * 29 + [1] * 6  # the 30th NOOP in a row and every further one become FIRE
    assert rule(np.array([3]), on)[0] == 3 and rule(np.array([0]), on)[0] == 0  # another choice restarts the count
    for _ in range(20):
        rule(np.zeros(1, np.int32), on)
    rule.end_episodes(on)  # 21 NOOPs, then a new episode: the count starts again
    assert [int(rule(np.zeros(1, np.int32), on)[0]) for _ in range(30)] == [0] * 29 + [1]
    # an action sent while the environment resets is ignored by it: neither counted nor replaced
    rule.end_episodes(on)
    for _ in range(28):
        rule(np.zeros(1, np.int32), on)
    assert rule(np.zeros(1, np.int32), ~on)[0] == 0
    assert [int(rule(np.zeros(1, np.int32), on)[0]) for _ in range(2)] == [0, 1]  # the 29th and 30th counted


def test_anti_stuck_rule_matches_prevent_stuck_player():
    """Many environments, random episode ends and runs of repeated choices, against the reference per episode."""
    rng = np.random.default_rng(3)
    n, steps, repeats = 6, 3000, 30
    rule = evaluation.AntiStuck(n, repeats, 1)
    episodes: list[list[tuple[list[int], list[int]]]] = [[([], [])] for _ in range(n)]
    choice = rng.integers(0, 4, n)
    for _ in range(steps):
        change = rng.random(n) < 0.03  # long runs of one action, broken now and then
        choice = np.where(change, rng.integers(0, 4, n), choice)
        played = rule(choice.astype(np.int32), np.ones(n, bool))
        for i in range(n):
            episodes[i][-1][0].append(int(choice[i]))
            episodes[i][-1][1].append(int(played[i]))
        ended = rng.random(n) < 0.004
        rule.end_episodes(ended)
        for i in np.flatnonzero(ended):
            episodes[i].append(([], []))
    replaced = 0
    for env in episodes:
        for chosen, played in env:
            assert played == prevent_stuck_reference(chosen, repeats, 1)
            replaced += sum(a != b for a, b in zip(chosen, played))
    assert replaced > 100 and sum(len(env) for env in episodes) > 2 * n  # the test saw the rule fire, and resets


def test_protocol_names():
    from ba3c.config import RunConfig

    eval_policy = next(f for f in dataclasses.fields(RunConfig) if f.name == "eval_policy")
    assert tuple(eval_policy.metadata["choices"]) == evaluation.POLICIES and eval_policy.default == "paper"
    paper = evaluation.PROTOCOLS["paper"]
    assert (paper.stuck_repeats, paper.stuck_action, paper.max_episode_steps,
            paper.random_action_prob) == (30, 1, 40_000, 0.001)
    assert all(evaluation.PROTOCOLS[p].stuck_repeats == 0 for p in ("greedy", "sampled", "egreedy"))
    # no --policy: each algorithm's own protocol, chosen once the checkpoint says which algorithm trained it
    assert ev.build_parser().parse_args(["run"]).policy is None
    assert ev.default_policy("ba3c") == ev.default_policy() == "paper"
    assert ev.default_policy("gorila") == "egreedy"


def test_episode_quotas_are_balanced():
    assert evaluation.episode_quotas(50, 16).tolist() == [4, 4] + [3] * 14
    assert evaluation.episode_quotas(5, 16).tolist() == [1] * 5  # never more environments than episodes
    for episodes, envs in ((1, 1), (7, 3), (100, 7), (16, 16)):
        q = evaluation.episode_quotas(episodes, envs)
        assert q.sum() == episodes and q.max() - q.min() <= 1


def test_format_table():
    from ba3c.simulators import EnvSpec

    record = evaluation.protocol_record(EnvSpec("atari", "pong"), evaluation.PROTOCOLS["egreedy"], 0.05, 3, 3, 108_000,
                                        ["NOOP", "FIRE", "RIGHT", "LEFT", "RIGHTFIRE", "LEFTFIRE"])
    result = {"score": evaluation.summarize([20, 21, 19]), "length_steps": evaluation.summarize([800, 900, 1000]),
              "protocol": record}
    lines = ev.format_table(result).splitlines()
    assert lines[0].startswith("protocol egreedy: argmax; random action p=0.05; cap 27,000 agent steps")
    assert "sticky 0" in lines[0] and "anti-stuck" not in lines[0]
    assert lines[1].split() == ["mean", "std", "median", "min", "max"]
    assert lines[2].split()[:2] == ["score", "20.00"] and lines[3].startswith("length (agent steps)")


def test_bad_paths_exit_2_with_one_line(tmp_path, capsys):
    assert ev.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no such file or directory" in err[0]
    (tmp_path / "checkpoints").mkdir()
    assert ev.main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no valid checkpoint" in err[0]
    (tmp_path / "ckpt-0000000001.npz").write_bytes(b"not a checkpoint")
    assert ev.main([str(tmp_path / "ckpt-0000000001.npz")]) == 2
    assert "checksum file is missing" in capsys.readouterr().err


# ---------------------------------------------------------------- published scores and the table

def test_published_scores_file():
    cmp = load_compare()
    pub = cmp.load_published(cmp.DEFAULT_PUBLISHED)
    gorila = {g for g, s in pub.items() if "gorila" in s}
    assert len(gorila) == 49
    assert all({"human", "random"} <= set(pub[g]) for g in gorila)
    paper = {g: s["ba3c_paper"].score for g, s in pub.items() if "ba3c_paper" in s}
    assert paper == {"beam_rider": 14900, "boxing": 98, "breakout": 350, "pong": 20, "seaquest": 1832,
                     "space_invaders": 650}
    assert pub["pong"]["gorila"].score == 16.7 and pub["breakout"]["gorila"].score == 313.0
    assert pub["pong"]["human"].score == 9.3 and pub["pong"]["random"].score == -20.7
    # A2C and PPO at 40 M frames for the paper's games (the zoo has no Boxing)
    assert {g for g, s in pub.items() if "a2c_zoo" in s} == set(paper) - {"boxing"}
    assert {g for g, s in pub.items() if "ppo_cleanrl" in s} == set(paper)
    assert pub["breakout"]["a2c_zoo"].score == 279.8 and pub["breakout"]["ppo_cleanrl"].score == 430.1
    from ale_py import roms

    assert set(pub) <= set(roms.get_all_rom_ids()), "game names must be ALE ROM ids, as in our eval JSONs"
    with open(cmp.DEFAULT_PUBLISHED, newline="") as fh:
        assert all(r["citation"] and r["protocol"] for r in csv.DictReader(fh))
    assert cmp.EVAL_SCHEMA == evaluation.SCHEMA


def fake_eval(game: str, policy: str, mean: float, frames: int, date: str, **kw) -> dict:
    return {"schema": evaluation.SCHEMA, "game": game, "policy": policy,
            "epsilon": 0.05 if policy == "egreedy" else None,
            "episodes": 50, "score": {"mean": mean, "std": 1.5}, "frames": frames, "date": date,
            "train_wall_s": 7200.0, "core_hours": 48.0, "protocol": {"max_episode_frames": 108_000}, **kw}


def test_table_from_synthetic_evals(tmp_path):
    cmp = load_compare()
    runs = tmp_path / "runs"
    for name, data in {
        "pong-a/eval-greedy.json": fake_eval("pong", "greedy", 15.0, 1_000_000, "2026-11-01"),
        "pong-b/eval-greedy.json": fake_eval("pong", "greedy", 18.0, 2_000_000, "2026-11-02"),  # more frames: shown
        "breakout/eval-egreedy.json": fake_eval("breakout", "egreedy", 120.0, 5_000_000, "2026-11-03", protocol={
            "max_episode_frames": 108_000, "fire_after_life_loss": "FIRE pressed for the policy after each lost life"}),
        "CartPole/eval-greedy.json": fake_eval("CartPole-v1", "greedy", 500.0, 3_000, "2026-11-03"),
        "pong-b/config.json": {"sim": {"env": "pong"}},  # not an evaluation: ignored
    }.items():
        (runs / name).parent.mkdir(parents=True, exist_ok=True)
        (runs / name).write_text(json.dumps(data))
    (runs / "pong-a" / "broken.json").write_text("{half")
    rows = cmp.build_rows(cmp.find_evals([runs]), cmp.load_published(cmp.DEFAULT_PUBLISHED))
    assert [(r.game, r.policy) for r in rows] == [("CartPole-v1", "greedy"), ("breakout", "egreedy 0.05"),
                                                  ("pong", "greedy")]
    cart, breakout, pong = rows
    assert pong.mean == 18.0 and pong.frames == 2_000_000 and pong.path.endswith("pong-b/eval-greedy.json")
    assert pong.published == {"ba3c_paper": 20.0, "gorila": 16.7, "a2c_zoo": 17.3, "ppo_cleanrl": 20.4, "human": 9.3,
                              "random": -20.7}
    assert breakout.published["ba3c_paper"] == 350.0 and breakout.published["gorila"] == 313.0
    assert cart.published == {}
    assert cmp.human_normalized(9.3, 9.3, -20.7) == pytest.approx(100.0)

    out = tmp_path / "out"
    assert cmp.main([str(runs), "--out", str(out)]) == 0
    md = (out / "SCORES.md").read_text()
    pong_line = next(line for line in md.splitlines() if line.startswith("| Pong |"))
    cells = [c.strip() for c in pong_line.strip("|").split("|")]
    assert cells[:5] == ["Pong", "18.00 ± 1.50", "greedy", "50", "2.0M"]
    assert cells[7:13] == ["20.0", "16.7", "17.3", "20.4", "9.3", "-20.7"]
    assert "| Breakout | 120.0 ± 1.5 | egreedy 0.05, FIRE after a lost life |" in md
    assert "arXiv:1507.04296" in md and "arXiv:1801.02852" in md and "Nature" in md
    assert (out / "scores.png").stat().st_size > 5000
    assert cmp.main([str(tmp_path / "empty-nothing")]) == 2


# ---------------------------------------------------------------- end to end

@pytest.mark.slow
def test_cartpole_train_then_evaluate(tmp_path):
    run = tmp_path / "cp"
    run_train(["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "20",
               "--total-frames", "3000", "--run-dir", str(run)], timeout=240)
    p = run_evaluate([str(run), "--episodes", "5", "--num-envs", "3", "--record", str(tmp_path / "cp.gif")])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert "needs image observations" in p.stderr and not (tmp_path / "cp.gif").exists()
    data = json.loads((run / "eval-paper.json").read_text())  # the paper protocol by default
    assert data["schema"] == evaluation.SCHEMA and data["game"] == "CartPole-v1" and data["policy"] == "paper"
    assert data["episodes"] == 5 == len(data["scores"]) == data["score"]["n"]
    assert data["scores"] == [float(x) for x in data["lengths_steps"]]  # +1 per step: no reset step is counted
    assert data["score"]["mean"] == pytest.approx(np.mean(data["scores"]))
    assert data["frames"] >= 3000 and data["updates"] > 0 and data["checkpoint"].endswith(".npz")
    assert data["algo"] == "ba3c"
    assert data["protocol"]["parallel_envs"] == 3 and data["protocol"]["name"] == "paper"
    # the episode cap is gymnasium's own limit
    assert data["protocol"]["anti_stuck"]["action"] == 1 and data["protocol"]["max_episode_steps"] is None
    assert len(data["anti_stuck_replaced"]) == 5
    assert "protocol paper: argmax" in p.stdout and "score" in p.stdout and "wrote" in p.stdout
    # a run that counted CPU seconds from its start reports them, not wall time x cores
    assert data["cores_basis"].startswith("measured") and 0 < data["core_hours"] < 1


@pytest.mark.slow
def test_pong_evaluate_records_gif(tmp_path):
    run = tmp_path / "pong"
    run_train(["--env", "pong", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "32",
               "--total-frames", "2000", "--run-dir", str(run)], timeout=240)
    ckpts = sorted((run / "checkpoints").glob("ckpt-*.npz"))
    gif, out = tmp_path / "pong.gif", tmp_path / "pong-eval.json"
    p = run_evaluate([str(ckpts[-1]), "--episodes", "1", "--max-episode-frames", "2000", "--policy", "egreedy",
                      "--record", str(gif), "--json", str(out)])
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["game"] == "pong" and data["episodes"] == 1 and data["epsilon"] == 0.05
    # 2000 frames / frameskip 4: the capped episode lasts exactly 500 agent steps
    assert data["lengths_steps"] == [500] and data["truncated_episodes"] == 1
    assert -21 <= data["scores"][0] <= 21 and data["run_dir"] == str(run)
    assert data["protocol"]["max_episode_frames"] == 2000 and data["protocol"]["max_episode_steps"] == 500
    assert data["protocol"]["name"] == "egreedy" and data["protocol"]["random_action_prob"] == 0.05
    assert "protocol egreedy" in p.stdout
    # --life-loss auto: terminal for an Atari game, but Pong has no lives, so FIRE was never pressed for it
    assert json.loads((run / "config.json").read_text())["sim"]["life_loss"] == "terminal"
    assert data["protocol"]["fire_after_life_loss"].startswith("no")
    from PIL import Image

    with Image.open(gif) as im:
        assert im.n_frames > 50 and im.size == (168, 168)
    assert data["recording"]["frames"] == 501  # the start frame and one per step


def constant_policy(num_actions: int, favoured: int):
    """A keras model for 4x84x84 frames whose argmax is always `favoured` (a policy that never presses FIRE)."""
    import keras
    from keras import layers

    inp = keras.Input((4, 84, 84), dtype="uint8")
    x = layers.Lambda(lambda t: keras.ops.zeros((keras.ops.shape(t)[0], 1)))(inp)
    bias = np.zeros(num_actions)
    bias[favoured] = 1.0
    logits = layers.Dense(num_actions, kernel_initializer="zeros",
                          bias_initializer=keras.initializers.Constant(bias))(x)
    return keras.Model(inp, [logits, layers.Dense(1, kernel_initializer="zeros")(x)])


def test_paper_protocol_finishes_breakout_where_greedy_waits():
    """A policy that always chooses NOOP: plain greedy waits after its first lost ball until the cap; under
    the paper protocol the rule presses FIRE and the games end. The cap is small here to keep this fast."""
    from ba3c.simulators import EnvSpec

    model, spec, cap_steps = constant_policy(4, 0), EnvSpec("atari", "breakout"), 1000
    greedy = evaluation.evaluate_model(model, spec, 2, "greedy", num_envs=2, max_episode_frames=4 * cap_steps,
                                       num_threads=1)
    assert greedy["lengths_steps"] == [cap_steps] * 2 and greedy["truncated_episodes"] == 2
    assert greedy["protocol"]["name"] == "greedy" and greedy["protocol"]["anti_stuck"] is None
    assert greedy["anti_stuck_replaced"] is None and greedy["protocol"]["max_episode_steps"] == cap_steps

    paper = evaluation.evaluate_model(model, spec, 2, "paper", num_envs=2, max_episode_frames=4 * cap_steps,
                                      num_threads=1)
    assert paper["truncated_episodes"] == 0 and max(paper["lengths_steps"]) < cap_steps
    # NOOP is chosen every step (bar the rare random action): from the 30th step on it is replaced by FIRE
    assert all(0 < r <= n - 29 for r, n in zip(paper["anti_stuck_replaced"], paper["lengths_steps"]))
    p = json.loads(json.dumps(paper["protocol"]))  # the record as the JSON file holds it
    assert p["name"] == "paper" and p["random_action_prob"] == 0.001 and p["max_episode_steps"] == cap_steps
    assert (p["anti_stuck"]["repeats"], p["anti_stuck"]["action"], p["anti_stuck"]["action_name"]) == (30, 1, "FIRE")
    env = p["environment"]
    assert (env["frameskip"], env["repeat_action_probability"], env["full_action_space"],
            env["noop_max"]) == (4, 0.0, False, 30)
    assert env["actions"] == ["NOOP", "FIRE", "RIGHT", "LEFT"] and "sticky actions" in p["authors_environment"]
    line = ev.format_table(paper).splitlines()[0]
    assert "protocol paper" in line and "FIRE" in line and f"cap {cap_steps:,} agent steps" in line
    # without an explicit cap the paper's own: 40,000 agent steps
    assert evaluation.episode_cap_frames(evaluation.PROTOCOLS["paper"], spec, None) == 160_000
    assert evaluation.episode_cap_frames(evaluation.PROTOCOLS["greedy"], spec, None) == 108_000


def test_eval_csv_of_an_older_run_gets_the_new_columns(tmp_path):
    """A run resumed after eval.csv gained columns: old rows keep their values, the header lines up with new rows."""
    from ba3c import rundir

    path = tmp_path / "eval.csv"
    old = rundir.EVAL_FIELDS[:11]
    path.write_text(",".join(old) + "\n" + ",".join(["1.5", "100", "2", "greedy", "3"] + ["7"] * 6) + "\n")
    rundir._upgrade_header(str(path), rundir.EVAL_FIELDS)
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == rundir.EVAL_FIELDS and rows[0]["policy"] == "greedy" and rows[0]["length_mean"] == "7"
    assert rows[0]["max_episode_steps"] == "" and rows[0]["truncated_episodes"] == ""
    before = path.read_text()
    rundir._upgrade_header(str(path), rundir.EVAL_FIELDS)  # already current: left alone
    assert path.read_text() == before


def test_scores_table_names_the_paper_protocol(tmp_path):
    cmp = load_compare()
    paper = fake_eval("breakout", "paper", 300.0, 9_000_000, "2026-12-01",
                      protocol={"name": "paper", "max_episode_frames": 160_000, "max_episode_steps": 40_000})
    (tmp_path / "eval-paper.json").write_text(json.dumps(paper))
    pub = cmp.load_published(cmp.DEFAULT_PUBLISHED)
    rows = cmp.build_rows(cmp.find_evals([tmp_path]), pub)
    assert [(r.policy, r.protocol_note) for r in rows] == [("paper", "cap 40,000 agent steps")]
    md = cmp.render_markdown(rows, pub, cmp.DEFAULT_PUBLISHED)
    assert "| Breakout | 300.0 ± 1.5 | paper, cap 40,000 agent steps |" in md and "anti-stuck rule" in md


def test_compare_fills_the_readme_table_between_its_markers(tmp_path, capsys):
    cmp = load_compare()
    paper = fake_eval("breakout", "paper", 300.0, 9_000_000, "2026-12-01")
    (tmp_path / "eval-paper.json").write_text(json.dumps(paper))
    readme = tmp_path / "README.md"
    text = f"# Title\n\nbefore\n\n{cmp.README_BEGIN}\n\n| old | table |\n\n{cmp.README_END}\n\nafter\n"
    readme.write_text(text)
    out = tmp_path / "out"
    assert cmp.main([str(tmp_path / "eval-paper.json"), "--out", str(out), "--readme", str(readme)]) == 0
    new = readme.read_text()
    assert "| old | table |" not in new and new.startswith("# Title\n\nbefore\n\n") and new.endswith("\n\nafter\n")
    table = new[new.index(cmp.README_BEGIN) + len(cmp.README_BEGIN):new.index(cmp.README_END)].strip().splitlines()
    assert table[0].startswith("| Game |") and table[2].startswith("| Breakout | 300.0 ± 1.5 |")
    assert "| 300.0 ± 1.5 |" in (out / "SCORES.md").read_text()  # the same evaluation as SCORES.md's
    # again: the same file (the section is replaced, not added to)
    assert cmp.main([str(tmp_path / "eval-paper.json"), "--out", str(out), "--readme", str(readme)]) == 0
    assert readme.read_text() == new
    # a file without the markers is an error that says what to add, and is left as it was
    plain = tmp_path / "plain.md"
    plain.write_text("no markers\n")
    capsys.readouterr()
    assert cmp.main([str(tmp_path / "eval-paper.json"), "--out", str(out), "--readme", str(plain)]) == 2
    assert cmp.README_BEGIN in capsys.readouterr().err and plain.read_text() == "no markers\n"
    # markers out of order are refused the same way, before any table is written
    plain.write_text(f"{cmp.README_END}\n{cmp.README_BEGIN}\n")
    out2 = tmp_path / "out2"
    assert cmp.main([str(tmp_path / "eval-paper.json"), "--out", str(out2), "--readme", str(plain)]) == 2
    assert "in this order" in capsys.readouterr().err and not out2.exists()


def test_checkpoint_with_unknown_options_is_one_line(tmp_path, capsys):
    """A checkpoint whose saved config has options this version lacks (a newer version, another branch):
    one line that names them all and says what to do, exit status 2, not a traceback."""
    from test_config import write_run_from_elsewhere

    run = tmp_path / "newer"
    write_run_from_elsewhere(run, {"sim": {"sticky_training": 0.25}, "learn": {"lr_schedule": "cosine"}})
    for path in (run, next((run / "checkpoints").glob("ckpt-*.npz"))):
        assert ev.main([str(path), "--episodes", "1"]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ba3c.evaluate: error:"), err
        assert "sim.sticky_training, learn.lr_schedule" in err[0] and "does not know" in err[0]
        assert "evaluate it with the ba3c that trained it (git commit 0123456789ab" in err[0]
    other = tmp_path / "other"
    write_run_from_elsewhere(other, {}, {"sim": {"life_loss": "episodic"}})
    assert ev.main([str(other), "--episodes", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--life-loss: 'episodic' is not one of" in err[0]


# ---------------------------------------------------------------- sticky actions

def last_frames_after(action: int, sticky: float, n: int = 8, steps: int = 10) -> np.ndarray:
    """Breakout, n environments: the frames after `steps` steps of one constant action."""
    from ba3c.simulators import AtariSimulator, EnvSpec

    sim = AtariSimulator(EnvSpec("atari", "breakout"), n, n, 1, 108_000, sticky_actions=sticky)
    assert sim.settings.repeat_action_probability == sticky
    try:
        sim.reset(seed=4)
        for _ in range(steps):
            sim.send(np.full(n, action, np.int32))
            b = sim.recv()
        return np.array(b.obs[:, -1])
    finally:
        sim.close()


def test_sticky_actions_reach_the_emulator():
    """The probability reaches ALE: with sticky actions near 1 the agent's change from the start's action to
    RIGHT is mostly never taken (each emulator frame keeps the previous action with probability 0.999), so
    the games look as if it had played NOOP; without them the paddle moves in every game."""
    n = 8
    for sticky, want_same in ((0.0, 0), (0.999, 6)):
        same = (last_frames_after(0, sticky, n) == last_frames_after(2, sticky, n)).all(axis=(1, 2))  # NOOP vs RIGHT
        assert (same.sum() >= want_same) if want_same else not same.any(), (sticky, same)
    with pytest.raises(ValueError, match="sticky_actions must be in"):
        last_frames_after(0, 1.0)


def test_progress_is_reported_while_games_are_played(capsys):
    from ba3c.simulators import EnvSpec

    ev.progress_printer(50)(3, 123456)  # what `python -m ba3c.evaluate` prints every minute
    assert "3 of 50 episodes finished, 123,456 agent steps played" in capsys.readouterr().out

    model, spec = constant_policy(4, 0), EnvSpec("atari", "breakout")  # NOOP: every game runs to the cap
    seen: list[tuple[int, int]] = []
    result = evaluation.evaluate_model(model, spec, 4, "greedy", num_envs=2, max_episode_frames=400, num_threads=1,
                                       progress=lambda counted, steps: seen.append((counted, steps)),
                                       progress_every_s=0.0)
    assert result["truncated_episodes"] == 4
    counted, steps = zip(*seen)
    # an auto-reset step plays no episode step, so the count stays; the last report comes after the last step
    assert list(steps) == sorted(steps) and steps[-1] == sum(result["lengths_steps"])
    assert list(counted) == sorted(counted) and counted[0] == 0 and counted[-1] in (2, 4)   # 2 games at a time
    assert len(seen) >= max(result["lengths_steps"])  # one report per step at 0 s


def test_sticky_actions_option_is_checked_and_recorded(tmp_path, capsys):
    from ba3c.simulators import EnvSpec

    model, spec = constant_policy(4, 0), EnvSpec("atari", "breakout")
    result = evaluation.evaluate_model(model, spec, 2, "paper", num_envs=2, max_episode_frames=800, num_threads=1,
                                       sticky_actions=0.25)
    p = json.loads(json.dumps(result["protocol"]))
    assert p["sticky_actions"] == 0.25 and p["environment"]["repeat_action_probability"] == 0.25
    assert "sticky 0.25" in ev.format_table(result).splitlines()[0]
    plain = evaluation.evaluate_model(model, spec, 1, "greedy", num_envs=1, max_episode_frames=40, num_threads=1)
    assert plain["protocol"]["sticky_actions"] == 0.0 and "sticky 0," in ev.format_table(plain).splitlines()[0]
    for bad in (1.0, -0.1, float("nan")):
        with pytest.raises(evaluation.EvalError, match=r"--sticky-actions: must be in \[0, 1\)"):
            evaluation.evaluate_model(model, spec, 1, sticky_actions=bad)
        assert ev.main([str(tmp_path / "nowhere"), "--sticky-actions", str(bad)]) == 2  # before any file is read
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--sticky-actions: must be in [0, 1)" in err[0]
    with pytest.raises(evaluation.EvalError, match="not an Atari game"):
        evaluation.evaluate_model(model, EnvSpec("gym", "CartPole-v1"), 1, sticky_actions=0.25)
    from test_config import write_run_from_elsewhere

    write_run_from_elsewhere(tmp_path / "cartpole", {})  # a CartPole run: refused before anything is played
    assert ev.main([str(tmp_path / "cartpole"), "--sticky-actions", "0.25"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "CartPole-v1 is not an Atari game" in err[0]


@pytest.mark.slow
def test_periodic_and_command_line_evaluation_with_sticky_actions(tmp_path):
    """--eval-sticky-actions reaches eval.csv and eval-protocol.json; `ba3c.evaluate --sticky-actions` the JSON
    (under a name of its own, beside the evaluation without) and the table."""
    run = tmp_path / "bo"
    trained = run_train(["--env", "breakout", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "32",
                         "--total-frames", "2000", "--run-dir", str(run), "--stats-interval-updates", "5",
                         "--eval-every-frames", "1000", "--eval-episodes", "1", "--eval-policy", "greedy",
                         "--max-episode-frames", "2000", "--eval-sticky-actions", "0.25", "--seed", "3",
                         "--sticky-actions", "0.5"], timeout=300)
    # training's own stickiness (0.5) reaches ALE (the line reads the simulator's settings) and config.json,
    # apart from the evaluation's (0.25)
    assert "ba3c: training with sticky actions 0.5\n" in trained.stdout
    assert json.loads((run / "config.json").read_text())["sim"]["sticky_actions"] == 0.5
    with open(run / "eval.csv", newline="") as fh:
        evals = list(csv.DictReader(fh))
    assert evals and all(e["sticky_actions"] == "0.25" for e in evals)
    assert json.loads((run / "eval-protocol.json").read_text())["sticky_actions"] == 0.25
    p = run_evaluate([str(run), "--episodes", "1", "--num-envs", "1", "--policy", "greedy",
                      "--max-episode-frames", "400", "--sticky-actions", "0.25", "--threads", "1"])
    assert p.returncode == 0, p.stderr[-2000:]
    data = json.loads((run / "eval-greedy-sticky0.25.json").read_text())
    assert data["protocol"]["sticky_actions"] == 0.25 and "sticky 0.25" in p.stdout
    assert data["train_seed"] == 3 and data["seed"] == 0  # the run's seed, apart from the evaluation's own
    assert data["train_sticky_actions"] == 0.5
    # the default (--life-loss auto) trains Breakout with a lost life as a terminal, and evaluates it so
    assert json.loads((run / "config.json").read_text())["sim"]["life_loss"] == "terminal"
    assert data["protocol"]["fire_after_life_loss"].startswith("FIRE")
    assert not (run / "eval-greedy.json").exists()


def test_scores_table_keeps_sticky_evaluations_apart(tmp_path):
    """The same checkpoint evaluated with and without sticky actions: two rows, the sticky one noted."""
    cmp = load_compare()
    proto = {"name": "paper", "max_episode_frames": 160_000, "max_episode_steps": 40_000}
    for name, sticky, mean in (("eval-paper.json", 0.0, 300.0), ("eval-paper-sticky0.25.json", 0.25, 250.0)):
        (tmp_path / name).write_text(json.dumps(fake_eval("breakout", "paper", mean, 9_000_000, "2026-12-01",
                                                          protocol={**proto, "sticky_actions": sticky})))
    pub = cmp.load_published(cmp.DEFAULT_PUBLISHED)
    rows = cmp.build_rows(cmp.find_evals([tmp_path]), pub)
    assert sorted((r.mean, r.protocol_note) for r in rows) == [
        (250.0, "cap 40,000 agent steps, sticky actions 0.25"), (300.0, "cap 40,000 agent steps")]
    # the list of evaluation files tells the two apart too
    md = cmp.render_markdown(rows, pub, cmp.DEFAULT_PUBLISHED)
    files = md.split("Evaluation files:")[1]
    assert "(paper; cap 40,000 agent steps, sticky actions 0.25): `" in files
    assert "(paper; cap 40,000 agent steps): `" in files


def test_scores_table_keeps_training_seeds_apart(tmp_path):
    """Runs of two training seeds: one row each (the newest evaluation per seed), the other seed noted; an
    evaluation from before the train_seed field counts as the default seed 0."""
    cmp = load_compare()
    proto = {"name": "paper", "max_episode_frames": 160_000, "max_episode_steps": 40_000}
    for name, seed, mean, date in (("old/eval-paper.json", None, 19.0, "2026-12-01"),
                                   ("s0/eval-paper.json", 0, 19.96, "2026-12-02"),
                                   ("s1/eval-paper.json", 1, 14.2, "2026-12-03")):
        extra = {} if seed is None else {"train_seed": seed}
        (tmp_path / name).parent.mkdir()
        (tmp_path / name).write_text(json.dumps(fake_eval("pong", "paper", mean, 20_000_000, date,
                                                          protocol=proto, **extra)))
    pub = cmp.load_published(cmp.DEFAULT_PUBLISHED)
    rows = cmp.build_rows(cmp.find_evals([tmp_path]), pub)
    assert [(r.mean, r.protocol_note) for r in rows] == [
        (19.96, "cap 40,000 agent steps"), (14.2, "cap 40,000 agent steps, training seed 1")]
    md = cmp.render_markdown(rows, pub, cmp.DEFAULT_PUBLISHED)
    assert "| Pong | 14.20 ± 1.50 | paper, cap 40,000 agent steps, training seed 1 |" in md
    assert "| Pong | 19.96 ± 1.50 | paper, cap 40,000 agent steps |" in md  # not "20.0", beside a target of 20
    assert "training seed N" in md.split("## Notes")[1] and "trained with sticky" not in md
    # a run trained with sticky actions is a row of its own too, however new
    (tmp_path / "st").mkdir()
    (tmp_path / "st" / "eval-paper.json").write_text(json.dumps(fake_eval(
        "pong", "paper", 12.0, 20_000_000, "2026-12-04", protocol=proto, train_sticky_actions=0.25)))
    rows = cmp.build_rows(cmp.find_evals([tmp_path]), pub)
    assert [(r.mean, r.protocol_note) for r in rows] == [
        (19.96, "cap 40,000 agent steps"), (12.0, "cap 40,000 agent steps, trained with sticky actions 0.25"),
        (14.2, "cap 40,000 agent steps, training seed 1")]
    assert "trained with `--sticky-actions P`" in cmp.render_markdown(rows, pub, cmp.DEFAULT_PUBLISHED)


def test_scores_table_keeps_gorila_apart(tmp_path):
    """A Gorila run and a BA3C run of the same game, evaluated the same way: two rows, the Gorila one noted; an
    evaluation from before the algo field is BA3C's. The README's headline holds BA3C runs only."""
    cmp = load_compare()
    proto = {"name": "paper", "max_episode_frames": 160_000, "max_episode_steps": 40_000}
    for name, algo, mean, frames in (("old/eval-paper.json", None, 19.0, 20_000_000),
                                     ("dqn/eval-paper.json", "gorila", 15.0, 40_000_000),
                                     ("dqn/eval-egreedy.json", "gorila", 14.0, 40_000_000)):
        policy = "egreedy" if "egreedy" in name else "paper"
        extra = {} if algo is None else {"algo": algo}
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(json.dumps(fake_eval("pong", policy, mean, frames, "2026-12-05",
                                                          protocol=proto if policy == "paper" else
                                                          {"max_episode_frames": 108_000}, **extra)))
    pub = cmp.load_published(cmp.DEFAULT_PUBLISHED)
    rows = cmp.build_rows(cmp.find_evals([tmp_path]), pub)
    assert sorted((r.algo, r.policy, r.mean) for r in rows) == [
        ("ba3c", "paper", 19.0), ("gorila", "egreedy 0.05", 14.0), ("gorila", "paper", 15.0)]
    assert [(r.algo, r.mean) for r in cmp.headline_rows(rows)] == [("ba3c", 19.0)]  # not Gorila's, for all its frames
    md = cmp.render_markdown(rows, pub, cmp.DEFAULT_PUBLISHED)
    assert "| Pong | 14.00 ± 1.50 | egreedy 0.05, trained by Gorila |" in md
    assert "| Pong | 19.00 ± 1.50 | paper, cap 40,000 agent steps |" in md
    assert "trained by Gorila\" is our Gorila" in md.split("## Notes")[1]
    paper_rows = "\n".join(cmp.render_paper_rows(rows))
    assert "| Pong | 15.00 ± 1.50 | trained by Gorila, cap 40,000 agent steps |" not in paper_rows  # the cap is dropped
    assert "| Pong | 15.00 ± 1.50 | trained by Gorila |" in paper_rows


def test_headline_shows_the_campaign_where_a_game_has_it(tmp_path):
    """A game with evaluations of the paper_games campaign shows them in the README's table, its seeds as one row
    (the mean of their means, their range, all core-hours); a game without shows its earlier run, said so."""
    cmp = load_compare()
    proto = {"name": "paper", "max_episode_frames": 160_000, "max_episode_steps": 40_000}
    files = {"eval-boxing-paper.json": fake_eval("boxing", "paper", -25.68, 20_000_000, "2026-12-01", protocol=proto),
             "eval-pong-paper.json": fake_eval("pong", "paper", 19.88, 20_000_000, "2026-12-02", protocol=proto)}
    for seed, mean, hours in ((0, 91.5, 4.1), (1, 80.25, 4.3), (2, 95.0, 4.2)):
        files[f"eval-boxing-paper-games2-s{seed}.json"] = fake_eval(
            "boxing", "paper", mean, 40_000_000, "2027-01-01", protocol=proto, train_seed=seed, core_hours=hours,
            campaign=cmp.CAMPAIGN)
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    rows = cmp.build_rows(cmp.find_evals([tmp_path]), cmp.load_published(cmp.DEFAULT_PUBLISHED))
    pong, boxing = cmp.headline_rows(rows)  # the paper's order
    assert (pong.campaign, pong.seeds, pong.mean) == ("", (0,), 19.88)
    assert (boxing.campaign, boxing.seeds) == (cmp.CAMPAIGN, (0, 1, 2))
    means = [91.5, 80.25, 95.0]
    assert boxing.mean == pytest.approx(np.mean(means)) and (boxing.low, boxing.high) == (min(means), max(means))
    assert boxing.core_hours == pytest.approx(4.1 + 4.3 + 4.2)
    table = cmp.render_headline([pong, boxing])
    assert "mean of their means [min, max]" in table[0] and "Core-hours (all runs)" in table[0]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]
    assert cells[0][:6] == ["Pong", "19.88 ± 1.50", "1 seed (0), earlier runs", "not terminal", "20.0M", "48.00"]
    assert cells[1][2:6] == ["3 seeds (0, 1, 2), games2", "not terminal", "40.0M", f"{sum((4.1, 4.3, 4.2)):.2f}"]
    shown = [float(x) for x in re.fullmatch(r"(\S+) \[(\S+), (\S+)\]", cells[1][1]).groups()]
    assert shown == pytest.approx([np.mean(means), min(means), max(means)], abs=0.006)
    # each seed keeps its own row in SCORES.md, and the campaign's row is there too
    md = cmp.render_markdown(rows, cmp.load_published(cmp.DEFAULT_PUBLISHED), cmp.DEFAULT_PUBLISHED)
    assert md.count("campaign games2") == 6  # three table rows, three evaluation files
    assert "| Boxing | " + cells[1][1] + " | 3 seeds (0, 1, 2), games2 |" in md.split("## Campaigns")[1]
