"""Life loss on real Breakout: the simulator's signal against ALE's own, FIRE after a lost life, and
Experience with --life-loss terminal (returns cut at each life, episodes still whole games)."""
from __future__ import annotations

import collections

import numpy as np
import pytest

from ba3c.experience import Experience
from ba3c.simulators import AtariSimulator, resolve_env


def test_life_lost_is_ales_life_loss_info_without_the_game_overs():
    """ALE's life_loss_info sets `terminated` on a lost life and on the game over alike; ours keeps
    `terminated` for the game over and says `life_lost` for the rest: together they must be ALE's flag."""
    from ale_py.vector_env import AtariVectorEnv

    n, steps = 2, 1500
    ours = AtariSimulator(resolve_env("breakout"), n, n, 1, 108_000)  # synchronous: both see the same order
    ale = AtariVectorEnv("breakout", n, num_threads=1, reward_clipping=False, autoreset_mode="NextStep",
                         life_loss_info=True)
    rng = np.random.default_rng(0)
    lost = ends = 0
    try:
        b = ours.reset(seed=3)
        ale.reset(seed=3)
        for _ in range(steps):
            a = rng.integers(0, ours.num_actions, n).astype(np.int32)  # random play presses FIRE itself
            ours.send(a)
            ale.send(a)
            b = ours.recv()
            _, rew, term, _, info = ale.recv()
            np.testing.assert_array_equal(b.env_ids, info["env_id"])
            np.testing.assert_array_equal(b.reward, rew)  # the same game, step for step
            np.testing.assert_array_equal(b.terminated | b.life_lost, term)
            assert not (b.terminated & b.life_lost).any()
            lost += int(b.life_lost.sum())
            ends += int(b.terminated.sum())
    finally:
        ours.close()
        ale.close()
    assert lost >= 4 * ends and ends >= 1  # Breakout: 5 lives a game; random play ends several games here


def test_breakout_games_span_all_lives_while_returns_end_at_each():
    """A NOOP agent on Breakout: only the simulator's FIRE after a lost life serves the ball again, so
    every game must end by game over (not the frame cap) after 5 lives. Experience must report one
    episode per game with the game's whole score and length, yet no return may run past a lost life."""
    n, games_wanted = 4, 4
    sim = AtariSimulator(resolve_env("breakout"), n, 2, 1, 20_000, fire_after_life_loss=True)  # a cap that fails fast
    assert sim.fire_action == 1  # Breakout's minimal set: NOOP, FIRE, RIGHT, LEFT
    exp = Experience(n, sim.obs_shape, sim.obs_dtype, n_step=5, gamma=0.99, train_batch=8, clip_rewards=True,
                     life_loss_terminal=True)
    # Each observation's value is a unique id x 1000, so a sample's return minus its advantage says
    # which observation it is, and a return with no bootstrap in it stays small (|R| <= 5).
    kind, reward_after = {}, {}  # id -> "lost" (the observation that lost a life) / "before" (the step into it)
    last_id = {}
    steps, score, lives_lost = collections.Counter(), collections.Counter(), collections.Counter()
    fresh = np.ones(n, bool)
    seen_games, samples = [], []
    next_id = 1
    try:
        b = sim.reset(seed=11)
        while len(seen_games) < games_wanted:
            ids = np.arange(next_id, next_id + len(b.env_ids))
            next_id += len(ids)
            for j, e in enumerate(b.env_ids):
                e = int(e)
                if fresh[e]:  # a new game's first observation
                    fresh[e] = False
                else:
                    steps[e] += 1
                    score[e] += float(b.reward[j])
                if b.life_lost[j]:
                    lives_lost[e] += 1
                    kind[int(ids[j])], kind[last_id[e]] = "lost", "before"
                    reward_after[last_id[e]] = float(np.sign(b.reward[j]))
                if b.terminated[j] or b.truncated[j]:
                    seen_games.append((e, score[e], steps[e], lives_lost[e], bool(b.truncated[j])))
                    steps[e], score[e], lives_lost[e], fresh[e] = 0, 0.0, 0, True
                last_id[e] = int(ids[j])
            actions = np.zeros(len(b.env_ids), np.int64)  # NOOP only
            sim.send(actions)
            batches, episodes = exp.add(b, ids * 1000.0, actions)
            samples += [(round(float(R - A) / 1000), float(R))
                        for tb in batches for R, A in zip(tb.returns, tb.advantages)]
            for ep in episodes:
                match = [g for g in seen_games if g[0] == ep.env_id]
                assert (ep.score, ep.length, ep.truncated) == match[-1][1:3] + (match[-1][4],)
            b = sim.recv()
    finally:
        sim.close()
    for _, _, length, lost, truncated in seen_games:
        assert not truncated, "a game ran to the frame cap: FIRE after a lost life did not serve the ball"
        assert lost == 4 and length > 0  # one episode = one game = 5 lives
    by_id = dict(samples)
    assert not [i for i in by_id if kind.get(i) == "lost"], "an observation that lost a life was trained on"
    before = [i for i in by_id if kind.get(i) == "before"]
    assert len(before) >= 4
    for i in before:  # the last step of a life: its return is its own clipped reward, nothing beyond
        assert by_id[i] == reward_after[i]


