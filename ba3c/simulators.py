"""Asynchronous vector simulators behind one small interface (no TensorFlow, no MPI here).

`recv()` returns the next batch of ready environments (their ids say which); `send(actions)`
answers exactly that batch. Both implementations auto-reset in gymnasium's NEXT_STEP mode: the
observation returned with `terminated` or `truncated` is the episode's last one, and the action
sent for it is ignored because the next `recv` for that environment returns a fresh episode.
Rewards returned are the raw game rewards; the experience stage clips them for learning.

Atari games with lives also report `life_lost`: a life was lost in the step and the game goes on
(`terminated` stays the real game over). ALE's own `life_loss_info` flag is not used because it
sets `terminated` for both, and the statistics need games; its `episodic_life` resets the whole
game on every lost life. ALE presses FIRE only when a game starts; with `fire_after_life_loss`
the simulator answers an observation that lost a life with FIRE (games without FIRE: unchanged).
"""
from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass
from typing import Protocol

import numpy as np


class UnknownEnvError(ValueError):
    pass


class SimulatorError(RuntimeError):
    """An emulator failed; the message names the game and the environment ids."""


@dataclass(frozen=True)
class EnvSpec:
    """What a name resolved to: an ALE ROM id (kind 'atari') or a gymnasium id (kind 'gym')."""

    kind: str
    name: str

    @property
    def frames_per_step(self) -> int:
        return ATARI.frameskip if self.kind == "atari" else 1


@dataclass
class Batch:
    obs: np.ndarray          # (B, *obs_shape)
    reward: np.ndarray       # (B,) float32, raw game reward of the step that led to obs
    terminated: np.ndarray   # (B,) bool
    truncated: np.ndarray    # (B,) bool
    env_ids: np.ndarray      # (B,) int
    life_lost: np.ndarray | None = None  # (B,) bool: a life was lost in that step, the game goes on; None: no lives
    episode_frame: np.ndarray | None = None  # (B,) int: ALE's emulator frame number within the episode; None: not ALE


class Simulator(Protocol):
    num_envs: int
    predict_batch: int  # environments per recv(): the predictor's batch
    obs_shape: tuple[int, ...]
    obs_dtype: np.dtype
    num_actions: int
    spec: EnvSpec

    @property
    def presses_fire_after_life_loss(self) -> bool: ...  # what evaluation records as played
    def reset(self, seed: int) -> Batch: ...
    def recv(self) -> Batch: ...
    def send(self, actions: np.ndarray) -> None: ...
    def close(self) -> None: ...


def _snake(name: str) -> str:
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()


def resolve_env(name: str) -> EnvSpec:
    """Map a user's game name to a simulator kind and id; unknown names list the closest valid ones."""
    from ale_py import roms

    rom_ids = list(roms.get_all_rom_ids())
    base = name.strip()
    m = re.fullmatch(r"(?:ALE/)?([A-Za-z0-9_]+?)(?:NoFrameskip)?(?:-v\d+)?", base)
    if m:
        cand = m.group(1)
        for key in (cand, cand.lower(), _snake(cand)):
            if key in rom_ids:
                return EnvSpec("atari", key)
    import gymnasium as gym

    gym_ids = [k for k in gym.registry.keys() if not k.startswith("ALE/")]
    if base in gym_ids:
        return EnvSpec("gym", base)
    close = difflib.get_close_matches(_snake(base.split("/")[-1].split("-")[0]), rom_ids, n=3, cutoff=0.6)
    close += difflib.get_close_matches(base, gym_ids, n=3, cutoff=0.6)
    hint = (f" Closest valid names: {', '.join(close)}." if close
            else " Try pong, breakout, space_invaders or CartPole-v1.")
    raise UnknownEnvError(f"--env: unknown game or environment '{name}'.{hint}")


@dataclass(frozen=True)
class AtariSettings:
    """The ALE settings of every Atari simulator here, training and evaluation alike (AtariVectorEnv's
    keyword arguments): its defaults, the usual "ALE v5 without sticky actions" preprocessing. Passed
    explicitly so that evaluation records can state what was played. An evaluation may ask for sticky
    actions (`make_simulator(sticky_actions=...)`, `ba3c.evaluate --sticky-actions`); nothing else varies."""

    frameskip: int = 4                        # agent steps repeat the action for 4 emulator frames
    repeat_action_probability: float = 0.0    # no sticky actions
    full_action_space: bool = False           # the game's minimal action set
    noop_max: int = 30                        # episodes start after 0-30 random no-ops
    use_fire_reset: bool = True               # FIRE at each episode start (not after a lost life)
    episodic_life: bool = False               # an episode is a whole game
    maxpool: bool = True                      # max over the last two frames of each step
    grayscale: bool = True
    stack_num: int = 4
    img_height: int = 84
    img_width: int = 84


ATARI = AtariSettings()
ATARI_OBS_SHAPE = (ATARI.stack_num, ATARI.img_height, ATARI.img_width)  # stacked grey frames, uint8


