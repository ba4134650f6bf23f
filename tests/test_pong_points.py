"""benchmarks.pong_points: points told apart on scripted games on the real emulator, and the command on a checkpoint."""
from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks import pong_points as pp
from benchmarks.ram_atari import RamAtari
from conftest import run_train

NOOP, UP, DOWN = 0, 2, 3  # Pong's minimal action set: NOOP, FIRE, RIGHT (up), LEFT (down), ...


def one_hot(action: int) -> np.ndarray:
    logits = np.zeros((1, 6), np.float32)
    logits[0, action] = 1.0
    return logits


def test_miss_dy_is_read_before_the_ball_passes_the_paddle() -> None:
    trace = [(150, 40, 60), (170, 50, 61), (186, 58, 62), (190, 66, 62), (0, 0, 62)]
    assert pp.miss_dy(trace, paddle_x=188) == 58 - 62  # the last step with the ball short of x 188
    assert pp.miss_dy([(0, 0, 50), (200, 70, 50)], paddle_x=188) is None


def test_a_paddle_that_never_moves_loses_every_point_in_order() -> None:
    game = pp.play(RamAtari("pong", 3), lambda obs: one_hot(NOOP), np.random.default_rng(3), index=7)
    assert game.score == -21 and not game.truncated
    assert [p.number for p in game.points] == list(range(21)) and not any(p.won for p in game.points)
    assert [p.cpu_before for p in game.points] == list(range(21)) and {p.agent_before for p in game.points} == {0}
    assert all(p.game == 7 for p in game.points)
    steps = [p.step for p in game.points]
    assert steps == sorted(steps) and steps[-1] == game.steps
    assert game.replaced > 0  # NOOP chosen 30 times in a row: the anti-stuck rule played FIRE
    for p in game.points:
        assert len(p.trace) == pp.TRACE and p.miss_dy is not None
        assert max(bx for bx, _, _ in p.trace) > 188  # the ball went past the paddle's column (x 188)
    s = pp.summarize([game])
    assert s["points_lost"] == 21 and s["lost_first_point"] == 1 and s["games_by_points_lost"] == {"21": 1}
    assert s["lost_by_point_number"] == {str(k): 1 for k in range(21)}


def test_an_opening_is_the_first_point_after_a_set_no_op_count_and_plays_the_same_each_time() -> None:
    game = RamAtari("pong", 5)
    rng = np.random.default_rng(5)
    first = [pp.play(game, lambda obs: one_hot(NOOP), rng, index=n, opening=n) for n in (0, 1, 30, 1)]
    for g in first:
        assert len(g.points) == 1 and g.score == -1 and not g.points[0].won and g.truncated  # the game goes on
    assert first[1].points[0].trace == first[3].points[0].trace  # no random action: the same opening twice
    # the serve comes at a fixed emulator frame: 30 more no-op frames leave ~7.5 fewer agent steps before it
    assert 6 <= first[0].steps - first[2].steps <= 9
    with pytest.raises(ValueError, match="0-30"):
        game.reset(rng, 31)


def test_a_paddle_that_follows_the_ball_wins_points_and_they_are_told_apart() -> None:
    game = RamAtari("pong", 1)

    def follow(obs: np.ndarray) -> np.ndarray:  # keep the paddle's RAM y about 12 above the ball's
        ram = game.ram()
        return one_hot(UP if int(ram[pp.PADDLE_Y]) + 12 > int(ram[pp.BALL_Y]) else DOWN)

    g = pp.play(game, follow, np.random.default_rng(1), index=0, max_steps=3000)
    won, lost = [p for p in g.points if p.won], [p for p in g.points if not p.won]
    assert won and lost and g.score == len(won) - len(lost)
    assert all(p.trace == [] and p.miss_dy is None for p in won) and all(p.trace for p in lost)
    for a, b in zip(g.points, g.points[1:]):  # the score before each point follows from the ones before it
        assert (b.agent_before, b.cpu_before) == (a.agent_before + a.won, a.cpu_before + (not a.won))
    s = pp.summarize([g])
    assert s["points_lost"] == len(lost) and sum(s["lost_by_point_number"].values()) == len(lost)
    json.dumps(s)


def test_command_on_a_pong_checkpoint_and_a_clear_error_for_another_game(tmp_path, tiny_cartpole) -> None:
    run = tmp_path / "pong"
    run_train(["--env", "pong", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "32",
               "--total-frames", "2000", "--run-dir", str(run)], timeout=240)
    out = tmp_path / "out"
    assert pp.main([str(run), "--games", "1", "--tag", "t", "--out-dir", str(out)]) == 0
    data = json.loads((out / "pong-points-t.json").read_text())
    s = data["summary"]
    assert s["games"] == 1 and len(data["lost_points"]) == s["points_lost"] > 0  # an untrained agent loses points
    assert s["score_mean"] == s["scores"][0] and -21 <= s["scores"][0] <= 21 - s["points_lost"]
    assert (out / "pong-points-t.png").stat().st_size > 5000
    assert pp.main([str(run), "--openings", "--tag", "t", "--out-dir", str(out)]) == 0
    openings = json.loads((out / "pong-openings-t.json").read_text())
    s = openings["summary"]
    assert s["openings"] == 31 and set(s["lost_noops"]) <= set(range(31))
    assert len(openings["lost_points"]) == s["points_lost"] == len(s["lost_noops"])
    assert {q["game"] for q in openings["lost_points"]} == set(s["lost_noops"]) and \
        all(q["number"] == 0 for q in openings["lost_points"])
    assert (out / "pong-openings-t.png").stat().st_size > 5000
    cart = tmp_path / "cart"
    run_train([*tiny_cartpole, "--total-frames", "200", "--run-dir", str(cart)])
    assert pp.main([str(cart), "--out-dir", str(out)]) == 2
