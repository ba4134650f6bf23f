"""Gorila mode's pieces: the DQN loss and the target copy against hand-computed values, the epsilon schedule,
the actor's episode count and the pacing between actor and learner."""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from ba3c.algos.dqn import EpisodeTracker, GorilaActor, epsilon_at
from ba3c.algos.replay import Replay
from ba3c.simulators import Batch


def linear_q(kernel: np.ndarray):
    """Q(s) = s @ kernel for 2-d observations and 2 actions, as a model with build_model's (q, max q) outputs."""
    import keras

    inp = keras.Input((2,), dtype="float32")
    q = keras.layers.Dense(2, use_bias=False, name="q")(inp)
    value = keras.layers.Lambda(lambda t: keras.ops.max(t, axis=-1, keepdims=True))(q)
    model = keras.Model(inp, [q, value])
    model.set_weights([np.asarray(kernel, np.float32)])
    return model


# Two transitions, gamma 0.5: Q(s) = s (online), Q_target(s) = (s0, 3 s1).
OBS = np.array([[1, 2], [0, 0.5]], np.float32)      # Q(s, .) = (1, 2) and (0, 0.5)
ACTIONS = np.array([1, 0], np.int32)                 # Q(s, a) = 2 and 0
REWARDS = np.array([1, -1], np.float32)
NEXT = np.array([[3, 2], [1, 4]], np.float32)        # Q_target(s', .) = (3, 6) and (1, 12); online argmax of s'0: 0
DONES = np.array([0, 1], np.float32)
# DQN: y = (1 + 0.5 * 6, -1) = (4, -1), td = (2, -1); Double DQN: y0 = 1 + 0.5 * 3 = 2.5, td = (0.5, -1)
HAND = {("huber", False): 1.0,       # (2 - 0.5 + 0.5 * 1) / 2
        ("mse", False): 2.5,         # (4 + 1) / 2
        ("huber", True): 0.3125,     # (0.5 * 0.25 + 0.5) / 2
        ("mse", True): 0.625}        # (0.25 + 1) / 2


@pytest.mark.parametrize("kind,double", list(HAND))
def test_dqn_loss_hand_computed(kind, double):
    import tensorflow as tf

    from ba3c.algos.dqn import DQNLoss, TargetNetwork

    online, target = linear_q(np.eye(2)), linear_q(np.zeros((2, 2)))
    tn = TargetNetwork(online, target, every=1000)
    np.testing.assert_array_equal(target.get_weights()[0], np.eye(2))  # built as a copy of the online network
    target.set_weights([np.diag([1.0, 3.0]).astype(np.float32)])
    loss_fn = DQNLoss(tn, gamma=0.5, loss=kind, double=double)
    args = [tf.constant(a) for a in (OBS, ACTIONS, REWARDS, NEXT, DONES)]
    with tf.GradientTape() as tape:
        loss, stats = loss_fn(online, *args)
    grad = tape.gradient(loss, online.trainable_variables)[0].numpy()
    assert float(loss) == pytest.approx(HAND[(kind, double)])
    td = np.array([0.5 if double else 2.0, -1.0])
    # the largest |Q(s, a)| over the batch's states and every action: Q(s0, 1) = 2
    np.testing.assert_allclose(stats.numpy(), [HAND[(kind, double)], 1.0, np.abs(td).mean(), 2.0], rtol=1e-6)
    # dL/dQ(s_b, a_b) = -f'(td_b) / 2 with f' = clip(td, -1, 1) (huber) or 2 td (mse); Q(s_b, a) = s_b . kernel[:, a]
    dq = -(np.clip(td, -1, 1) if kind == "huber" else 2 * td) / 2
    want = np.zeros((2, 2))
    for b in range(2):
        want[:, ACTIONS[b]] += dq[b] * OBS[b]
    np.testing.assert_allclose(grad, want, rtol=1e-6, atol=1e-7)
    # the target network gets no gradient and is not changed by the loss
    np.testing.assert_array_equal(target.get_weights()[0], np.diag([1.0, 3.0]))