@dataclass(frozen=True)
class ObsInfo:
    """What the model and the memory check need to know before any simulator is built."""

    shape: tuple[int, ...]
    itemsize: int             # bytes per observation element as the pipeline stores it
    discrete_actions: bool


def observation_info(spec: EnvSpec) -> ObsInfo:
    """Observation shape without starting emulators (a gymnasium env is made once and closed: cheap)."""
    if spec.kind == "atari":
        return ObsInfo(ATARI_OBS_SHAPE, 1, True)
    import gymnasium as gym

    env = gym.make(spec.name)
    try:
        return ObsInfo(tuple(env.observation_space.shape or ()), 4, isinstance(env.action_space, gym.spaces.Discrete))
    finally:
        env.close()


class AtariSimulator:
    """ALE's C++ vector env; async when predict_batch < num_envs (first ready envs are returned)."""

    def __init__(self, spec: EnvSpec, num_envs: int, predict_batch: int, num_threads: int,
                 max_episode_frames: int, fire_after_life_loss: bool = False, sticky_actions: float = 0.0) -> None:
        from ale_py import Action
        from ale_py.vector_env import AtariVectorEnv

        if not 0.0 <= sticky_actions < 1.0:
            raise ValueError(f"sticky_actions must be in [0, 1), got {sticky_actions}")
        self.spec = spec
        self.num_envs, self.predict_batch = num_envs, predict_batch
        # ATARI, but for the sticky actions (evaluation may ask for them: the BA3C authors played gym's *-v0)
        self.settings = dataclasses.replace(ATARI, repeat_action_probability=float(sticky_actions))
        self._env = AtariVectorEnv(spec.name, num_envs, batch_size=predict_batch, num_threads=num_threads,
                                   max_num_frames_per_episode=max_episode_frames, reward_clipping=False,
                                   autoreset_mode="NextStep", **dataclasses.asdict(self.settings))
        self.obs_shape = tuple(self._env.single_observation_space.shape)
        self.obs_dtype = np.dtype(np.uint8)
        self.num_actions = int(self._env.single_action_space.n)
        action_set = list(self._env.ale.get_action_set())
        # Index of FIRE in the minimal action set, when it is to be pressed after a lost life.
        self.fire_action: int | None = action_set.index(Action.FIRE) if (
            fire_after_life_loss and Action.FIRE in action_set) else None
        self._lives = np.zeros(num_envs, np.int64)  # per environment, as of its last observation
        self.has_lives = False  # the game counts lives (Breakout does, Pong and Boxing do not); known after reset
        self._fire_now: np.ndarray | None = None    # over the last batch: answer with FIRE
        self._last_ids: np.ndarray | None = None

    @property
    def presses_fire_after_life_loss(self) -> bool:
        """Asked to, and the game has both FIRE and lives (so it happens at all)."""
        return self.fire_action is not None and self.has_lives

    def _batch(self, out: tuple) -> Batch:
        obs, rew, term, trunc, info = out
        ids = np.asarray(info["env_id"])
        term = np.asarray(term, bool)
        lives = np.asarray(info["lives"], np.int64)
        # ALE's own test (fewer lives, some left), minus game overs; a fresh game only ever adds lives
        life_lost = (lives < self._lives[ids]) & (lives > 0) & ~term
        self._lives[ids] = lives
        self._last_ids = ids
        self._fire_now = life_lost if self.fire_action is not None else None
        return Batch(obs, np.asarray(rew, np.float32), term, np.asarray(trunc, bool), ids, life_lost,
                     np.asarray(info["episode_frame_number"], np.int64))

    def reset(self, seed: int) -> Batch:
        return self._fresh(self._guard(lambda: self._env.reset(seed=seed)))

    def _fresh(self, out: tuple) -> Batch:
        """The batch of a reset: no reward, nothing ended."""
        obs, info = out
        n = len(info["env_id"])
        # a game that counts lives shows them from its first frame; checked here, off the per-step path
        self.has_lives = self.has_lives or bool((np.asarray(info["lives"]) > 0).any())
        return self._batch((obs, np.zeros(n), np.zeros(n, bool), np.zeros(n, bool), info))

    def reset_some(self, mask: np.ndarray, seed: int) -> Batch:
        """Start new games in the environments `mask` selects; the others keep theirs and report their current
        observation. ALE allows this only with synchronous simulation (predict_batch == num_envs), after reset()."""
        if self.predict_batch != self.num_envs:
            raise ValueError(f"reset_some needs synchronous simulation (predict_batch {self.predict_batch} == num_envs "
                             f"{self.num_envs})")
        mask = np.asarray(mask, np.bool_)
        return self._fresh(self._guard(lambda: self._env.reset(seed=seed, options={"reset_mask": mask})))

    def recv(self) -> Batch:
        return self._batch(self._guard(self._env.recv))

    def send(self, actions: np.ndarray) -> None:
        self._guard(lambda: self._env.send(self._with_fire(actions)))

    def _with_fire(self, actions: np.ndarray) -> np.ndarray:
        """The actions to play: FIRE for the environments whose last observation lost a life, if asked."""
        a = actions.astype(np.int32, copy=False)
        if self._fire_now is not None and self._fire_now.any():
            # a new array: the caller's stays as it was
            a = np.where(self._fire_now, np.int32(self.fire_action), a).astype(np.int32)
        return a

    def _guard(self, fn):  # type: ignore[no-untyped-def]
        try:
            return fn()
        except Exception as e:  # the C++ side raises plain RuntimeErrors without context
            ids = [] if self._last_ids is None else self._last_ids.tolist()
            raise SimulatorError(f"ALE emulator for game '{self.spec.name}' failed (last env ids {ids}): {e}") from e

    def close(self) -> None:
        self._env.close()


