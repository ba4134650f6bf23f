"""Gorila's replay memory against a slow reference written from the definitions, and against real ALE streams."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from ba3c.algos.replay import SAVED_ARRAYS, Replay, largest_capacity, replay_bytes


@dataclass
class Event:
    """One observation an environment showed the actor, with what came with it and the action chosen."""

    obs: np.ndarray
    reward: float
    terminated: bool
    truncated: bool
    life_end: bool
    action: int
    version: int


def reference_transitions(history: list[Event], stack: int, slots: int, clip: bool) -> list[tuple]:
    """Every transition (s, a, r, s', done) one environment's history holds, by the definitions: it starts at
    an observation that is not its episode's last and did not lose a life (under --life-loss terminal), and
    goes to the environment's next observation; done for a termination or a lost life. The stream is held
    back to its newest `slots` frames, each observation adding one and each episode's first `stack` (its
    own and the frames shown before it); a transition is held while all of its first observation's are."""
    first_frame, written, starts = [], 0, True
    for ev in history:
        written += stack if starts else 1
        first_frame.append(written - stack)  # the oldest frame of this observation's stack
        starts = ev.terminated or ev.truncated
    out = []
    for t in range(len(history) - 1):
        ev, nx = history[t], history[t + 1]
        if ev.terminated or ev.truncated or ev.life_end or first_frame[t] < written - slots:
            continue
        r = float(np.sign(nx.reward)) if clip else nx.reward
        out.append((ev.obs, ev.action, r, nx.obs, float(nx.terminated or nx.life_end), ev.version))
    return out


class FakeEnvs:
    """Environments that stack frames as ALE's AtariVectorEnv does (zeros before an episode's first frame,
    then a shift per step), every frame unique; or unique vector observations (stack 1)."""

    def __init__(self, num_envs: int, stack: int, rng: np.random.Generator, counter: int = 0) -> None:
        self.stack, self.rng, self.counter = stack, rng, counter
        self.obs = [self._first() for _ in range(num_envs)]
        self.ended = [False] * num_envs

    def _frame(self) -> np.ndarray:
        self.counter += 1
        if self.stack == 1:
            return np.array([self.counter, -self.counter, 0.5, self.counter * 2.0], np.float32)
        return np.frombuffer(self.counter.to_bytes(9, "little"), np.uint8).reshape(3, 3).copy()

    def _first(self) -> np.ndarray:
        if self.stack == 1:
            return self._frame()
        return np.stack([np.zeros((3, 3), np.uint8)] * (self.stack - 1) + [self._frame()])

    def step(self, e: int, p_end: float) -> tuple[np.ndarray, float, bool, bool, bool]:
        if self.ended[e]:  # NEXT_STEP auto-reset: a fresh episode, no reward
            self.ended[e] = False
            self.obs[e] = self._first()
            return self.obs[e], 0.0, False, False, False
        frame = self._frame()
        self.obs[e] = frame if self.stack == 1 else np.concatenate([self.obs[e][1:], frame[None]])
        u = self.rng.random()
        term, trunc = u < p_end, p_end <= u < 1.5 * p_end
        lost = not (term or trunc) and self.rng.random() < p_end
        self.ended[e] = term or trunc
        return self.obs[e], float(self.rng.integers(-3, 4)), term, trunc, lost


def feed(replay: Replay, num_envs: int, stack: int, batches: int, p_end: float, seed: int,
         life_loss_terminal: bool = True, counter: int = 0) -> list[list[Event]]:
    """Random asynchronous batches (a random subset of environments, in random order) into `replay`; frames
    numbered from `counter` + 1."""
    rng = np.random.default_rng(seed)
    envs = FakeEnvs(num_envs, stack, rng, counter)
    history: list[list[Event]] = [[] for _ in range(num_envs)]
    started = [False] * num_envs
    for version in range(batches):
        ids = rng.permutation(num_envs)[:rng.integers(1, num_envs + 1)]
        rows = []
        for e in ids:
            if not started[e]:
                started[e] = True
                rows.append((envs.obs[e], 0.0, False, False, False))
            else:
                rows.append(envs.step(int(e), p_end))
        obs = np.stack([r[0] for r in rows])
        rew, term, trunc, lost = (np.array([r[k] for r in rows]) for k in (1, 2, 3, 4))
        life_end = lost & life_loss_terminal
        actions = rng.integers(0, 6, len(ids)).astype(np.int32)
        replay.add(ids, obs, rew.astype(np.float32), term, trunc, life_end, actions, version)
        for j, e in enumerate(ids):
            history[e].append(Event(obs[j].copy(), float(rew[j]), bool(term[j]), bool(trunc[j]), bool(life_end[j]),
                                    int(actions[j]), version))
    return history


