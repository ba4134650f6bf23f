"""n-step returns and advantages against a slow reference written straight from the equations."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from ba3c.experience import Experience, nstep_returns
from ba3c.simulators import Batch


def reference_targets(rewards, values, dones_term, dones_trunc, final_values, n, gamma):
    """For one environment's trajectory, every action's target by the n-step definition.

    Step t (obs o_t, value v_t, reward r_t, episode ends after it if term/trunc) belongs to the
    segment starting at the last multiple of n within its episode; its return is
    sum_{k=t}^{e-1} gamma^{k-t} r_k + gamma^{e-t} * B, where e is the segment end and B is
    0 (terminated), v(final obs) (truncated) or v_e (segment cut by the n-step limit).
    """
    targets = []
    T = len(rewards)
    ep_start = 0
    t = 0
    while t < T:
        seg_start = t
        e = seg_start
        while e < T and e - seg_start < n:
            e += 1
            if dones_term[e - 1] or dones_trunc[e - 1]:
                break
        last = e - 1
        if dones_term[last]:
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
    prev_r, prev_te, prev_tr = 0.0, False, False
    T = len(rewards)
    for t in range(T):
        # obs o_t arrives with the reward/flags of the previous step
        bs, _ = exp.add(Batch(np.array([[float(t)]], np.float32), np.array([prev_r], np.float32),
                              np.array([False]), np.array([False]), ids), np.array([values[t]]), np.array([0]))
        out += bs
        prev_r, prev_te, prev_tr = rewards[t], term[t], trunc[t]
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