class GymSimulator:
    """Any gymnasium id, stepped synchronously in-process (the whole vector is one batch)."""

    def __init__(self, spec: EnvSpec, num_envs: int) -> None:
        import gymnasium as gym

        self.spec = spec
        self.num_envs = self.predict_batch = num_envs
        self._envs = [gym.make(spec.name) for _ in range(num_envs)]
        space = self._envs[0].observation_space
        self.obs_shape = tuple(space.shape)
        self.obs_dtype = np.dtype(np.float32)
        self.num_actions = int(self._envs[0].action_space.n)
        self._done = np.zeros(num_envs, bool)
        self._obs = np.zeros((num_envs, *self.obs_shape), np.float32)
        self._ids = np.arange(num_envs)

    @property
    def presses_fire_after_life_loss(self) -> bool:
        return False  # no lives, no FIRE

    def reset(self, seed: int) -> Batch:
        for i, e in enumerate(self._envs):
            self._obs[i] = e.reset(seed=seed + i)[0]
        n = self.num_envs
        return Batch(self._obs.copy(), np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool), self._ids)

    def send(self, actions: np.ndarray) -> None:
        n = self.num_envs
        self._rew, self._term, self._trunc = np.zeros(n, np.float32), np.zeros(n, bool), np.zeros(n, bool)
        for i, e in enumerate(self._envs):
            try:
                if self._done[i]:
                    self._obs[i] = e.reset()[0]
                    self._done[i] = False
                    continue
                o, r, te, tr, _ = e.step(int(actions[i]))
            except Exception as ex:
                raise SimulatorError(f"gymnasium env '{self.spec.name}' id {i} failed: {ex}") from ex
            self._obs[i], self._rew[i], self._term[i], self._trunc[i] = o, r, te, tr
            self._done[i] = te or tr

    def recv(self) -> Batch:
        return Batch(self._obs.copy(), self._rew, self._term, self._trunc, self._ids)

    def close(self) -> None:
        for e in self._envs:
            e.close()


def action_names(spec: EnvSpec) -> list[str] | None:
    """The names of the simulator's actions in index order (Atari: ALE's minimal action set, e.g.
    NOOP, FIRE, RIGHT, LEFT for Breakout); None where the environment does not name them."""
    if spec.kind != "atari":
        return None
    from ale_py import ALEInterface, LoggerMode, roms

    ALEInterface.setLoggerMode(LoggerMode.Error)  # no banner on stdout
    ale = ALEInterface()
    ale.loadROM(roms.get_rom_path(spec.name))
    actions = ale.getLegalActionSet() if ATARI.full_action_space else ale.getMinimalActionSet()
    return [a.name for a in actions]


def make_simulator(spec: EnvSpec, num_envs: int, predict_batch: int, num_threads: int,
                   max_episode_frames: int, fire_after_life_loss: bool = False,
                   sticky_actions: float = 0.0) -> Simulator:
    """Atari: asynchronous, `predict_batch` ready environments per recv(); `sticky_actions`: ALE's
    repeat_action_probability (each emulator frame keeps the previous action with this probability).
    Gymnasium: synchronous, the whole vector is one batch (`predict_batch`, `num_threads`, the frame cap,
    FIRE and sticky actions do not apply)."""
    if spec.kind == "atari":
        return AtariSimulator(spec, num_envs, predict_batch, num_threads, max_episode_frames, fire_after_life_loss,
                              sticky_actions)
    return GymSimulator(spec, num_envs)


def decorrelate_games(sim: Simulator, span: int, rng: np.random.Generator, seed: int) -> Batch:
    """Put games of a fixed length out of step: `span` steps of uniformly random actions, environment i
    restarted at step span-1-k_i (k_i uniform in 0..span-1), so that it has played k_i steps of a new game
    at the end. Every environment plays all `span` steps. Needs `reset_some` (Atari, synchronous
    simulation). Returns the last batch."""
    reset_some = getattr(sim, "reset_some", None)
    if reset_some is None or sim.predict_batch != sim.num_envs:
        raise ValueError("decorrelating games needs an Atari simulator with synchronous simulation "
                         f"(predict_batch {sim.predict_batch} == num_envs {sim.num_envs})")
    k = rng.integers(0, span, sim.num_envs)
    b = None
    for t in range(span):
        sim.send(rng.integers(0, sim.num_actions, sim.num_envs))
        b = sim.recv()
        mask = k == span - 1 - t
        if mask.any():
            b = reset_some(mask, seed + 1 + t)
    assert b is not None, "span must be >= 1"
    return b