@pytest.mark.slow
def test_trainer_records_the_option_and_evaluation_presses_fire_as_trained(tmp_path):
    """--life-loss terminal reaches the run's config, and `ba3c.evaluate` plays the checkpoint the way it
    trained: an untrained greedy Breakout policy rarely presses FIRE, so without the simulator's FIRE
    after a lost life its games would run to the frame cap."""
    import json
    import subprocess
    import sys

    from conftest import ROOT, run_train, subprocess_env

    run = tmp_path / "bo"
    run_train(["--env", "breakout", "--life-loss", "terminal", "--num-envs", "8", "--predict-batch", "4",
               "--train-batch", "32", "--total-frames", "2000", "--run-dir", str(run), "--log-interval-s", "0.5",
               "--stats-interval-updates", "5"], timeout=300)
    assert json.loads((run / "config.json").read_text())["sim"]["life_loss"] == "terminal"
    # the frames counted hold the FIRE steps after lost lives (untrained, but played) besides 32 x 4 per update
    meta = json.loads((run / "meta.json").read_text())
    fire_frames = meta["final_frames"] - meta["final_update"] * 32 * 4
    assert fire_frames > 0 and fire_frames % 4 == 0, meta["final_frames"]
    out = tmp_path / "eval.json"
    p = subprocess.run([sys.executable, "-m", "ba3c.evaluate", str(run), "--episodes", "2", "--num-envs", "2",
                        "--max-episode-frames", "20000", "--json", str(out), "--threads", "1"],
                       cwd=ROOT, env=subprocess_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    result = json.loads(out.read_text())
    assert result["episodes"] == 2 and result["truncated_episodes"] == 0
    assert result["protocol"]["fire_after_life_loss"].startswith("FIRE pressed")


import pytest  # noqa: E402


@pytest.mark.parametrize("life_loss", ["terminal", "ignore"])
def test_frames_counted_are_the_emulators_frames(life_loss):
    """Whole Breakout games, one environment: the frames the trainer counts (its train batches' samples plus
    the steps they say no sample holds, x frameskip) must equal ALE's own frame counter over each game,
    from its first observation (after the no-op starts and the FIRE that start every game) to its last,
    with the game's last step counted whole: ALE stops a step's frameskip at the game over, 1-4 frames in.
    With --life-loss terminal a NOOP agent (the simulator presses FIRE after each lost life; that step
    trains nothing but is played); with ignore a random agent (which serves the ball itself)."""
    from ba3c.simulators import ATARI

    terminal = life_loss == "terminal"
    sim = AtariSimulator(resolve_env("breakout"), 1, 1, 1, 108_000, fire_after_life_loss=terminal)
    # train_batch 1: every sample leaves in a batch at once, so nothing is left half-counted at a game's end
    exp = Experience(1, sim.obs_shape, sim.obs_dtype, n_step=5, gamma=0.99, train_batch=1, clip_rewards=True,
                     life_loss_terminal=terminal)
    rng = np.random.default_rng(5)
    games, counted, emulator, lives_lost, start, prev = 0, 0, 0, 0, None, 0
    try:
        b = sim.reset(seed=21)
        while games < 2:
            if start is None:
                start = int(b.episode_frame[0])  # the game's first observation
            lives_lost += int(b.life_lost[0])
            if b.terminated[0] or b.truncated[0]:
                assert not b.truncated[0], "the game ran to the frame cap"
                assert 1 <= int(b.episode_frame[0]) - prev <= ATARI.frameskip
                emulator += prev + ATARI.frameskip - start
                games, start = games + 1, None
            prev = int(b.episode_frame[0])
            a = np.zeros(1, np.int64) if terminal else rng.integers(0, sim.num_actions, 1)
            sim.send(a)
            batches, _ = exp.add(b, np.zeros(1, np.float32), a)
            counted += sum(len(tb.actions) + tb.unsampled_steps for tb in batches) * ATARI.frameskip
            b = sim.recv()
    finally:
        sim.close()
    assert lives_lost == 8 and emulator > 0  # two games of 5 lives: 4 lost lives each before the game over
    assert counted == emulator
