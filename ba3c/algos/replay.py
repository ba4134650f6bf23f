"""Gorila's experience store on one rank (its shard): a replay memory of single frames, stacked when sampled.

No TensorFlow, no MPI. Written here because no well-kept library fits: cpprb (NumPy, with prioritized
replay) keeps one sequential stream per buffer, so its frame stacking would mix environments that the
asynchronous vector env interleaves; dm-reverb's last release (0.14, December 2023) has wheels only up
to CPython 3.11 and pins TensorFlow ~2.15, neither of which this project runs.

Layout. Each environment of the rank writes its own circular stream of `capacity // num_envs` slots.
A slot holds one frame (an Atari observation's newest 84x84 uint8 frame; a vector observation, such
as CartPole's, whole), the action chosen for that observation and what followed it (clipped reward,
terminal flag). A stacked observation is then a slice of one stream: frames n-3..n. Each episode's
first observation is written with the frames before its newest one (what the actor was shown: ALE's
AtariVectorEnv shows zeros there, measured with ale-py 0.12.1, checked against the real simulator by
tests/unit/test_replay.py) as `stack - 1` padding slots that no sample starts from, so a stack never
reaches into another episode and needs no mask. One million Atari slots take ~7 GB this way
(`replay_bytes`), against ~28 GB for stored stacks.

The stream follows the simulators' NEXT_STEP auto-reset (`ba3c.simulators`): the observation that
arrives with `terminated` or `truncated` is its episode's last, the action chosen for it is ignored,
and the next one of that environment starts a new episode. A transition (s, a, r, s', done) is an
observation with a trained action and the environment's next observation. `done` is 1 for a
termination and, with the trainer's `--life-loss terminal`, for a lost life (`life_end`): the target
then does not bootstrap. A truncation (the episode cap) bootstraps from its final observation, which
the stream holds. The observation that lost a life under `--life-loss terminal` takes no trained
action (the simulator answers it with FIRE in games that have it, as BA3C's experience does), so no
transition starts there; its frame is still part of the next observation's stack.

A sample is uniform over the transitions held: it never starts at a padding slot, an episode's last
observation or a life-loss observation, never runs past the write cursor (the next observation must
have arrived) and never reaches frames that the cursor has overwritten.
"""
from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass, field

import numpy as np

# Per-slot bookkeeping besides the frame: action int32, reward float32, policy version int32, two bool flags
SLOT_META_BYTES = 4 + 4 + 4 + 1 + 1
# What `Replay.save` writes, one .npy file each, then replay.json (written last: a directory without it is torn)
SAVED_ARRAYS = ("frames", "action", "reward", "version", "done", "has_next", "written")
SAVED_META = "replay.json"


def frame_layout(obs_shape: tuple[int, ...]) -> tuple[int, tuple[int, ...]]:
    """(frames per observation, shape of one stored frame): image stacks (stack, H, W) are stored a
    frame at a time; anything else (vector observations) whole, as a 'stack' of 1."""
    if len(obs_shape) == 3:
        return int(obs_shape[0]), tuple(int(x) for x in obs_shape[1:])
    return 1, tuple(int(x) for x in obs_shape)


def replay_bytes(capacity: int, obs_shape: tuple[int, ...], itemsize: int) -> int:
    """Bytes a replay of `capacity` slots holds when full (frames and per-slot bookkeeping)."""
    _, frame_shape = frame_layout(obs_shape)
    return capacity * (int(np.prod(frame_shape, dtype=np.int64)) * itemsize + SLOT_META_BYTES)


