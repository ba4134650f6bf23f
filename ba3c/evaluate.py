"""`python -m ba3c.evaluate RUN_DIR_OR_CHECKPOINT`: play full episodes with a trained policy and report scores.

    python -m ba3c.evaluate runs/pong-20261101-120000 --episodes 50                 # the paper's protocol
    python -m ba3c.evaluate runs/pong-... --policy egreedy --epsilon 0.05            # DQN / Gorila's protocol
    python -m ba3c.evaluate runs/pong-.../checkpoints/ckpt-0000001234.npz --record pong.gif

Scores are the raw (unclipped) game scores of complete games (no life-loss episodes), with the
simulators' standard Atari settings: up to 30 no-op starts, frameskip 4, no sticky actions, the
minimal action set, and an episode cap (--max-episode-frames, default 108,000 = 30 minutes).

Which episodes are counted: environment i of E is given a fixed quota of episodes up front
(quotas differ by at most one and sum to --episodes) and its first `quota` episodes are the ones
counted. Taking "the first N episodes to finish" over all environments would favour short
episodes (a policy that dies fast would finish more of them first); with fixed quotas whether an
episode counts never depends on its length, so the mean is unbiased. The price is that
environments that are done with their quota idle until the slowest one finishes.

`evaluate_model` is the reusable part (a trainer can call it on its live model); `main` adds
checkpoint loading, printing and the JSON file.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ba3c.simulators import EnvSpec

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


def evaluate_model(model, spec: EnvSpec, episodes: int, policy: str = "greedy", *, epsilon: float = 0.05,
                   num_envs: int = 16, max_episode_frames: int = STANDARD_MAX_EPISODE_FRAMES, seed: int = 0,
                   record_path: str | None = None, num_threads: int = 0) -> dict[str, Any]:
    """Play `episodes` complete episodes with `model` (a keras model: obs -> (logits, value)); return scores.

    Uses a synchronous vector of min(num_envs, episodes) simulators (every step answers all of
    them) with unclipped rewards. `record_path`: write environment 0's first episode as a GIF
    (image observations only). `max_episode_frames` caps Atari episodes (counted as truncated);
    gymnasium environments keep their own time limit.
    """
    from ba3c.predictor import Predictor
    from ba3c.simulators import make_simulator

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
    quotas = episode_quotas(episodes, num_envs)
    n = len(quotas)
    threads = num_threads or len(os.sched_getaffinity(0))
    sim = make_simulator(spec, n, n, min(threads, n), max_episode_frames)  # batch == num_envs: synchronous
    want = (tuple(model.inputs[0].shape[1:]), int(model.outputs[0].shape[-1]))
    if want != (sim.obs_shape, sim.num_actions):
        sim.close()
        raise EvalError(f"the model takes observations {want[0]} and has {want[1]} actions, but "
                        f"{spec.kind}:{spec.name} gives {sim.obs_shape} and {sim.num_actions}")
    if record_path and len(sim.obs_shape) != 3:  # not worth failing the evaluation over
        print(f"ba3c.evaluate: not recording: --record needs image observations, {spec.kind}:{spec.name} has "
              f"vector observations of shape {sim.obs_shape}", file=sys.stderr, flush=True)
        record_path = None
    predict = Predictor(model, sim.obs_shape, sim.obs_dtype)
    rng = np.random.default_rng([seed, 1])  # action noise; the emulators get `seed` itself
    done_count = np.zeros(n, np.int64)
    ret, length = np.zeros(n, np.float64), np.zeros(n, np.int64)
    results: list[tuple[int, int, float, int, bool]] = []  # (env, index in env, score, steps, truncated)
    frames: list[np.ndarray] = []
    recording = bool(record_path)
    resetting = np.zeros(n, bool)  # this env's next observation is an auto-reset, not a step of an episode
    t0 = time.perf_counter()
    try:
        b = sim.reset(seed)
        if recording:
            frames.append(np.array(b.obs[0, -1]))
        while (done_count < quotas).any():
            logits, _ = predict(b.obs)
            sim.send(choose_actions(policy, logits, rng, epsilon))
            b = sim.recv()
            live = ~resetting
            ret[live] += b.reward[live]
            length[live] += 1
            ended = (b.terminated | b.truncated) & live
            if recording and live[0]:
                if len(frames) < RECORD_MAX_FRAMES:
                    frames.append(np.array(b.obs[0, -1]))
                if ended[0]:
                    recording = False
            for i in np.flatnonzero(ended):
                if done_count[i] < quotas[i]:
                    results.append((int(i), int(done_count[i]), float(ret[i]), int(length[i]), bool(b.truncated[i])))
                done_count[i] += 1
                ret[i], length[i] = 0.0, 0
            resetting = ended
    finally:
        sim.close()
    wall = time.perf_counter() - t0
    results.sort()
    scores = [r[2] for r in results]
    lengths = [r[3] for r in results]
    out: dict[str, Any] = {
        "schema": SCHEMA, "game": spec.name, "env_kind": spec.kind, "policy": policy,
        "epsilon": epsilon if policy == "egreedy" else None, "episodes": len(results),
        "score": summarize(scores), "length_steps": summarize(lengths),
        "length_frames": summarize([x * spec.frames_per_step for x in lengths]),
        "truncated_episodes": sum(r[4] for r in results), "scores": scores, "lengths_steps": lengths,
        "protocol": protocol(spec, policy, epsilon, episodes, n, max_episode_frames),
        "seed": seed, "eval_wall_s": round(wall, 3), "recording": None,
    }
    if record_path and frames:
        _save_gif(frames, record_path, fps=60 / spec.frames_per_step)
        out["recording"] = {"path": record_path, "frames": len(frames),
                            "truncated_at": RECORD_MAX_FRAMES if len(frames) >= RECORD_MAX_FRAMES else None}
    return out


def protocol(spec: EnvSpec, policy: str, epsilon: float, episodes: int, num_envs: int,
             max_episode_frames: int) -> dict[str, Any]:
    """What a reader needs to compare our number with a published one."""
    p: dict[str, Any] = {"policy": POLICY_PROTOCOL[policy] + (f" (epsilon={epsilon})" if policy == "egreedy" else ""),
                         "episodes": episodes, "parallel_envs": num_envs, "reward": "raw game score, unclipped",
                         "episode_selection": "fixed per-environment quotas (unbiased by episode length)"}
    if spec.kind == "atari":
        # AtariVectorEnv defaults as used by ba3c.simulators (not overridden there).
        p.update(starts="up to 30 no-op actions", frameskip=4, sticky_actions=0.0, action_set="minimal",
                 episode="full game (no life-loss termination)", max_episode_frames=max_episode_frames)
    else:
        p.update(episode="gymnasium's own termination and time limit")
    return p


# ---------------------------------------------------------------- checkpoints and the command line

@dataclass(frozen=True)
class Loaded:
    checkpoint: Any  # ba3c.checkpoint.Checkpoint
    run_dir: str


def locate_checkpoint(path: str) -> Loaded:
    """A run directory, its checkpoints/ directory, or one .npz file -> the verified checkpoint."""
    from ba3c import checkpoint as ckpt

    if not os.path.exists(path):
        raise EvalError(f"no such file or directory: '{path}'")
    if os.path.isdir(path):
        sub = os.path.join(path, "checkpoints")
        ckpt_dir = sub if os.path.isdir(sub) else path
        c = ckpt.load_latest(ckpt_dir)
        if c is None:
            raise EvalError(f"no valid checkpoint in '{ckpt_dir}' (expected ckpt-<updates>.npz with its .sha256)")
    elif path.endswith(".npz"):
        try:
            c = ckpt._read_verified(path)  # same verification as load_latest, for one named file
        except Exception as e:
            raise EvalError(f"cannot use checkpoint '{path}': {e}") from None
        ckpt_dir = os.path.dirname(os.path.abspath(path))
    else:
        raise EvalError(f"'{path}' is neither a run directory nor a checkpoint .npz file")
    ckpt_dir = os.path.abspath(ckpt_dir)
    run_dir = os.path.dirname(ckpt_dir) if os.path.basename(ckpt_dir) == "checkpoints" else ckpt_dir
    return Loaded(c, run_dir)


def build_from_checkpoint(c) -> tuple[Any, EnvSpec, dict[str, Any]]:  # -> (keras model, spec, config dict)
    """Rebuild the network the checkpoint was trained with and load its weights (not the optimizer state)."""
    from ba3c.config import config_from_dict
    from ba3c.model import build_model
    from ba3c.simulators import resolve_env

    meta = c.meta
    missing = [k for k in ("config", "model", "num_actions", "obs_shape") if k not in meta]
    if missing:
        raise EvalError(f"checkpoint '{c.path}' lacks {', '.join(missing)} in its meta; it predates evaluation support")
    cfg = config_from_dict(meta["config"])
    spec = resolve_env(cfg.sim.env)
    model = build_model(meta["model"], tuple(meta["obs_shape"]), int(meta["num_actions"]), seed=cfg.sim.seed)
    weights = model.weights
    if len(c.arrays) < len(weights):
        raise EvalError(f"checkpoint '{c.path}' holds {len(c.arrays)} arrays, the {meta['model']} model needs "
                        f"{len(weights)}")
    for v, a in zip(weights, c.arrays):  # model weights come first; the rest is optimizer state
        if tuple(v.shape) != tuple(a.shape):
            raise EvalError(f"checkpoint '{c.path}': array for {v.path} has shape {a.shape}, model needs {tuple(v.shape)}")
        v.assign(a)
    return model, spec, meta["config"]


def training_cost(run_dir: str, meta: dict[str, Any]) -> dict[str, Any]:
    """Training wall time of the checkpoint and its core-hours: measured CPU seconds where the checkpoint
    counted them from the start of the run, else wall time x the cores in the run's meta.json."""
    wall_s = meta.get("time_s")
    out: dict[str, Any] = {"train_wall_s": wall_s, "ranks": meta.get("world_size"), "cores": None,
                           "cores_basis": None, "core_hours": None}
    try:
        with open(os.path.join(run_dir, "meta.json")) as fh:
            run_meta = json.load(fh)
    except (OSError, ValueError):
        return out
    slurm = run_meta.get("slurm") or {}
    try:
        nodes, per_node = int(slurm["SLURM_JOB_NUM_NODES"]), int(slurm["SLURM_CPUS_ON_NODE"])
        out.update(cores=nodes * per_node, cores_basis=f"SLURM: {nodes} nodes x {per_node} CPUs")
    except (KeyError, ValueError):
        if run_meta.get("cpu_count"):  # not under SLURM: assume every rank ran on rank 0's host
            out.update(cores=int(run_meta["cpu_count"]), cores_basis="cpu_count of rank 0's host (one host assumed)")
    if out["cores"] and wall_s is not None:
        out["core_hours"] = float(wall_s) / 3600 * out["cores"]
    if meta.get("cpu_s_from_start") and meta.get("cpu_s"):  # measured beats wall x cores
        out.update(core_hours=float(meta["cpu_s"]) / 3600,
                   cores_basis="measured: CPU seconds of all ranks since the run began (checkpoint cpu_s)")
    return out


