"""n-step returns and advantages against a slow reference written straight from the equations."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from ba3c.experience import Experience, nstep_returns
from ba3c.simulators import Batch


def reference_targets(rewards, values, dones_term, dones_trunc, final_values, n, gamma, lives_lost=None):
    """For one environment's trajectory, every action's target by the n-step definition.

    Step t (obs o_t, value v_t, reward r_t, episode ends after it if term/trunc, a life ends after
    it if lives_lost) belongs to the segment starting at the last multiple of n within its life;
    its return is sum_{k=t}^{e-1} gamma^{k-t} r_k + gamma^{e-t} * B, where e is the segment end and
    B is 0 (terminated, or a life lost), v(final obs) (truncated) or v_e (cut by the n-step limit).
    """
    lives_lost = lives_lost or [False] * len(rewards)
    targets = []
    T = len(rewards)
    t = 0
    while t < T:
        seg_start = t
        e = seg_start
        while e < T and e - seg_start < n:
            e += 1
            if dones_term[e - 1] or dones_trunc[e - 1] or lives_lost[e - 1]:
                break
        last = e - 1
        if dones_term[last] or lives_lost[last]:
            boot = 0.0
        elif dones_trunc[last]:
            boot = final_values[last]
        elif e < T:
            boot = values[e]
        else:
            break  # incomplete segment at the end of the data: not emitted
        for k in range(seg_start, e):
            R = sum(gamma ** (j - k) * rewards[j] for j in range(k, e)) + gamma ** (e - k) * boot
            targets.append((k, R, R - values[k]))
        t = e
    return targets


def drive(rewards, values, term, trunc, final_values, n, gamma, batch):
    """Feed one environment's trajectory through Experience as the runner does (NEXT_STEP reset)."""
    exp = Experience(1, (1,), np.dtype(np.float32), n, gamma, batch, clip_rewards=False)
    out = []
    ids = np.array([0])
    prev_r = 0.0
    T = len(rewards)
    for t in range(T):
        # obs o_t arrives with the reward/flags of the previous step
        bs, _ = exp.add(Batch(np.array([[float(t)]], np.float32), np.array([prev_r], np.float32),
                              np.array([False]), np.array([False]), ids), np.array([values[t]]), np.array([0]))
        out += bs
        prev_r = rewards[t]
        if term[t] or trunc[t]:  # the final obs of the episode arrives with the flags
            bs, eps = exp.add(Batch(np.array([[-1.0]], np.float32), np.array([prev_r], np.float32),
                                    np.array([term[t]]), np.array([trunc[t] and not term[t]]), ids),
                              np.array([final_values[t]]), np.array([0]))
            out += bs
            assert len(eps) == 1
            # obs t+1 is the reset obs; the reward it arrives with belongs to no action: poison it
            prev_r = 123.0
    got = []
    for b in out:
        for o, R, A in zip(b.obs[:, 0], b.returns, b.advantages):
            got.append((int(o), float(R), float(A)))
    return got


def reference_episodes(rewards, term, trunc, lives_lost, fire_rewards):
    """(score, length, truncated) of every finished episode: all the game's steps count, the step
    after a lost life (its reward fire_rewards[t]) included, though it is in no return."""
    out, score, length = [], 0.0, 0
    for t in range(len(rewards)):
        score, length = score + rewards[t], length + 1
        if term[t] or trunc[t]:
            out.append((score, length, bool(trunc[t] and not term[t])))
            score, length = 0.0, 0
        elif lives_lost[t]:
            score, length = score + fire_rewards[t], length + 1
    return out


def drive_lives(rewards, values, term, trunc, lives_lost, final_values, fire_rewards, n, gamma, batch):
    """As `drive`, with lives (Experience with life_loss_terminal): after step t with lives_lost[t] the
    observation that lost the life arrives (value final_values[t]; its action is not trained), then
    step t+1's observation with the reward of the step in between (fire_rewards[t])."""
    exp = Experience(1, (1,), np.dtype(np.float32), n, gamma, batch, clip_rewards=False, life_loss_terminal=True)
    out, episodes = [], []
    ids = np.array([0])

    def add(obs, r, te, tr, lost, v):
        bs, eps = exp.add(Batch(np.array([[obs]], np.float32), np.array([r], np.float32), np.array([te]),
                                np.array([tr]), ids, np.array([lost])), np.array([v]), np.array([0]))
        out.extend(bs)
        episodes.extend((x.score, x.length, x.truncated) for x in eps)

    prev_r = 0.0
    for t in range(len(rewards)):
        add(float(t), prev_r, False, False, False, values[t])
        prev_r = rewards[t]
        if term[t] or trunc[t]:
            add(-1.0, prev_r, term[t], trunc[t] and not term[t], lives_lost[t], final_values[t])
            prev_r = 123.0  # arrives with the reset obs: belongs to no action and no episode
        elif lives_lost[t]:
            add(-2.0, prev_r, False, False, True, final_values[t])
            prev_r = fire_rewards[t]
    got = [(int(o), float(R), float(A)) for b in out for o, R, A in zip(b.obs[:, 0], b.returns, b.advantages)]
    return got, episodes


def test_nstep_returns_simple():
    r = nstep_returns(np.array([1.0, 0.0, 2.0], np.float32), bootstrap=10.0, gamma=0.5)
    np.testing.assert_allclose(r, [1 + 0.5 * (0 + 0.5 * (2 + 0.5 * 10)), 0 + 0.5 * (2 + 0.5 * 10), 2 + 0.5 * 10])


