"""--decorrelate-steps: games of a fixed length put out of step before training, with every frame counted
and no game seen only in part reported as an episode."""
from __future__ import annotations

import numpy as np

from ba3c.experience import Experience
from ba3c.simulators import AtariSimulator, Batch, decorrelate_games, resolve_env
from ba3c.workers import SimulationThread


def test_decorrelated_games_are_as_old_as_their_random_steps_since_a_restart():
    """Boxing's games last a fixed time, so started together they would stay in step; afterwards each is
    k_i agent steps (plus its no-op start) into a new game, k_i the draw for it."""
    spec = resolve_env("boxing")
    sim = AtariSimulator(spec, 8, 8, 1, 108_000)
    try:
        sim.reset(5)
        k = np.random.default_rng(0).integers(0, 200, 8)  # the draw decorrelate_games makes first
        b = decorrelate_games(sim, 200, np.random.default_rng(0), 5)
    finally:
        sim.close()
    no_ops = b.episode_frame - k[b.env_ids] * spec.frames_per_step
    assert np.all((no_ops >= 0) & (no_ops <= sim.settings.noop_max)), (b.episode_frame, k)
    assert len(set(b.episode_frame.tolist())) > 4  # spread out, not in step


def test_decorrelating_needs_synchronous_simulation():
    sim = AtariSimulator(resolve_env("boxing"), 8, 4, 1, 108_000)
    try:
        sim.reset(0)
        try:
            decorrelate_games(sim, 10, np.random.default_rng(0), 0)
        except ValueError as e:
            assert "synchronous" in str(e)
        else:
            raise AssertionError("asynchronous simulation was decorrelated")
    finally:
        sim.close()


def test_start_mid_game_counts_the_steps_and_leaves_the_games_under_way_out():
    exp = Experience(2, (1,), np.dtype(np.float32), 2, 0.99, 4, clip_rewards=False)
    exp.start_mid_game(100)
    ids, z = np.array([0, 1]), np.zeros(2, bool)
    obs = np.zeros((2, 1), np.float32)

    def step(reward, term):
        return exp.add(Batch(obs, np.full(2, reward, np.float32), np.array(term), z, ids), np.zeros(2),
                       np.zeros(2, int))

    batches, episodes = [], []
    for t in range(4):  # mid-game rows; environment 0's game ends at t == 3
        b, e = step(1.0, [t == 3, False])
        batches += b
        episodes += e
    assert episodes == []  # environment 0's game began before recording
    assert batches and batches[0].unsampled_steps == 100  # the unrecorded steps count as played
    for t in range(3):  # environment 0's next game, whole; it ends at t == 2
        b, e = step(2.0, [t == 2, False])
        episodes += e
    assert [(x.env_id, x.score, x.length) for x in episodes] == [(0, 4.0, 2)]  # the new game's first row opens it


def test_the_simulation_thread_decorrelates_before_its_first_batch():
    """The trainer's wiring: the first train batch counts every random step as played (8 simulators x 50)."""
    spec = resolve_env("boxing")
    sim = AtariSimulator(spec, 8, 8, 1, 108_000)
    exp = Experience(8, sim.obs_shape, sim.obs_dtype, 5, 0.99, 16, clip_rewards=True)

    def predictor(obs):
        return np.zeros((len(obs), sim.num_actions), np.float32), np.zeros(len(obs), np.float32)

    thread = SimulationThread(sim, predictor, exp, np.random.default_rng(0), 3, queue_batches=2, decorrelate_steps=50)
    thread.start()
    try:
        first = thread.next_batch()
        second = thread.next_batch()
    finally:
        thread.stop.set()
        thread.join(timeout=30)
        sim.close()
    assert first.unsampled_steps == 50 * 8 and second.unsampled_steps == 0
    assert not thread.is_alive() and thread.error is None