def largest_capacity(available_bytes: int, obs_shape: tuple[int, ...], itemsize: int) -> int:
    """The most slots that fit in `available_bytes` (0 if none)."""
    return max(0, int(available_bytes) // replay_bytes(1, obs_shape, itemsize))


@dataclass
class ReplaySample:
    """A sampled batch of transitions (every array has the batch first)."""

    obs: np.ndarray        # stacked observations s, as the actor was given them
    actions: np.ndarray    # int32
    rewards: np.ndarray    # float32, clipped if the replay clips
    next_obs: np.ndarray   # s'
    dones: np.ndarray      # float32: 1 where the target must not bootstrap from s'
    # int64 learner updates made when each action was chosen (the samples' age = now - this)
    versions: np.ndarray = field(default_factory=lambda: np.zeros(1, np.int64))
    # agent steps played since the previous batch beyond those the trainer counts per update (ba3c.experience's
    # TrainBatch has the same field): set by whoever hands the batch to the trainer
    unsampled_steps: int = 0


class Replay:
    """One rank's replay memory: `add` one predictor batch at a time (any order of environments), `sample`
    batches. Both may be called from different threads."""

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple[int, ...], obs_dtype: np.dtype,
                 clip_rewards: bool) -> None:
        self.stack, self.frame_shape = frame_layout(obs_shape)
        self.obs_shape = tuple(obs_shape)
        self.num_envs, self.capacity = num_envs, capacity
        self.slots = capacity // num_envs  # per environment's stream
        if self.slots < self.stack + 2:
            raise ValueError(f"replay capacity {capacity} gives {self.slots} slots per environment for {num_envs} "
                             f"environments; at least {self.stack + 2} are needed")
        self.clip_rewards = clip_rewards
        shape = (num_envs, self.slots)
        # np.zeros: the pages are committed as the streams fill, not all at once
        self.frames = np.zeros((*shape, *self.frame_shape), obs_dtype)
        self.action = np.zeros(shape, np.int32)
        self.reward = np.zeros(shape, np.float32)
        self.version = np.zeros(shape, np.int32)
        self.done = np.zeros(shape, bool)
        self.has_next = np.zeros(shape, bool)  # a trained action was taken here and its next observation arrived
        self.written = np.zeros(num_envs, np.int64)  # slots each stream has written in all (its cursor)
        self._open = np.zeros(num_envs, bool)      # the stream's last slot took a trained action; its successor is due
        self._new_episode = np.ones(num_envs, bool)  # the next observation starts an episode
        self._lock = threading.Lock()

    # ---- writing
    def add(self, env_ids: np.ndarray, obs: np.ndarray, rewards: np.ndarray, terminated: np.ndarray,
            truncated: np.ndarray, life_end: np.ndarray | None, actions: np.ndarray, version: int = 0) -> None:
        """Record one predictor batch: environment env_ids[j] shows obs[j], which came with the reward and
        end flags of the step that led to it, and the actor chose actions[j] for it (after `version`
        learner updates). life_end[j]: a life was lost in that step and it ends the return (--life-loss
        terminal); None: never."""
        with self._lock:
            for j, e in enumerate(np.asarray(env_ids, np.int64)):
                e = int(e)
                lost = bool(life_end[j]) if life_end is not None else False
                if self._open[e]:
                    prev = self._slot(e, self.written[e] - 1)
                    r = float(rewards[j])
                    self.reward[e, prev] = np.sign(r) if self.clip_rewards else r
                    self.done[e, prev] = bool(terminated[j]) or lost
                    self.has_next[e, prev] = True
                if self._new_episode[e]:
                    for k in range(self.stack - 1):  # the frames the actor was shown before the episode's first
                        self._write(e, obs[j][k], 0, version)
                    self._new_episode[e] = False
                self._write(e, obs[j][-1] if self.stack > 1 else obs[j], int(actions[j]), version)
                ended = bool(terminated[j]) or bool(truncated[j])
                self._open[e] = not (ended or lost)  # an episode's last observation, or FIRE after a lost life
                self._new_episode[e] = ended

    def _slot(self, e: int, n: int | np.ndarray) -> int | np.ndarray:
        return n % self.slots

    def _write(self, e: int, frame: np.ndarray, action: int, version: int) -> None:
        i = int(self.written[e] % self.slots)
        self.frames[e, i] = frame
        self.action[e, i] = action
        self.version[e, i] = version
        self.reward[e, i] = 0.0
        self.done[e, i] = False
        self.has_next[e, i] = False
        self.written[e] += 1

    # ---- reading
    def _held(self) -> np.ndarray:
        return np.minimum(self.written, self.slots)

    def _valid(self, e: np.ndarray, n: np.ndarray) -> np.ndarray:
        """Absolute slot n of stream e starts a transition whose whole stack is still held."""
        return self.has_next[e, n % self.slots] & (n - (self.stack - 1) >= self.written[e] - self.slots)

    def transitions(self) -> int:
        """Transitions a sample can draw from now (a full scan: for tests and reports, not per step)."""
        with self._lock:
            total = 0
            for e in range(self.num_envs):
                held = int(min(self.written[e], self.slots))
                n = np.arange(self.written[e] - held, self.written[e])
                total += int(self._valid(np.full(held, e), n).sum())
            return total

    def sample(self, batch_size: int, rng: np.random.Generator) -> ReplaySample:
        """`batch_size` transitions drawn uniformly, with replacement, from those held. Draws a slot uniformly
        from all held ones and keeps it if a transition starts there (most do: all but an episode's ends and
        the stack's first frames), which makes the kept ones uniform over transitions."""
        with self._lock:
            held = self._held()
            total = int(held.sum())
            if total == 0:
                raise ValueError("the replay holds no transitions yet")
            cum = np.cumsum(held)
            env = np.empty(0, np.int64)
            absn = np.empty(0, np.int64)
            for _ in range(1000):
                k = rng.integers(0, total, 2 * batch_size)
                e = np.searchsorted(cum, k, side="right")
                n = self.written[e] - held[e] + (k - (cum[e] - held[e]))
                ok = self._valid(e, n)
                env, absn = np.concatenate([env, e[ok]]), np.concatenate([absn, n[ok]])
                if len(env) >= batch_size:
                    break
            else:
                raise ValueError("the replay holds no complete transition yet")
            env, absn = env[:batch_size], absn[:batch_size]
            steps = np.arange(-(self.stack - 1), 1)
            cols = (absn[:, None] + steps[None, :]) % self.slots  # (B, stack) slots of s
            nxt = (absn[:, None] + 1 + steps[None, :]) % self.slots
            rows = env[:, None]
            obs, next_obs = self.frames[rows, cols], self.frames[rows, nxt]
            if self.stack == 1:
                obs, next_obs = obs[:, 0], next_obs[:, 0]
            i = absn % self.slots
            return ReplaySample(obs, self.action[env, i].copy(), self.reward[env, i].copy(), next_obs,
                                self.done[env, i].astype(np.float32), self.version[env, i].astype(np.int64))

    # ---- persistence (--replay-save end: ba3c.algos.dqn.save_replay / load_replay)
    def layout(self) -> dict:
        """What a saved replay must match to be loaded into this one."""
        return {"num_envs": self.num_envs, "slots": self.slots, "frame_shape": list(self.frame_shape),
                "dtype": np.dtype(self.frames.dtype).str, "stack": self.stack, "clip_rewards": self.clip_rewards}

    def clear(self) -> None:
        """Forget every slot: empty, as new (the frames stay in memory but no sample reaches them)."""
        with self._lock:
            self.written[:] = 0
            self.has_next[:] = False
            self._open[:] = False
            self._new_episode[:] = True

    def filled(self) -> int:
        """Slots of each stream ever written, the longest stream's (all of them once any stream wrapped): the
        part `save` writes, since the slots past it were never written."""
        return int(min(self.slots, int(self.written.max(initial=0))))

    def saved_bytes(self) -> int:
        """About what `save` writes now (a free-space check before it)."""
        return replay_bytes(self.num_envs * self.filled(), self.obs_shape, self.frames.dtype.itemsize)

    def save(self, directory: str, info: dict | None = None) -> int:
        """Write the slots written so far (`filled`) into `directory` (created), one fsynced .npy per array, then
        `replay.json` with the layout and `info`; returns the bytes written. The caller holds the only writer
        (the actor stopped)."""
        os.makedirs(directory, exist_ok=True)
        total = 0
        with self._lock:
            filled = self.filled()
            for name in SAVED_ARRAYS:
                a = getattr(self, name)
                total += _write_array(os.path.join(directory, f"{name}.npy"), a if name == "written" else a[:, :filled])
        meta = {"layout": self.layout(), "filled": filled, "transitions": self.transitions(), **(info or {})}
        with open(os.path.join(directory, SAVED_META), "w") as fh:
            json.dump(meta, fh)
            fh.flush()
            os.fsync(fh.fileno())
        return total

    def load(self, directory: str) -> int:
        """Fill this replay from `save`'s `directory`; returns the transitions it holds. ValueError (saying why),
        before anything is copied, when the directory is torn or its layout differs. Every stream then waits for
        a new episode: the simulators start new ones on a resume, so no transition joins a saved frame to a new one."""
        meta_path = os.path.join(directory, SAVED_META)
        if not os.path.exists(meta_path):
            raise ValueError(f"{directory} has no {SAVED_META} (a save cut short)")
        with open(meta_path) as fh:
            meta = json.load(fh)
        if meta.get("layout") != self.layout():
            raise ValueError(f"it was saved with layout {meta.get('layout')}, this run's is {self.layout()}")
        filled = int(meta.get("filled", self.slots))  # shards saved before `filled` existed hold every slot
        if not 0 <= filled <= self.slots:
            raise ValueError(f"it says {filled} slots were saved, outside 0..{self.slots}")
        sources = {}
        for name in SAVED_ARRAYS:  # every shape checked before anything is copied
            src = np.load(os.path.join(directory, f"{name}.npy"), mmap_mode="r")  # copied, not loaded twice
            dst = getattr(self, name) if name == "written" else getattr(self, name)[:, :filled]
            if src.shape != dst.shape or src.dtype != dst.dtype:
                raise ValueError(f"{name}.npy holds {src.dtype}{src.shape}, expected {dst.dtype}{dst.shape}")
            sources[name] = src
        wrote = int(np.max(sources["written"], initial=0))
        if filled < self.slots and wrote > filled:
            raise ValueError(f"its streams wrote up to {wrote} slots but only {filled} were saved")
        self.clear()
        with self._lock:
            for name, src in sources.items():
                dst = getattr(self, name) if name == "written" else getattr(self, name)[:, :filled]
                for e in range(dst.shape[0]):  # one stream at a time: a bounded amount of page cache in flight
                    dst[e] = src[e]
            self._open[:] = False
            self._new_episode[:] = True
        return self.transitions()


def _write_array(path: str, a: np.ndarray) -> int:
    """`a` as an .npy file, fsynced; returns its size. The one place a test injects a write failure."""
    with open(path, "wb") as fh:
        np.save(fh, a)
        fh.flush()
        os.fsync(fh.fileno())
        return fh.tell()