def test_target_copy_every_c_updates():
    from ba3c.algos.dqn import TargetNetwork

    online, target = linear_q(np.eye(2)), linear_q(np.zeros((2, 2)))
    tn = TargetNetwork(online, target, every=3)
    for u in (1, 2, 3, 4, 5, 6):
        online.set_weights([np.full((2, 2), u, np.float32)])
        copied = tn.after_update(u)
        assert copied == (u % 3 == 0)
        # after update u the target holds the weights of the last update that was a multiple of 3 (or the start)
        np.testing.assert_array_equal(target.get_weights()[0], np.eye(2) if u < 3 else np.full((2, 2), u // 3 * 3))


def test_q_head():
    """build_model's Q head: num_actions values and their maximum as the second output; the feature probe finds it."""
    from ba3c.model import HealthProbe, build_model

    model = build_model("mlp", (4,), 3, seed=0, head="q")
    obs = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    q, v = (np.asarray(t) for t in model(obs))
    assert q.shape == (5, 3) and v.shape == (5, 1)
    np.testing.assert_allclose(v[:, 0], q.max(axis=1))
    assert len(model.trainable_variables) == 6  # two hidden layers and the Q head: nothing unused
    assert HealthProbe(model, obs)().units_active > 0


def test_epsilon_schedule():
    """CleanRL's linear schedule: 1 -> 0.01 over 1 M agent steps, then 0.01."""
    assert epsilon_at(0, 1.0, 0.01, 1_000_000) == 1.0
    assert epsilon_at(500_000, 1.0, 0.01, 1_000_000) == pytest.approx(0.505)
    assert epsilon_at(1_000_000, 1.0, 0.01, 1_000_000) == 0.01
    assert epsilon_at(5_000_000, 1.0, 0.01, 1_000_000) == 0.01
    assert epsilon_at(10, 0.5, 0.5, 0) == 0.5


def batch(ids, reward=0.0, term=(), trunc=()) -> Batch:
    n = len(ids)
    t = np.array([i in term for i in ids])
    tr = np.array([i in trunc for i in ids])
    return Batch(np.zeros((n, 4), np.float32), np.full(n, reward, np.float32), t, tr, np.array(ids))


def test_episode_tracker_counts_steps_and_games():
    tr = EpisodeTracker(2)
    assert tr.add(batch([0, 1])) == ([], 0)  # first observations: no step led to them
    eps, steps = tr.add(batch([0, 1], reward=2.0, term=(1,)))
    assert steps == 2 and [(e.env_id, e.score, e.length, e.truncated) for e in eps] == [(1, 2.0, 1, False)]
    eps, steps = tr.add(batch([1, 0], reward=1.0, trunc=(0,)))  # env 1 resets (no step), env 0 truncated
    assert steps == 1 and [(e.env_id, e.score, e.length, e.truncated) for e in eps] == [(0, 3.0, 2, True)]


def make_actor(**kw) -> GorilaActor:
    replay = Replay(2 * 50, 2, (4,), np.float32, clip_rewards=False)
    args = dict(train_batch=4, train_every=4, learning_starts=10, ahead_steps=8, epsilon=(1.0, 0.0, 100),
                ranks=2, steps_before=0, life_loss_terminal=False, seed=0)
    return GorilaActor(replay, **{**args, **kw})


def play(actor: GorilaActor, steps: int) -> None:
    """Both environments step `steps // 2` times (after their first observations)."""
    rng = np.random.default_rng(0)
    if actor.played == 0 and actor.replay.written.sum() == 0:
        actor.add(Batch(rng.normal(size=(2, 4)).astype(np.float32), np.zeros(2, np.float32), np.zeros(2, bool),
                        np.zeros(2, bool), np.array([0, 1])), np.zeros(2), np.zeros(2, np.int32))
    for _ in range(steps // 2):
        actor.add(Batch(rng.normal(size=(2, 4)).astype(np.float32), np.ones(2, np.float32), np.zeros(2, bool),
                        np.zeros(2, bool), np.array([0, 1])), np.zeros(2), np.zeros(2, np.int32))


def test_pacing_schedule_and_frame_count():
    actor = make_actor()
    play(actor, 12)
    assert actor.due(1) == 14 and actor.next_batch(0.01) is None, "sampled before learning_starts + train_every"
    play(actor, 2)
    first = actor.next_batch(0.01)
    assert first is not None and first.obs.shape == (4, 4)
    # the first batch carries the warm-up: 14 steps played, 4 of them counted per update
    assert first.unsampled_steps == 14 - 4
    assert actor.next_batch(0.01) is None  # the next is due at 18
    play(actor, 6)  # 20 played
    second = actor.next_batch(0.01)
    assert second.unsampled_steps == 20 - 14 - 4
    third = actor.next_batch(0.01)  # due at 22: the actor was ahead
    assert third is None
    play(actor, 2)
    third = actor.next_batch(0.01)
    assert third.unsampled_steps == 22 - 20 - 4  # negative: the lead used up; the sum stays what was played
    assert sum(b.unsampled_steps for b in (first, second, third)) + 3 * 4 == actor.played == 22
    # epsilon follows all ranks' steps: 22 here x 2 ranks of 100
    assert actor.epsilon() == pytest.approx(1.0 - 44 / 100)


def test_actor_waits_when_ahead_of_the_learner():
    actor = make_actor(learning_starts=0, ahead_steps=8)
    play(actor, 8)
    stop = threading.Event()
    waited = threading.Event()

    def hand_over() -> None:
        actor.hand_over([], stop)
        waited.set()

    t = threading.Thread(target=hand_over)
    t.start()
    assert not waited.wait(0.5), "the actor went on 8 steps ahead of a learner that took nothing"
    assert actor.next_batch(0.01) is not None  # the learner takes one: the actor may go on
    assert waited.wait(5)
    t.join()
    play(actor, 8)  # 16 played, 1 taken: ahead again
    t = threading.Thread(target=lambda: actor.hand_over([], stop))
    t.start()
    stop.set()  # a stopping run never leaves the actor waiting
    t.join(5)
    assert not t.is_alive()


def test_learner_state_carries_the_target_network():
    """Checkpoints and the start-up broadcast: network, Adam, then the target network, restored all together."""
    from ba3c.algos.dqn import Gorila, make_loss
    from ba3c.config import Config
    from ba3c.dist import Dist
    from ba3c.learner import Learner
    from ba3c.model import build_model

    cfg = Config().replace(algo="gorila", **Gorila.defaults)
    q = lambda: build_model("mlp", (4,), 2, seed=0, head="q")  # noqa: E731
    model = q()
    learner = Learner(model, cfg.learn, Dist(), 1e-3, 0, loss=make_loss(cfg, model, q))
    target = learner.loss.target.model
    arrays = learner.state_arrays()
    assert len(arrays) == 2 * len(model.weights) + len(learner.opt.variables)
    target.set_weights([w + 1 for w in target.get_weights()])
    model.set_weights([w - 1 for w in model.get_weights()])
    learner.load_state_arrays(arrays)
    n = len(model.weights)
    for a, b in zip(target.get_weights() + model.get_weights(), arrays[-n:] + arrays[:n]):
        np.testing.assert_array_equal(a, b)


def filled_replay(seed: int) -> Replay:
    replay = Replay(60, 2, (4,), np.float32, clip_rewards=False)
    rng = np.random.default_rng(seed)
    for t in range(40):
        replay.add(np.array([0, 1]), rng.normal(size=(2, 4)).astype(np.float32), rng.normal(size=2).astype(np.float32),
                   rng.random(2) < 0.1, np.zeros(2, bool), None, rng.integers(0, 2, 2).astype(np.int32), t)
    return replay


def test_replay_saved_at_the_end_is_loaded_on_resume(tmp_path):
    from ba3c.algos import dqn as gorila

    replay = filled_replay(0)
    line = gorila.save_replay(replay, str(tmp_path), 1, updates=12)
    assert "replay memory saved" in line and os.listdir(tmp_path / "replay") == ["rank1"]
    fresh = Replay(60, 2, (4,), np.float32, clip_rewards=False)
    n, line = gorila.load_replay(fresh, str(tmp_path), 1)
    assert n == replay.transitions() > 0 and "loaded" in line
    np.testing.assert_array_equal(fresh.frames, replay.frames)
    assert gorila.load_replay(fresh, str(tmp_path), 0) == (0, "")  # rank 0 saved nothing: it refills
    wrong = Replay(80, 2, (4,), np.float32, clip_rewards=False)  # --replay-size changed on resume
    n, line = gorila.load_replay(wrong, str(tmp_path), 1)
    assert n == 0 and "not loaded" in line and wrong.transitions() == 0


@pytest.mark.parametrize("when", ["write", "free"])
def test_a_full_disk_keeps_the_old_replay_and_the_run_going(when, tmp_path, monkeypatch):
    """No room (a write failing with ENOSPC part-way, or too little free space found before): a line, nothing
    half-written left, and the shard saved before still loads."""
    import errno

    from ba3c.algos import dqn as gorila, replay as replay_mod

    old = filled_replay(0)
    gorila.save_replay(old, str(tmp_path), 0, updates=5)
    if when == "write":
        calls = []

        def failing(path, a):
            calls.append(path)
            if len(calls) == 3:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            return real(path, a)

        real = replay_mod._write_array
        monkeypatch.setattr(replay_mod, "_write_array", failing)
    else:
        monkeypatch.setattr(gorila, "free_bytes", lambda path: 1000)
    line = gorila.save_replay(filled_replay(1), str(tmp_path), 0, updates=9)
    assert "replay memory not saved" in line and "refills" in line
    assert os.listdir(tmp_path / "replay") == ["rank0"]
    fresh = Replay(60, 2, (4,), np.float32, clip_rewards=False)
    assert gorila.load_replay(fresh, str(tmp_path), 0)[0] == old.transitions()
    np.testing.assert_array_equal(fresh.frames, old.frames)


def test_value_bound_only_with_clipped_rewards():
    """With rewards clipped to [-1, 1] no state is worth more than sum_k gamma^k; unclipped rewards (CartPole,
    or any Gym task) give no bound, and no warning can be raised for them."""
    from ba3c.algos.dqn import value_bound

    assert value_bound(0.99, clipped_rewards=True) == pytest.approx(100.0)
    assert value_bound(0.5, clipped_rewards=True) == pytest.approx(2.0)
    assert value_bound(0.99, clipped_rewards=False) is None
    assert value_bound(1.0, clipped_rewards=True) is None  # undiscounted: unbounded
