"""The evaluation library: policies, episode quotas and `evaluate_model`, which plays full games
with a model and reports their scores. Used by the trainer's periodic evaluation (on its live
weights) and by `python -m ba3c.evaluate` (on a checkpoint).

Scores are the raw (unclipped) game scores of complete games (no life-loss episodes), with the
simulators' standard Atari settings: up to 30 no-op starts, frameskip 4, no sticky actions, the
minimal action set, and an episode cap (`max_episode_frames`, default 108,000 = 30 minutes).
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

import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ba3c.checkpoint import Checkpoint, assign_arrays
from ba3c.config import Config, saved_config
from ba3c.simulators import EnvSpec, Simulator
from ba3c.workers import cores_available

POLICIES = ("greedy", "sampled", "egreedy")
SCHEMA = "ba3c-eval/1"  # benchmarks/compare.py picks up every JSON file that carries this tag
STANDARD_MAX_EPISODE_FRAMES = 108_000  # 30 minutes of play at 60 Hz: the usual Atari evaluation cap
RECORD_MAX_FRAMES = 5_000  # ~5.5 min of GIF at 15 agent steps/s; bounds memory and file size
POLICY_PROTOCOL = {
    "greedy": "greedy: argmax of the policy (the BA3C paper's protocol)",
    "sampled": "sampled: actions drawn from the policy, as during training",
    "egreedy": "epsilon-greedy: argmax, uniformly random action with probability epsilon (DQN / Gorila protocol)",
}


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


def greedy_actions(logits: np.ndarray) -> np.ndarray:
    """Argmax per row (the first of tied maxima)."""
    return np.argmax(logits, axis=1).astype(np.int32)


def epsilon_greedy_actions(logits: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Per row: with probability epsilon a uniformly random action (any of them, the greedy one included), else argmax."""
    n, num_actions = logits.shape
    explore = rng.random(n) < epsilon
    return np.where(explore, rng.integers(0, num_actions, n), greedy_actions(logits)).astype(np.int32)


def choose_actions(policy: str, logits: np.ndarray, rng: np.random.Generator, epsilon: float) -> np.ndarray:
    if policy == "greedy":
        return greedy_actions(logits)
    if policy == "egreedy":
        return epsilon_greedy_actions(logits, epsilon, rng)
    if policy == "sampled":
        from ba3c.predictor import sample_actions

        return sample_actions(logits, rng)
    raise ValueError(f"unknown policy '{policy}'; use one of {', '.join(POLICIES)}")


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
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    images[0].save(path, save_all=True, append_images=images[1:], duration=round(1000 / fps), loop=0)


@dataclass
class Games:
    """What `play` saw: one (env, index in env, score, steps, truncated) per counted episode, sorted,
    and environment 0's frames while it is being recorded."""

    results: list[tuple[int, int, float, int, bool]] = field(default_factory=list)
    frames: list[np.ndarray] = field(default_factory=list)


def play(sim: Simulator, predict, quotas: np.ndarray, policy: str, epsilon: float, seed: int, record: bool) -> Games:
    """Step a synchronous simulator until environment i has finished quotas[i] episodes."""
    n = len(quotas)
    rng = np.random.default_rng([seed, 1])  # action noise; the emulators get `seed` itself
    games = Games()
    done_count = np.zeros(n, np.int64)
    ret, length = np.zeros(n, np.float64), np.zeros(n, np.int64)
    resetting = np.zeros(n, bool)  # this env's next observation is an auto-reset, not a step of an episode
    b = sim.reset(seed)
    if record:
        games.frames.append(np.array(b.obs[0, -1]))
    while (done_count < quotas).any():
        logits, _ = predict(b.obs)
        sim.send(choose_actions(policy, logits, rng, epsilon))
        b = sim.recv()
        live = ~resetting
        ret[live] += b.reward[live]
        length[live] += 1
        ended = (b.terminated | b.truncated) & live
        if record and live[0]:
            if len(games.frames) < RECORD_MAX_FRAMES:
                games.frames.append(np.array(b.obs[0, -1]))
            record = not ended[0]
        for i in np.flatnonzero(ended):
            if done_count[i] < quotas[i]:
                games.results.append((int(i), int(done_count[i]), float(ret[i]), int(length[i]), bool(b.truncated[i])))
            done_count[i] += 1
            ret[i], length[i] = 0.0, 0
        resetting = ended
    games.results.sort()
    return games


def _check_options(episodes: int, num_envs: int, epsilon: float, max_episode_frames: int, policy: str) -> None:
    if episodes < 1:
        raise EvalError(f"--episodes must be >= 1, got {episodes}")
    if num_envs < 1:
        raise EvalError(f"--num-envs must be >= 1, got {num_envs}")
    if not 0.0 <= epsilon <= 1.0:
        raise EvalError(f"--epsilon must be in [0, 1], got {epsilon}")
    if max_episode_frames < 1:
        raise EvalError(f"--max-episode-frames must be >= 1, got {max_episode_frames}")
    if policy not in POLICIES:
        raise EvalError(f"--policy '{policy}' is not one of {', '.join(POLICIES)}")


def _open_simulator(model, spec: EnvSpec, n: int, num_threads: int, max_episode_frames: int,
                   fire_after_life_loss: bool) -> Simulator:
    """n synchronous simulators (every step answers all of them) that fit the model's input and output."""
    from ba3c.simulators import make_simulator

    sim = make_simulator(spec, n, n, min(num_threads or cores_available(), n), max_episode_frames, fire_after_life_loss)
    want = (tuple(model.inputs[0].shape[1:]), int(model.outputs[0].shape[-1]))
    if want != (sim.obs_shape, sim.num_actions):
        sim.close()
        raise EvalError(f"the model takes observations {want[0]} and has {want[1]} actions, but "
                        f"{spec.kind}:{spec.name} gives {sim.obs_shape} and {sim.num_actions}")
    return sim