def test_truncation_bootstraps_and_termination_does_not():
    rewards = [1.0, 1.0, 1.0, 1.0]
    values = [0.5, 0.5, 0.5, 0.5]
    for term, trunc, boot in (([0, 1, 0, 0], [0, 0, 0, 0], 0.0), ([0, 0, 0, 0], [0, 1, 0, 0], 7.0)):
        got = drive(rewards[:2], values[:2], [bool(x) for x in term[:2]], [bool(x) for x in trunc[:2]],
                    [7.0, 7.0], n=5, gamma=0.9, batch=1)
        assert [g[0] for g in got] == [0, 1]
        assert abs(got[1][1] - (1.0 + 0.9 * boot)) < 1e-5
        assert abs(got[0][1] - (1.0 + 0.9 * got[1][1])) < 1e-5


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.floats(0.5, 1.0), st.integers(1, 40), st.data())
def test_matches_reference(n, gamma, T, data):
    rewards = data.draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 2.5]), min_size=T, max_size=T))
    values = data.draw(st.lists(st.floats(-3, 3), min_size=T, max_size=T))
    ends = data.draw(st.lists(st.sampled_from(["", "", "", "term", "trunc"]), min_size=T, max_size=T))
    finals = data.draw(st.lists(st.floats(-3, 3), min_size=T, max_size=T))
    term = [e == "term" for e in ends]
    trunc = [e == "trunc" for e in ends]
    got = drive(rewards, values, term, trunc, finals, n, gamma, batch=1)
    want = reference_targets(rewards, values, term, trunc, finals, n, gamma)
    assert [g[0] for g in got] == [w[0] for w in want]
    np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose([g[2] for g in got], [w[2] for w in want], rtol=1e-4, atol=1e-4)


def test_batches_have_fixed_size_and_episode_scores_are_raw():
    exp = Experience(2, (1,), np.dtype(np.float32), 2, 0.99, 3, clip_rewards=True)
    ids = np.array([0, 1])
    z = np.zeros(2, bool)
    batches, eps = [], []
    for t in range(6):
        b, e = exp.add(Batch(np.zeros((2, 1), np.float32), np.array([5.0, -5.0]) if t else np.zeros(2), z, z, ids),
                       np.zeros(2), np.zeros(2, int))
        batches += b
        eps += e
    assert all(len(b.actions) == 3 for b in batches) and batches
    assert np.all(np.abs(np.concatenate([b.returns for b in batches])) <= 2.0)  # clipped rewards (+-1)
    _, e = exp.add(Batch(np.zeros((2, 1), np.float32), np.array([5.0, -5.0]), np.array([True, True]), z, ids),
                   np.zeros(2), np.zeros(2, int))
    assert sorted(x.score for x in e) == [-30.0, 30.0]  # six raw rewards each, unclipped


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), st.floats(0.5, 1.0), st.integers(1, 40), st.data())
def test_life_loss_terminal_matches_reference(n, gamma, T, data):
    """A lost life cuts the return (bootstrap 0) and the trained steps; episodes stay whole games."""
    rewards = data.draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0, 2.5]), min_size=T, max_size=T))
    values = data.draw(st.lists(st.floats(-3, 3), min_size=T, max_size=T))
    ends = data.draw(st.lists(st.sampled_from(["", "", "", "life", "life", "term", "trunc", "trunc+life"]),
                              min_size=T, max_size=T))
    finals = data.draw(st.lists(st.floats(-3, 3), min_size=T, max_size=T))
    fire = data.draw(st.lists(st.sampled_from([0.0, 1.0, 7.0]), min_size=T, max_size=T))
    term = [e == "term" for e in ends]
    trunc = [e.startswith("trunc") for e in ends]
    lost = [e.endswith("life") for e in ends]
    got, episodes = drive_lives(rewards, values, term, trunc, lost, finals, fire, n, gamma, batch=1)
    want = reference_targets(rewards, values, term, trunc, finals, n, gamma, lost)
    assert [g[0] for g in got] == [w[0] for w in want]  # the observations that lost a life (-2) take no action
    np.testing.assert_allclose([g[1] for g in got], [w[1] for w in want], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose([g[2] for g in got], [w[2] for w in want], rtol=1e-4, atol=1e-4)
    want_eps = reference_episodes(rewards, term, trunc, lost, fire)
    assert [e[1:] for e in episodes] == [w[1:] for w in want_eps]
    np.testing.assert_allclose([e[0] for e in episodes], [w[0] for w in want_eps], rtol=1e-5)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 60), st.integers(1, 7), st.data())
def test_life_loss_ignored_changes_nothing(n, T, batch, data):
    """Without life_loss_terminal the same stream gives the same batches and episodes as one without lives."""
    num_envs = 3
    env = data.draw(st.lists(st.integers(0, num_envs - 1), min_size=T, max_size=T))
    r = data.draw(st.lists(st.sampled_from([-1.0, 0.0, 1.0]), min_size=T, max_size=T))
    flags = data.draw(st.lists(st.sampled_from(["", "", "life", "term", "trunc"]), min_size=T, max_size=T))
    results = []
    for lives in (True, False):
        exp = Experience(num_envs, (1,), np.dtype(np.float32), n, 0.9, batch, clip_rewards=True)
        out, eps = [], []
        for t in range(T):
            b = Batch(np.array([[float(t)]], np.float32), np.array([r[t]], np.float32), np.array([flags[t] == "term"]),
                      np.array([flags[t] == "trunc"]), np.array([env[t]]),
                      np.array([flags[t] == "life"]) if lives else None)
            bs, es = exp.add(b, np.array([0.1 * t]), np.array([t % 4]))
            out += [(x.obs.tolist(), x.actions.tolist(), x.returns.tolist()) for x in bs]
            eps += [(x.env_id, x.score, x.length, x.truncated) for x in es]
        results.append((out, eps))
    assert results[0] == results[1]
