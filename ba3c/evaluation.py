"""The evaluation library: protocols, episode quotas and `evaluate_model`, which plays full games
with a model and reports their scores. Used by the trainer's periodic evaluation (on its live
weights) and by `python -m ba3c.evaluate` (on a checkpoint).

Scores are the raw (unclipped) game scores of complete games (no life-loss episodes), with the
simulators' Atari settings (`ba3c.simulators.AtariSettings`: up to 30 no-op starts, frameskip 4,
no sticky actions, the minimal action set) and an episode cap. Any protocol can be played with
sticky actions (`sticky_actions`, ALE's repeat_action_probability: at every emulator frame the
previous action is repeated with that probability); 0.25 is the authors' *-v0 environments' value.
The record (`protocol_record`) states it, in `sticky_actions` and `environment`.

A protocol (`PROTOCOLS`) says how actions are chosen and how long an episode may last:
* paper: the BA3C authors' evaluation (deepsense-ai/Distributed-BA3C, src/OpenAIGym/train.py and
  common.py, on tensorpack's RL/common.py): argmax with a uniformly random action with probability
  0.001, their anti-stuck rule (`AntiStuck`: PreventStuckPlayer(player, 30, 1)) and episodes capped
  at 40,000 agent steps. Without the rule a greedy Breakout agent can wait for ever after a lost
  life, since the game needs FIRE to serve again. Their environments were gym's *-v0 (sticky
  actions 0.25, frameskip drawn from 2-4); ours are the settings above, and the record says so.
* greedy, sampled, egreedy: argmax, a draw from the policy, epsilon-greedy (DQN / Gorila), with
  no anti-stuck rule and a cap of 108,000 frames (30 minutes of play) unless told otherwise.
A policy trained with `--life-loss terminal` never had to press FIRE after a lost life (the
simulator did), so it is evaluated the same way (`fire_after_life_loss`, recorded in the protocol).

Which episodes are counted: environment i of E is given a fixed quota of episodes up front
(quotas differ by at most one and sum to `episodes`) and its first `quota` episodes are the ones
counted. Taking "the first N episodes to finish" over all environments would favour short
episodes (a policy that dies fast would finish more of them first); with fixed quotas whether an
episode counts never depends on its length, so the mean is unbiased. The price is that
environments that are done with their quota idle until the slowest one finishes.
"""
from __future__ import annotations

import dataclasses
import io
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ba3c.checkpoint import Checkpoint, assign_arrays
from ba3c.config import MAX_EPISODE_FRAMES, Config, saved_config, sticky_actions_problem
from ba3c.files import atomic_write
from ba3c.predictor import epsilon_greedy_actions, greedy_actions
from ba3c.simulators import EnvSpec, Simulator
from ba3c.workers import EvalCancelled, cores_available

SCHEMA = "ba3c-eval/1"  # benchmarks/compare.py picks up every JSON file that carries this tag
STANDARD_MAX_EPISODE_FRAMES = 108_000  # 30 minutes of play at 60 Hz: the usual Atari evaluation cap
RECORD_MAX_FRAMES = 5_000  # ~5.5 min of GIF at 15 agent steps/s; bounds memory and file size
# The authors' evaluation (sources in the module docstring).
PAPER_STUCK_REPEATS = 30             # PreventStuckPlayer(player, 30, 1), evaluation players only
PAPER_STUCK_ACTION = 1               # FIRE in 89 of the 91 ALE games with FIRE (minimal sets list NOOP, then FIRE)
PAPER_MAX_EPISODE_STEPS = 40_000     # LimitLengthPlayer(player, 40000), agent steps
PAPER_RANDOM_ACTION_PROB = 0.001     # common.play_one_episode: `if random.random() < 0.001: act = spc.sample()`
PAPER_ENVIRONMENT = ("the authors played gym's <Game>-v0 (their requirements pin gym 0.7.1, atari-py 0.0.18): sticky "
                     "actions with probability 0.25, frameskip drawn from 2-4 each step, RGB frames resized to 84x84, "
                     "no no-op starts; sticky actions make theirs the harder protocol. Ours is the environment "
                     "recorded here")