def evaluate_model(model, spec: EnvSpec, episodes: int, policy: str = "greedy", *, epsilon: float = 0.05,
                   num_envs: int = 16, max_episode_frames: int = STANDARD_MAX_EPISODE_FRAMES, seed: int = 0,
                   record_path: str | None = None, num_threads: int = 0,
                   fire_after_life_loss: bool = False) -> dict[str, Any]:
    """Play `episodes` complete episodes with `model` (a keras model: obs -> (logits, value)); return scores.

    Uses a synchronous vector of min(num_envs, episodes) simulators with unclipped rewards.
    `record_path`: write environment 0's first episode as a GIF (image observations only).
    `max_episode_frames` caps Atari episodes (counted as truncated); gymnasium environments keep
    their own time limit. `num_threads` 0: the cores available. `fire_after_life_loss`: Atari
    simulators press FIRE for the policy after a lost life (as `--life-loss terminal` trains).
    """
    from ba3c.predictor import Predictor

    _check_options(episodes, num_envs, epsilon, max_episode_frames, policy)
    quotas = episode_quotas(episodes, num_envs)
    sim = _open_simulator(model, spec, len(quotas), num_threads, max_episode_frames, fire_after_life_loss)
    if record_path and len(sim.obs_shape) != 3:  # not worth failing the evaluation over
        print(f"ba3c.evaluate: not recording: --record needs image observations, {spec.kind}:{spec.name} has "
              f"vector observations of shape {sim.obs_shape}", file=sys.stderr, flush=True)
        record_path = None
    t0 = time.perf_counter()
    try:
        games = play(sim, Predictor(model, sim.obs_shape, sim.obs_dtype), quotas, policy, epsilon, seed,
                     record=bool(record_path))
    finally:
        sim.close()
    scores, lengths = [g[2] for g in games.results], [g[3] for g in games.results]
    out: dict[str, Any] = {
        "schema": SCHEMA, "game": spec.name, "env_kind": spec.kind, "policy": policy,
        "epsilon": epsilon if policy == "egreedy" else None, "episodes": len(games.results),
        "score": summarize(scores), "length_steps": summarize(lengths),
        "length_frames": summarize([x * spec.frames_per_step for x in lengths]),
        "truncated_episodes": sum(g[4] for g in games.results), "scores": scores, "lengths_steps": lengths,
        "protocol": protocol(spec, policy, epsilon, episodes, len(quotas), max_episode_frames, fire_after_life_loss),
        "seed": seed, "eval_wall_s": round(time.perf_counter() - t0, 3), "recording": None,
    }
    if record_path and games.frames:
        _save_gif(games.frames, record_path, fps=60 / spec.frames_per_step)
        out["recording"] = {"path": record_path, "frames": len(games.frames),
                            "truncated_at": RECORD_MAX_FRAMES if len(games.frames) >= RECORD_MAX_FRAMES else None}
    return out


def protocol(spec: EnvSpec, policy: str, epsilon: float, episodes: int, num_envs: int,
             max_episode_frames: int, fire_after_life_loss: bool = False) -> dict[str, Any]:
    """What a reader needs to compare our number with a published one."""
    p: dict[str, Any] = {"policy": POLICY_PROTOCOL[policy] + (f" (epsilon={epsilon})" if policy == "egreedy" else ""),
                         "episodes": episodes, "parallel_envs": num_envs, "reward": "raw game score, unclipped",
                         "episode_selection": "fixed per-environment quotas (unbiased by episode length)"}
    if spec.kind == "atari":
        # AtariVectorEnv defaults as used by ba3c.simulators (not overridden there).
        p.update(starts="up to 30 no-op actions", frameskip=4, sticky_actions=0.0, action_set="minimal",
                 episode="full game (no life-loss termination)", max_episode_frames=max_episode_frames,
                 fire_after_life_loss=("FIRE pressed for the policy after each lost life (games with FIRE)"
                                       if fire_after_life_loss else "no (the policy presses FIRE itself)"))
    else:
        p.update(episode="gymnasium's own termination and time limit")
    return p


# ---------------------------------------------------------------- a model from a checkpoint

def model_from_checkpoint(c: Checkpoint) -> tuple[Any, EnvSpec, Config]:  # -> (keras model, spec, its run's config)
    """Rebuild the network the checkpoint was trained with and load its weights (not the optimizer state)."""
    from ba3c.model import build_model
    from ba3c.simulators import resolve_env

    meta = c.meta
    missing = [k for k in ("config", "model", "num_actions", "obs_shape") if k not in meta]
    if missing:
        raise EvalError(f"checkpoint '{c.path}' lacks {', '.join(missing)} in its meta; it predates evaluation support")
    cfg = saved_config(meta["config"])
    spec = resolve_env(cfg.sim.env)
    model = build_model(meta["model"], tuple(meta["obs_shape"]), int(meta["num_actions"]), seed=cfg.sim.seed)
    weights = model.weights
    try:  # model weights come first; the rest is optimizer state
        assign_arrays(weights, c.arrays[:len(weights)], f"checkpoint '{c.path}' ({meta['model']} model)")
    except ValueError as e:
        raise EvalError(str(e)) from None
    return model, spec, cfg