def check_against_reference(replay: Replay, history: list[list[Event]], clip: bool, rng: np.random.Generator) -> None:
    want = {}
    for h in history:
        for s, a, r, s2, done, version in reference_transitions(h, replay.stack, replay.slots, clip):
            want[s.tobytes()] = (a, r, s2.tobytes(), done, version)
    assert replay.transitions() == len(want)
    if not want:
        return
    seen: dict[bytes, int] = {}
    for _ in range(max(4, 60 * len(want) // 32)):
        b = replay.sample(32, rng)
        assert b.obs.shape == (32, *replay.obs_shape) and b.next_obs.shape == b.obs.shape
        for j in range(32):
            key = b.obs[j].tobytes()
            assert key in want, "a sampled observation is not one the actor was shown with a transition held"
            assert (int(b.actions[j]), float(b.rewards[j]), b.next_obs[j].tobytes(), float(b.dones[j]),
                    int(b.versions[j])) == want[key]
            seen[key] = seen.get(key, 0) + 1
    assert len(seen) == len(want), "sampling never reached some transitions"


@settings(max_examples=60, deadline=None)
@given(num_envs=st.integers(1, 3), stack=st.sampled_from([1, 4]), slots=st.integers(6, 30),
       batches=st.integers(1, 120), p_end=st.sampled_from([0.0, 0.05, 0.3]), clip=st.booleans(),
       life_loss_terminal=st.booleans(), seed=st.integers(0, 2**31))
def test_matches_reference(num_envs, stack, slots, batches, p_end, clip, life_loss_terminal, seed):
    """Stacking, episode ends, truncation, lost lives, wrap-around and asynchronous interleaving."""
    dtype = np.float32 if stack == 1 else np.uint8
    shape = (4,) if stack == 1 else (stack, 3, 3)
    replay = Replay(slots * num_envs + (num_envs - 1), num_envs, shape, dtype, clip_rewards=clip)
    assert replay.slots == slots
    history = feed(replay, num_envs, stack, batches, p_end, seed, life_loss_terminal)
    check_against_reference(replay, history, clip, np.random.default_rng(seed + 1))


@settings(max_examples=25, deadline=None)
@given(num_envs=st.integers(1, 3), stack=st.sampled_from([1, 4]), slots=st.integers(6, 30),
       before=st.integers(0, 80), after=st.integers(0, 80), p_end=st.sampled_from([0.0, 0.1]),
       seed=st.integers(0, 2**31))
def test_saved_and_loaded_replay_holds_the_same_transitions(num_envs, stack, slots, before, after, p_end, seed):
    """--replay-save end: a replay saved, loaded into a new one (a resume) and fed on holds what the definitions
    say, with the simulators' new episodes after the resume: no transition joins a saved frame to a new one."""
    dtype = np.float32 if stack == 1 else np.uint8
    shape = (4,) if stack == 1 else (stack, 3, 3)
    replay = Replay(slots * num_envs, num_envs, shape, dtype, clip_rewards=True)
    history = feed(replay, num_envs, stack, before, p_end, seed)
    loaded = Replay(slots * num_envs, num_envs, shape, dtype, clip_rewards=True)
    with tempfile.TemporaryDirectory() as d:
        replay.save(os.path.join(d, "shard"), {"updates": 7})
        assert loaded.load(os.path.join(d, "shard")) == replay.transitions()
    for name in SAVED_ARRAYS:
        np.testing.assert_array_equal(getattr(loaded, name), getattr(replay, name))
    for h in history:  # the process ended: each environment's last observation is its episode's last
        if h:
            h[-1].truncated = True
    resumed = feed(loaded, num_envs, stack, after, p_end, seed + 1, counter=10**6)
    check_against_reference(loaded, [h + r for h, r in zip(history, resumed)], True, np.random.default_rng(seed))


def test_load_refuses_a_torn_or_different_replay(tmp_path):
    replay = Replay(40, 2, (4, 3, 3), np.uint8, clip_rewards=True)
    feed(replay, 2, 4, 30, 0.1, seed=5)
    replay.save(str(tmp_path / "a"))
    other = Replay(60, 2, (4, 3, 3), np.uint8, clip_rewards=True)
    with pytest.raises(ValueError, match="layout"):
        other.load(str(tmp_path / "a"))
    os.remove(tmp_path / "a" / "replay.json")  # a save cut short before its last file
    with pytest.raises(ValueError, match="replay.json"):
        Replay(40, 2, (4, 3, 3), np.uint8, clip_rewards=True).load(str(tmp_path / "a"))


def test_save_writes_only_the_slots_written_so_far(tmp_path):
    """A part-filled replay (a run stopped early) saves the written slots, not its whole capacity, and loads
    back the same; once a stream wraps, every slot is saved. A shard whose cursors run past its saved slots
    (edited or mixed up) is refused."""
    replay = Replay(2 * 50, 2, (4, 3, 3), np.uint8, clip_rewards=True)
    feed(replay, 2, 4, 8, 0.1, seed=3)
    filled = replay.filled()
    assert 0 < filled < replay.slots and filled == int(replay.written.max())
    written = replay.save(str(tmp_path / "part"))
    assert np.load(tmp_path / "part" / "frames.npy").shape == (2, filled, 3, 3)
    assert written < replay_bytes(replay.num_envs * replay.slots, (4, 3, 3), 1)
    loaded = Replay(2 * 50, 2, (4, 3, 3), np.uint8, clip_rewards=True)
    assert loaded.load(str(tmp_path / "part")) == replay.transitions() > 0
    for name in SAVED_ARRAYS:
        np.testing.assert_array_equal(getattr(loaded, name), getattr(replay, name))
    np.save(tmp_path / "part" / "written.npy", replay.written + filled)
    with pytest.raises(ValueError, match="only"):
        loaded.load(str(tmp_path / "part"))
    assert loaded.transitions() == replay.transitions()  # refused before anything was copied
    feed(replay, 2, 4, 200, 0.1, seed=4)  # wraps
    assert replay.filled() == replay.slots
    replay.save(str(tmp_path / "full"))
    assert np.load(tmp_path / "full" / "frames.npy").shape == (2, replay.slots, 3, 3)


def test_wraps_around_and_never_straddles_the_cursor():
    """A long single stream in a small replay: only the newest frames' transitions, the newest observation
    (whose next one has not arrived) never a start."""
    replay = Replay(10, 1, (4, 3, 3), np.uint8, clip_rewards=True)
    history = feed(replay, 1, 4, 500, 0.0, seed=3)
    assert replay.written[0] == 500 + 3  # one episode: its first observation's 3 earlier frames, then one per step
    # 10 frames held: the newest observation's stack and the 6 before it complete; the newest has no next yet
    assert replay.transitions() == 6
    check_against_reference(replay, history, True, np.random.default_rng(0))
    newest = history[0][-1].obs.tobytes()
    b = replay.sample(256, np.random.default_rng(1))
    assert all(o.tobytes() != newest for o in b.obs)


def test_uniform_over_transitions():
    """Environments that have written more hold more transitions and are drawn in proportion."""
    replay = Replay(3 * 200, 3, (4,), np.float32, clip_rewards=False)
    rng = np.random.default_rng(0)
    for t in range(60):  # environment 0 steps every batch, 1 every other, 2 every third
        ids = np.array([e for e in range(3) if t % (e + 1) == 0])
        obs = rng.normal(size=(len(ids), 4)).astype(np.float32)
        z = np.zeros(len(ids), bool)
        replay.add(ids, obs, np.ones(len(ids), np.float32), z, z, None, np.zeros(len(ids), np.int32))
    counts = np.zeros(3)
    held = replay.transitions()
    assert held == 59 + 29 + 19
    for _ in range(200):
        b = replay.sample(64, rng)
        for o in b.obs:  # which environment: recover it from the order the observations were written
            for e in range(3):
                if (replay.frames[e] == o).all(axis=1).any():
                    counts[e] += 1
    share = counts / counts.sum()
    np.testing.assert_allclose(share, np.array([59, 29, 19]) / held, atol=0.03)


def test_refuses_what_it_cannot_sample_and_tiny_streams():
    replay = Replay(16, 2, (4,), np.float32, clip_rewards=False)
    with pytest.raises(ValueError, match="no transitions"):
        replay.sample(4, np.random.default_rng(0))
    z = np.zeros(1, bool)
    replay.add(np.array([0]), np.ones((1, 4), np.float32), np.zeros(1, np.float32), z, z, None, np.zeros(1, np.int32))
    with pytest.raises(ValueError, match="no complete transition"):  # one observation, its next not yet here
        replay.sample(4, np.random.default_rng(0))
    with pytest.raises(ValueError, match="slots per environment"):
        Replay(8, 4, (4, 84, 84), np.uint8, clip_rewards=True)


def test_memory_estimate():
    """One million Atari slots ~7 GB (84 x 84 bytes each and their bookkeeping); a replay's arrays are what
    the estimate says; the largest capacity that fits is the inverse."""
    assert 7.0e9 < replay_bytes(1_000_000, (4, 84, 84), 1) < 7.1e9
    replay = Replay(4 * 50, 4, (4, 84, 84), np.uint8, clip_rewards=True)
    arrays = (replay.frames, replay.action, replay.reward, replay.version, replay.done, replay.has_next)
    assert sum(a.nbytes for a in arrays) == replay_bytes(200, (4, 84, 84), 1)
    vec = Replay(3 * 7, 3, (4,), np.float32, clip_rewards=False)
    assert sum(a.nbytes for a in (vec.frames, vec.action, vec.reward, vec.version, vec.done, vec.has_next)) \
        == replay_bytes(21, (4,), 4)
    fits = largest_capacity(10**9, (4, 84, 84), 1)
    assert replay_bytes(fits, (4, 84, 84), 1) <= 10**9 < replay_bytes(fits + 1, (4, 84, 84), 1)


@pytest.mark.parametrize("game,life_loss_terminal", [("breakout", True), ("pong", False)])
def test_samples_are_what_ale_showed_the_actor(game, life_loss_terminal):
    """The real asynchronous ALE vector env (episodes cut short by a small cap, lives lost in Breakout, FIRE
    pressed after them): every sampled observation, next observation, action, reward and terminal flag is
    one the actor saw, and a fresh episode's stack starts with zero frames, as ALE shows them."""
    from ba3c.simulators import EnvSpec, make_simulator

    sim = make_simulator(EnvSpec("atari", game), 6, 3, 1, max_episode_frames=400,
                         fire_after_life_loss=life_loss_terminal)
    rng = np.random.default_rng(0)
    replay = Replay(6 * 60, 6, sim.obs_shape, sim.obs_dtype, clip_rewards=True)
    allowed: dict[bytes, set] = {}
    pending: dict[int, tuple] = {}
    firsts, ends, lives = 0, 0, 0
    b = sim.reset(1)
    try:
        for _ in range(700):
            actions = rng.integers(0, sim.num_actions, len(b.env_ids)).astype(np.int32)
            life_end = b.life_lost & life_loss_terminal
            replay.add(b.env_ids, b.obs, b.reward, b.terminated, b.truncated, life_end, actions)
            for j, e in enumerate(b.env_ids):
                e = int(e)
                if e in pending:
                    s, a = pending.pop(e)
                    done = float(b.terminated[j] or life_end[j])
                    allowed.setdefault(s, set()).add((a, float(np.sign(b.reward[j])), b.obs[j].tobytes(), done))
                firsts += bool((b.obs[j][:3] == 0).all() and b.obs[j][3].any())  # an episode's first observation
                ends += bool(b.terminated[j] or b.truncated[j])
                lives += bool(life_end[j])
                if not (b.terminated[j] or b.truncated[j] or life_end[j]):
                    pending[e] = (b.obs[j].tobytes(), int(actions[j]))
            sim.send(actions)
            b = sim.recv()
    finally:
        sim.close()
    assert ends >= 6 and firsts >= ends, "too few episode starts (zero frames before the first) to test a reset"
    if life_loss_terminal:
        assert lives > 0
    assert replay.transitions() > 100
    for _ in range(10):
        s = replay.sample(64, rng)
        for j in range(64):
            key = (int(s.actions[j]), float(s.rewards[j]), s.next_obs[j].tobytes(), float(s.dones[j]))
            assert key in allowed.get(s.obs[j].tobytes(), set()), "a sample the actor never saw"