@dataclass(frozen=True)
class Protocol:
    """How an evaluation chooses actions and caps episodes."""

    name: str
    choice: str                 # greedy (argmax), sampled (from the policy), egreedy (argmax or a uniform random one)
    description: str
    random_action_prob: float | None = None  # egreedy: probability of a uniformly random action (None: --epsilon)
    stuck_repeats: int = 0      # > 0: the anti-stuck rule (AntiStuck) with this many repeats
    stuck_action: int = PAPER_STUCK_ACTION  # the action it plays
    max_episode_steps: int | None = None  # Atari cap in agent steps (None: STANDARD_MAX_EPISODE_FRAMES)


PROTOCOLS: dict[str, Protocol] = {
    "paper": Protocol("paper", "egreedy", "the BA3C authors' evaluation: argmax, a uniformly random action with "
                      f"probability {PAPER_RANDOM_ACTION_PROB}, their anti-stuck rule, episodes capped at "
                      f"{PAPER_MAX_EPISODE_STEPS:,} agent steps", random_action_prob=PAPER_RANDOM_ACTION_PROB,
                      stuck_repeats=PAPER_STUCK_REPEATS, max_episode_steps=PAPER_MAX_EPISODE_STEPS),
    "greedy": Protocol("greedy", "greedy", "greedy: argmax of the policy, no anti-stuck rule (a Breakout agent may "
                       "never serve after a lost life)"),
    "sampled": Protocol("sampled", "sampled", "sampled: actions drawn from the policy, as during training"),
    "egreedy": Protocol("egreedy", "egreedy", "epsilon-greedy: argmax, a uniformly random action with probability "
                        "epsilon (DQN / Gorila protocol)"),
}
POLICIES = tuple(PROTOCOLS)  # the names --policy and --eval-policy accept


class EvalError(ValueError):
    """A user-facing problem (bad path, no checkpoint, bad option); printed as one line, exit status 2."""


# ---------------------------------------------------------------- pure maths

def summarize(values: Sequence[float]) -> dict[str, float]:
    """n, mean, std (population, ddof=0), median, min, max of a non-empty sample."""
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        raise ValueError("summarize: no values")
    return {"n": int(a.size), "mean": float(a.mean()), "std": float(a.std()), "median": float(np.median(a)),
            "min": float(a.min()), "max": float(a.max())}


def choose_actions(policy: str, logits: np.ndarray, rng: np.random.Generator, epsilon: float) -> np.ndarray:
    """Actions for a batch of logits by one of Protocol.choice's rules."""
    if policy == "greedy":
        return greedy_actions(logits)
    if policy == "egreedy":
        return epsilon_greedy_actions(logits, epsilon, rng)
    if policy == "sampled":
        from ba3c.predictor import sample_actions

        return sample_actions(logits, rng)
    raise ValueError(f"unknown policy '{policy}'; use one of greedy, sampled, egreedy")