def format_table(result: dict[str, Any]) -> str:
    rows = [("score", result["score"]), ("length (agent steps)", result["length_steps"])]
    lines = [f"{'':<22}{'mean':>12}{'std':>12}{'median':>12}{'min':>12}{'max':>12}"]
    for name, s in rows:
        lines.append(f"{name:<22}" + "".join(f"{s[k]:>12.2f}" for k in ("mean", "std", "median", "min", "max")))
    return "\n".join(lines)


def _write_json(path: str, data: dict[str, Any]) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(data, fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, path)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ba3c.evaluate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("path", metavar="RUN_DIR_OR_CHECKPOINT", help="run directory (its newest valid checkpoint) or a .npz")
    p.add_argument("--episodes", type=int, default=50, help="complete episodes to play (paper: 50)")
    p.add_argument("--policy", choices=POLICIES, default="greedy",
                   help="greedy (paper), sampled (as in training), egreedy (DQN / Gorila)")
    p.add_argument("--epsilon", type=float, default=0.05, help="random-action probability for --policy egreedy")
    p.add_argument("--num-envs", type=int, default=16, help="environments played in parallel")
    p.add_argument("--max-episode-frames", type=int, default=STANDARD_MAX_EPISODE_FRAMES,
                   help="Atari episode cap in emulator frames (episodes cut there count, marked truncated)")
    p.add_argument("--seed", type=int, default=0, help="emulator seed (environment i gets seed + i) and action-noise seed")
    p.add_argument("--record", default="", metavar="OUT.gif", help="save environment 0's first episode as a GIF (Atari)")
    p.add_argument("--json", default="", metavar="OUT.json", help="result file (default RUN_DIR/eval-<policy>.json)")
    p.add_argument("--threads", type=int, default=0, help="TensorFlow and emulator threads (0: cores available)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.episodes < 1 or args.num_envs < 1 or args.max_episode_frames < 1:
            raise EvalError("--episodes, --num-envs and --max-episode-frames must be >= 1")
        loaded = locate_checkpoint(args.path)
        from ba3c.tfquiet import import_tensorflow_quietly

        import_tensorflow_quietly()
        import tensorflow as tf

        threads = args.threads or len(os.sched_getaffinity(0))
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(2)
        c = loaded.checkpoint
        model, spec, _ = build_from_checkpoint(c)
        print(f"ba3c.evaluate: {spec.kind}:{spec.name} {c.meta['model']} from {c.path} "
              f"({int(c.meta.get('frames', 0)):,} frames, {int(c.meta.get('updates', 0)):,} updates); "
              f"{args.episodes} episodes, {args.policy} policy", flush=True)
        result = evaluate_model(model, spec, args.episodes, args.policy, epsilon=args.epsilon,
                                num_envs=args.num_envs, max_episode_frames=args.max_episode_frames, seed=args.seed,
                                record_path=args.record or None, num_threads=threads)
    except EvalError as e:
        print(f"ba3c.evaluate: error: {e}", file=sys.stderr)
        return 2
    result.update(checkpoint=os.path.abspath(c.path), run_dir=loaded.run_dir, model=c.meta["model"],
                  frames=c.meta.get("frames"), updates=c.meta.get("updates"),
                  date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  **training_cost(loaded.run_dir, c.meta))
    out = args.json or os.path.join(loaded.run_dir, f"eval-{args.policy}.json")
    _write_json(out, result)
    print(format_table(result))
    if result["truncated_episodes"]:
        print(f"note: {result['truncated_episodes']} episode(s) reached the cap of {args.max_episode_frames:,} frames")
    if result["recording"]:
        rec = result["recording"]
        cut = f", cut at {rec['truncated_at']} frames" if rec["truncated_at"] else ""
        print(f"recording: {rec['path']} ({rec['frames']} frames{cut})")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
