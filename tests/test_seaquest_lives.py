"""benchmarks.seaquest_lives (and benchmarks.ram_atari under it): the life bookkeeping on made-up RAM readings, and real games on the emulator."""
from __future__ import annotations

import json

import ale_py
import numpy as np

from benchmarks import ram_atari as ra
from benchmarks import seaquest_lives as sl


def test_area_matrix_averages_the_covered_cells() -> None:
    w = ra.area_matrix(4, 2)
    np.testing.assert_allclose(w, [[0.5, 0.5, 0, 0], [0, 0, 0.5, 0.5]])
    w = ra.area_matrix(210, 84)  # a non-integer factor (2.5): overlaps are split
    np.testing.assert_allclose(w.sum(axis=1), 1.0)
    np.testing.assert_allclose(w[0, :3], [0.4, 0.4, 0.2])
    np.testing.assert_allclose(w[1, 2:5], [0.2, 0.4, 0.4])


def _life(readings: list[tuple[int, int]], start: int = 64) -> sl.Life:
    life, before = sl.Life(), start
    for oxygen, depth in readings:
        life.observe(before, oxygen, depth)
        before = oxygen
    return life


def test_a_tank_run_down_is_out_of_oxygen_and_a_hit_is_not() -> None:
    down = [(o, 60) for o in range(63, 0, -1)] + [(0, 60)] * 20 + [(0, sl.SURFACE)] * 10
    life = _life(down)
    assert life.out_of_oxygen and life.oxygen_before_empty == 1 and life.breaths == 0
    assert life.steps == len(down) and life.deepest == 60
    hit = [(o, 60) for o in range(63, 40, -1)] + [(0, sl.SURFACE)] * 15
    life = _life(hit)
    assert not life.out_of_oxygen and life.oxygen_before_empty == 41


def test_a_breath_is_a_refill_after_a_dive_and_a_new_lifes_fill_is_not() -> None:
    breath = [(60, 50), (50, 50), (40, 30), (40, sl.SURFACE), (46, sl.SURFACE), (52, sl.SURFACE)]
    assert _life(breath).breaths == 1
    stays_up = [(64, sl.SURFACE)] * 5 + [(63, sl.SURFACE)]
    assert _life(stays_up).breaths == 0
    respawn = [(0, sl.SURFACE), (6, sl.SURFACE), (12, sl.SURFACE)]  # a new life fills its tank from empty
    assert _life([(50, 60)] + respawn, start=50).breaths == 0


def test_scripted_games_on_the_emulator() -> None:
    game, rng = ra.RamAtari("seaquest", seed=3), np.random.default_rng(3)
    seen: list[np.ndarray] = []

    def dive(obs: np.ndarray) -> int:  # DOWN+FIRE (index 13 of the minimal set): straight to the bottom
        seen.append(obs.copy())
        return 13

    g = sl.play(game, dive, rng, record=True)
    assert game.actions[13] == ale_py.Action.DOWNFIRE  # Seaquest's minimal set is the full one
    assert seen[0].shape == (ra.STACK, ra.SIZE, ra.SIZE) and seen[0].dtype == np.uint8
    assert seen[-1][-1].std() > 0  # a real screen, not a blank
    assert len(g.lives) == 4 and sum(life.steps for life in g.lives) == g.steps == len(g.oxygen)
    assert all(life.deepest > sl.DIVED for life in g.lives)
    # under water the tank only runs down; it reads 0 after each life
    start = next(i for i, d in enumerate(g.depth) if d > sl.DIVED)
    first = g.oxygen[start:start + 50]
    assert all(a >= b for a, b in zip(first, first[1:])) and first[0] > first[-1]
    assert all(not life.out_of_oxygen for life in g.lives)  # shot or rammed long before the tank empties
    summary = sl.summarize([g])
    assert summary["lives"] == 4 and summary["lives_out_of_oxygen"] == 0
    json.dumps([sl.life_record(life) for life in g.lives])