class AntiStuck:
    """The BA3C authors' anti-stuck rule (tensorpack's PreventStuckPlayer(player, repeats, action)), for
    a vector of environments: when the policy has chosen the same action `repeats` times in a row within
    an episode, `action` is played instead of the last of them, and instead of every further repeat for
    as long as the policy keeps choosing it (the rule counts the policy's choices, not what was played).
    An episode's end forgets the count.

    Breakout needs FIRE to serve after a lost life; a greedy agent that waits would wait until the cap.
    The authors insert action 1. In ale-py 0.12.1's minimal action sets that is FIRE in 89 of the 91
    games with FIRE (NOOP comes first, then FIRE; Backgammon and Video Checkers have no NOOP) and UP or
    RIGHT in the 13 games without FIRE (Freeway, Ms. Pac-Man: UP; Skiing: RIGHT). We insert action 1
    everywhere, as their code did; the evaluation record names it.
    """

    def __init__(self, num_envs: int, repeats: int, action: int) -> None:
        if repeats < 1:
            raise ValueError(f"AntiStuck: repeats must be >= 1, got {repeats}")
        self.repeats, self.action = repeats, action
        self.last = np.full(num_envs, -1, np.int64)  # the policy's previous choice in this episode (-1: none)
        self.run = np.zeros(num_envs, np.int64)      # how many times in a row it has been chosen

    def __call__(self, chosen: np.ndarray, counted: np.ndarray) -> np.ndarray:
        """The actions to play for the policy's `chosen` ones. Where `counted` is False the action is not
        part of an episode (the environment is resetting and ignores it): it is neither counted nor replaced."""
        run = np.where(chosen == self.last, self.run + 1, 1)
        self.run = np.where(counted, run, self.run)
        self.last = np.where(counted, chosen, self.last)
        return np.where(counted & (self.run >= self.repeats), self.action, chosen).astype(np.int32)

    def end_episodes(self, ended: np.ndarray) -> None:
        self.run[ended] = 0
        self.last[ended] = -1


def episode_quotas(episodes: int, num_envs: int) -> np.ndarray:
    """Episodes each environment must contribute: as equal as possible, summing to `episodes`."""
    n = min(num_envs, episodes)  # more environments than episodes would only add idle emulators
    return np.array([episodes // n + (i < episodes % n) for i in range(n)], dtype=np.int64)


# ---------------------------------------------------------------- playing

def _save_gif(frames: list[np.ndarray], path: str, fps: float) -> None:
    from PIL import Image

    h, w = frames[0].shape
    scale = max(1, 168 // max(h, w))  # 84x84 -> 168x168: big enough to watch, nearest keeps the pixels sharp
    images = [Image.fromarray(f).resize((w * scale, h * scale), Image.NEAREST) for f in frames]
    gif = io.BytesIO()
    images[0].save(gif, format="GIF", save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)
    atomic_write(path, gif.getvalue())  # never a torn file on a full disk (NoSpaceError)


@dataclass(order=True)
class Game:
    env: int
    index: int          # the episode's number in its environment
    score: float
    steps: int
    truncated: bool     # cut at the episode cap
    replaced: int       # actions the anti-stuck rule replaced


@dataclass
class Games:
    """What `play` saw: the counted episodes, sorted by environment and index, and environment 0's
    frames while it is being recorded."""

    results: list[Game] = field(default_factory=list)
    frames: list[np.ndarray] = field(default_factory=list)


def play(sim: Simulator, predict, quotas: np.ndarray, choice: str, epsilon: float, seed: int, record: bool,
         anti_stuck: AntiStuck | None = None, cancel: threading.Event | None = None,
         progress: Callable[[int, int], None] | None = None, progress_every_s: float = 60.0) -> Games:
    """Step a synchronous simulator until environment i has finished quotas[i] episodes, choosing
    actions by `choice` (greedy, sampled, egreedy with `epsilon`), then `anti_stuck` if given.
    Raises EvalCancelled at the first step after `cancel` is set. `progress(episodes counted, agent steps
    played in all environments)` is called every `progress_every_s` seconds (50 paper-protocol games of the
    40 M-frame Breakout agent, most cut at the 40,000-step cap, took 16 minutes on 2 cores)."""
    n = len(quotas)
    steps, next_report = 0, time.monotonic() + progress_every_s
    rng = np.random.default_rng([seed, 1])  # action noise; the emulators get `seed` itself
    games = Games()
    done_count = np.zeros(n, np.int64)
    ret, length, replaced = np.zeros(n, np.float64), np.zeros(n, np.int64), np.zeros(n, np.int64)
    resetting = np.zeros(n, bool)  # this env's next observation is an auto-reset, not a step of an episode
    b = sim.reset(seed)
    if record:
        games.frames.append(np.array(b.obs[0, -1]))
    while (done_count < quotas).any():
        if cancel is not None and cancel.is_set():
            raise EvalCancelled(f"{len(games.results)} of {int(quotas.sum())} episodes played")
        logits, _ = predict(b.obs)
        actions = choose_actions(choice, logits, rng, epsilon)
        if anti_stuck is not None:
            played = anti_stuck(actions, ~resetting)
            replaced += played != actions
            actions = played
        sim.send(actions)
        b = sim.recv()
        live = ~resetting
        steps += int(live.sum())
        if progress is not None and time.monotonic() >= next_report:
            progress(len(games.results), steps)
            next_report = time.monotonic() + progress_every_s
        ret[live] += b.reward[live]
        length[live] += 1
        ended = (b.terminated | b.truncated) & live
        if record and live[0]:
            if len(games.frames) < RECORD_MAX_FRAMES:
                games.frames.append(np.array(b.obs[0, -1]))
            record = not ended[0]
        for i in np.flatnonzero(ended):
            if done_count[i] < quotas[i]:
                games.results.append(Game(int(i), int(done_count[i]), float(ret[i]), int(length[i]),
                                          bool(b.truncated[i]), int(replaced[i])))
            done_count[i] += 1
            ret[i], length[i], replaced[i] = 0.0, 0, 0
        if anti_stuck is not None:
            anti_stuck.end_episodes(ended)
        resetting = ended
    games.results.sort()
    return games


def check_options(episodes: int, num_envs: int, epsilon: float, max_episode_frames: int | None, policy: str,
                  sticky_actions: float = 0.0, spec: EnvSpec | None = None) -> None:
    """The options of an evaluation on their own (ba3c.evaluate asks before anything starts); raises EvalError."""
    if episodes < 1:
        raise EvalError(f"--episodes must be >= 1, got {episodes}")
    if num_envs < 1:
        raise EvalError(f"--num-envs must be >= 1, got {num_envs}")
    if not 0.0 <= epsilon <= 1.0:
        raise EvalError(f"--epsilon must be in [0, 1], got {epsilon}")
    if max_episode_frames is not None and not 1 <= max_episode_frames <= MAX_EPISODE_FRAMES:
        raise EvalError(f"--max-episode-frames must be in [1, {MAX_EPISODE_FRAMES}] (ALE counts frames in 32 bits), "
                        f"got {max_episode_frames}")
    if policy not in PROTOCOLS:
        raise EvalError(f"--policy '{policy}' is not one of {', '.join(POLICIES)}")
    check_sticky_actions(sticky_actions, spec)


def check_sticky_actions(p: float, spec: EnvSpec | None = None, flag: str = "--sticky-actions") -> None:
    """A repeat-action probability ALE can play (config.sticky_actions_problem); Atari only where `spec` is known."""
    kind, name = (spec.kind, f"{spec.kind}:{spec.name}") if spec else ("atari", "")
    problem = sticky_actions_problem(flag, p, kind, name)
    if problem is not None:
        raise EvalError(problem)


def episode_cap_frames(protocol: Protocol, spec: EnvSpec, max_episode_frames: int | None) -> int:
    """The Atari episode cap in emulator frames: `max_episode_frames` if given, else the protocol's."""
    if max_episode_frames is not None:
        return max_episode_frames
    if protocol.max_episode_steps is not None:
        return protocol.max_episode_steps * spec.frames_per_step
    return STANDARD_MAX_EPISODE_FRAMES


def _open_simulator(model, spec: EnvSpec, n: int, num_threads: int, max_episode_frames: int,
                   fire_after_life_loss: bool, sticky_actions: float = 0.0) -> Simulator:
    """n synchronous simulators (every step answers all of them) that fit the model's input and output."""
    from ba3c.simulators import make_simulator

    sim = make_simulator(spec, n, n, min(num_threads or cores_available(), n), max_episode_frames, fire_after_life_loss,
                         sticky_actions)
    want = (tuple(model.inputs[0].shape[1:]), int(model.outputs[0].shape[-1]))
    if want != (sim.obs_shape, sim.num_actions):
        sim.close()
        raise EvalError(f"the model takes observations {want[0]} and has {want[1]} actions, but "
                        f"{spec.kind}:{spec.name} gives {sim.obs_shape} and {sim.num_actions}")
    return sim


def _anti_stuck(proto: Protocol, sim: Simulator, spec: EnvSpec, names: list[str] | None,
                n: int) -> AntiStuck | None:
    """The protocol's anti-stuck rule for `n` environments (None: the protocol has none); closes `sim` and raises
    EvalError where the game lacks the action the rule plays."""
    if not proto.stuck_repeats:
        return None
    if sim.num_actions <= proto.stuck_action:
        sim.close()
        raise EvalError(f"the {proto.name} protocol's anti-stuck rule plays action {proto.stuck_action}, but "
                        f"{spec.kind}:{spec.name} has {sim.num_actions} action(s); use --policy greedy")
    if names is not None and names[proto.stuck_action] != "FIRE":
        print(f"ba3c.evaluate: note: action {proto.stuck_action} of {spec.name} is {names[proto.stuck_action]}, "
              f"not FIRE; the {proto.name} protocol's anti-stuck rule plays it all the same, as the authors' code "
              "did", file=sys.stderr, flush=True)
    return AntiStuck(n, proto.stuck_repeats, proto.stuck_action)


def evaluate_model(model, spec: EnvSpec, episodes: int, policy: str = "paper", *, epsilon: float = 0.05,
                   num_envs: int = 16, max_episode_frames: int | None = None, seed: int = 0,
                   record_path: str | None = None, num_threads: int = 0,
                   fire_after_life_loss: bool = False, sticky_actions: float = 0.0,
                   cancel: threading.Event | None = None, progress: Callable[[int, int], None] | None = None,
                   progress_every_s: float = 60.0) -> dict[str, Any]:
    """Play `episodes` complete episodes with `model` (a keras model: obs -> (logits, value)) under the
    protocol named `policy` (PROTOCOLS); return scores and the protocol's record.

    Uses a synchronous vector of min(num_envs, episodes) simulators with unclipped rewards.
    `epsilon`: for the egreedy protocol. `max_episode_frames` caps Atari episodes (counted as
    truncated); None: the protocol's cap (paper: 40,000 agent steps; else 108,000 frames).
    Gymnasium environments keep their own time limit. `record_path`: write environment 0's first
    episode as a GIF (image observations only). `num_threads` 0: the cores available.
    `sticky_actions`: ALE's repeat_action_probability for this evaluation (Atari; 0 <= p < 1).
    `cancel`: when set, the evaluation stops at its next step with EvalCancelled.
    `progress`: called every `progress_every_s` seconds with (episodes counted, agent steps played).
    """
    from ba3c.predictor import Predictor
    from ba3c.simulators import action_names

    check_options(episodes, num_envs, epsilon, max_episode_frames, policy, sticky_actions, spec)
    proto = PROTOCOLS[policy]
    cap = episode_cap_frames(proto, spec, max_episode_frames)
    quotas = episode_quotas(episodes, num_envs)
    names = action_names(spec)
    sim = _open_simulator(model, spec, len(quotas), num_threads, cap, fire_after_life_loss, sticky_actions)
    anti_stuck = _anti_stuck(proto, sim, spec, names, len(quotas))
    if record_path and len(sim.obs_shape) != 3:  # not worth failing the evaluation over
        print(f"ba3c.evaluate: not recording: --record needs image observations, {spec.kind}:{spec.name} has "
              f"vector observations of shape {sim.obs_shape}", file=sys.stderr, flush=True)
        record_path = None
    eps = proto.random_action_prob if proto.random_action_prob is not None else epsilon
    t0 = time.perf_counter()
    try:
        games = play(sim, Predictor(model, sim.obs_shape, sim.obs_dtype), quotas, proto.choice, eps, seed,
                     record=bool(record_path), anti_stuck=anti_stuck, cancel=cancel, progress=progress,
                     progress_every_s=progress_every_s)
    finally:
        sim.close()
    scores, lengths = [g.score for g in games.results], [g.steps for g in games.results]
    out: dict[str, Any] = {
        "schema": SCHEMA, "game": spec.name, "env_kind": spec.kind, "policy": policy,
        "epsilon": epsilon if policy == "egreedy" else None, "episodes": len(games.results),
        "score": summarize(scores), "length_steps": summarize(lengths),
        "length_frames": summarize([x * spec.frames_per_step for x in lengths]),
        "truncated_episodes": sum(g.truncated for g in games.results), "scores": scores, "lengths_steps": lengths,
        "anti_stuck_replaced": [g.replaced for g in games.results] if anti_stuck is not None else None,
        # as played: a game without lives (Pong, Boxing) never has FIRE pressed for it, whatever was asked
        "protocol": protocol_record(spec, proto, epsilon, episodes, len(quotas), cap, names,
                                    sim.presses_fire_after_life_loss, sticky_actions),
        "seed": seed, "eval_wall_s": round(time.perf_counter() - t0, 3), "recording": None,
    }
    if record_path and games.frames:
        _save_gif(games.frames, record_path, fps=60 / spec.frames_per_step)
        out["recording"] = {"path": record_path, "frames": len(games.frames),
                            "truncated_at": RECORD_MAX_FRAMES if len(games.frames) >= RECORD_MAX_FRAMES else None}
    return out


def protocol_record(spec: EnvSpec, proto: Protocol, epsilon: float, episodes: int, num_envs: int,
                    max_episode_frames: int, names: list[str] | None,
                    fire_after_life_loss: bool = False, sticky_actions: float = 0.0) -> dict[str, Any]:
    """What a reader needs to compare our number with a published one: the protocol and the environment played."""
    from importlib import metadata

    from ba3c.simulators import ATARI

    egreedy = proto.name == "egreedy"
    p: dict[str, Any] = {
        "name": proto.name, "choice": proto.choice,
        "policy": proto.description + (f" (epsilon={epsilon})" if egreedy else ""),
        "random_action_prob": epsilon if egreedy else proto.random_action_prob,
        "anti_stuck": None,
        # ALE's repeat_action_probability played (Atari; None: not an ALE game): 0 ours, 0.25 the authors' *-v0
        "sticky_actions": float(sticky_actions) if spec.kind == "atari" else None,
        "episodes": episodes, "parallel_envs": num_envs, "reward": "raw game score, unclipped",
        "episode_selection": "fixed per-environment quotas (unbiased by episode length)"}
    if proto.stuck_repeats:
        a = proto.stuck_action
        p["anti_stuck"] = {
            "repeats": proto.stuck_repeats, "action": a, "action_name": names[a] if names else None,
            "rule": f"when the policy has chosen the same action {proto.stuck_repeats} times in a row in an episode, "
                    f"action {a} is played instead, and at every further repeat of it (the authors' "
                    f"PreventStuckPlayer(player, {proto.stuck_repeats}, {a}))"}
    if spec.kind == "atari":
        settings = dataclasses.replace(ATARI, repeat_action_probability=float(sticky_actions))
        p.update(max_episode_frames=max_episode_frames, max_episode_steps=max_episode_frames // spec.frames_per_step,
                 episode="full game (no life-loss termination)",
                 fire_after_life_loss=("FIRE pressed for the policy after each lost life (games with FIRE)"
                                       if fire_after_life_loss else "no (the policy presses FIRE itself)"),
                 environment={"simulator": "ale_py.vector_env.AtariVectorEnv", "ale_py": metadata.version("ale-py"),
                              "game": spec.name, **dataclasses.asdict(settings), "reward_clipping": False,
                              "actions": names})
    else:
        p.update(max_episode_frames=None, max_episode_steps=None, episode="gymnasium's own termination and time limit",
                 environment={"simulator": "gymnasium", "id": spec.name})
    if proto.name == "paper":
        p["authors_environment"] = PAPER_ENVIRONMENT
    return p


def protocol_line(p: dict[str, Any]) -> str:
    """One line naming a protocol record's essentials (for the table and the trainer's log)."""
    choice = {"greedy": "argmax", "egreedy": "argmax", "sampled": "actions sampled from the policy"}
    parts = [f"protocol {p['name']}: {choice[p['choice']]}"]
    if p.get("random_action_prob") is not None:
        parts.append(f"random action p={p['random_action_prob']:g}")
    if p.get("anti_stuck"):
        s = p["anti_stuck"]
        parts.append(f"anti-stuck: action {s['action']} ({s['action_name'] or '?'}) after {s['repeats']} repeats")
    if p.get("max_episode_steps") is not None:
        parts.append(f"cap {p['max_episode_steps']:,} agent steps ({p['max_episode_frames']:,} frames)")
    env = p.get("environment") or {}
    if env.get("simulator", "").startswith("ale_py"):
        parts.append(f"ALE frameskip {env['frameskip']}, sticky {env['repeat_action_probability']:g}, "
                     f"{'full' if env['full_action_space'] else 'minimal'} action set, "
                     f"0-{env['noop_max']} no-op starts")
    else:
        parts.append(p.get("episode", ""))
    return "; ".join(x for x in parts if x)


# ---------------------------------------------------------------- a model from a checkpoint

def checkpoint_config(c: Checkpoint) -> tuple[EnvSpec, Config]:
    """The game and the config a checkpoint was trained with (no TensorFlow: callers check this first).
    A config this version cannot read (options it does not know, values it rejects) is an EvalError."""
    from ba3c.config import ConfigError, resolve_life_loss
    from ba3c.rundir import made_by
    from ba3c.simulators import UnknownEnvError, resolve_env

    meta = c.meta
    missing = [k for k in ("config", "model", "num_actions", "obs_shape") if k not in meta]
    if missing:
        raise EvalError(f"checkpoint '{c.path}' lacks {', '.join(missing)} in its meta; it predates evaluation support")
    ckpt_dir = os.path.dirname(os.path.abspath(c.path))
    run_dir = os.path.dirname(ckpt_dir) if os.path.basename(ckpt_dir) == "checkpoints" else ckpt_dir
    try:
        cfg = saved_config(meta["config"], f"the config saved in checkpoint '{c.path}'",
                           f"evaluate it with the ba3c that trained it ({made_by(run_dir)})")
        spec = resolve_env(cfg.sim.env)
        return spec, resolve_life_loss(cfg, spec.kind == "atari")  # runs save it resolved; this is a fallback
    except (ConfigError, UnknownEnvError) as e:
        raise EvalError(str(e)) from None


def model_from_checkpoint(c: Checkpoint) -> tuple[Any, EnvSpec, Config]:  # -> (keras model, spec, its run's config)
    """Rebuild the network the checkpoint was trained with and load its weights (not the optimizer state)."""
    from ba3c.algos import algorithm
    from ba3c.model import build_model

    spec, cfg = checkpoint_config(c)
    meta = c.meta
    model = build_model(meta["model"], tuple(meta["obs_shape"]), int(meta["num_actions"]), seed=cfg.sim.seed,
                        head=algorithm(cfg.learn.algo).head)  # a Q-network's checkpoint: argmax of Q
    weights = model.weights
    try:  # model weights come first; the rest is optimizer state
        assign_arrays(weights, c.arrays[:len(weights)], f"checkpoint '{c.path}' ({meta['model']} model)")
    except ValueError as e:
        raise EvalError(str(e)) from None
    return model, spec, cfg
