"""`python -m ba3c.evaluate RUN_DIR_OR_CHECKPOINT`: play full episodes with a trained policy and report scores.

    python -m ba3c.evaluate runs/pong-20261101-120000 --episodes 50                 # the paper's protocol
    python -m ba3c.evaluate runs/pong-... --policy greedy                            # plain argmax, no anti-stuck rule
    python -m ba3c.evaluate runs/pong-... --policy egreedy --epsilon 0.05            # DQN / Gorila's protocol
    python -m ba3c.evaluate runs/pong-... --sticky-actions 0.25                      # the authors' *-v0 sticky actions
    python -m ba3c.evaluate runs/pong-.../checkpoints/ckpt-0000001234.npz --record pong.gif

The command line around `ba3c.evaluation` (policies, episode quotas, the protocol and its
reasons): it finds and loads the checkpoint, adds the training cost, prints the table and
writes the JSON file.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ba3c import checkpoint as ckpt
from ba3c.algos import algorithm, builtin_names
from ba3c.config import MAX_SEED, MAX_THREADS, ConfigError, LearnConfig, OneLineParser
from ba3c.evaluation import (
    PAPER_MAX_EPISODE_STEPS,
    POLICIES,
    STANDARD_MAX_EPISODE_FRAMES,
    EvalError,
    check_options,
    check_sticky_actions,
    checkpoint_config,
    evaluate_model,
    model_from_checkpoint,
    protocol_line,
)
from ba3c.files import EXIT_NO_SPACE, NoSpaceError, fmt_bytes, unwritable, write_json
from ba3c.resources import BASE_BYTES, EMULATOR_BYTES, USABLE_FRACTION, available_memory
from ba3c.simulators import ATARI
from ba3c.workers import cores_available, set_tensorflow_threads


@dataclass(frozen=True)
class Loaded:
    checkpoint: ckpt.Checkpoint
    run_dir: str


def locate_checkpoint(path: str) -> Loaded:
    """A run directory, its checkpoints/ directory, or one .npz file -> the verified checkpoint."""
    if not os.path.exists(path):
        raise EvalError(f"no such file or directory: '{path}'")
    if os.path.isdir(path):
        sub = os.path.join(path, "checkpoints")
        ckpt_dir = sub if os.path.isdir(sub) else path
        skipped: list[str] = []
        c = ckpt.load_latest(ckpt_dir, skipped)
        if c is None:
            why = f"; unusable: {'; '.join(skipped)}" if skipped else ""
            raise EvalError(f"no valid checkpoint in '{ckpt_dir}' (expected ckpt-<updates>.npz with its .sha256){why}")
        if skipped:
            print(f"ba3c.evaluate: warning: newer checkpoints skipped ({'; '.join(skipped)}); evaluating "
                  f"{os.path.basename(c.path)}", file=sys.stderr, flush=True)
    elif path.endswith(".npz"):
        try:
            c = ckpt.read_verified(path)  # same verification as load_latest, for one named file
        except Exception as e:
            raise EvalError(f"cannot use checkpoint '{path}': {e}") from None
        ckpt_dir = os.path.dirname(os.path.abspath(path))
    else:
        raise EvalError(f"'{path}' is neither a run directory nor a checkpoint .npz file")
    ckpt_dir = os.path.abspath(ckpt_dir)
    run_dir = os.path.dirname(ckpt_dir) if os.path.basename(ckpt_dir) == "checkpoints" else ckpt_dir
    return Loaded(c, run_dir)


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
    """The protocol's line, then score and length statistics."""
    rows = [("score", result["score"]), ("length (agent steps)", result["length_steps"])]
    lines = [protocol_line(result["protocol"]), f"{'':<22}{'mean':>12}{'std':>12}{'median':>12}{'min':>12}{'max':>12}"]
    for name, s in rows:
        lines.append(f"{name:<22}" + "".join(f"{s[k]:>12.2f}" for k in ("mean", "std", "median", "min", "max")))
    return "\n".join(lines)


def default_policy(algo: str = LearnConfig.algo) -> str:
    """The protocol the algorithm's paper evaluated with (Algorithm.eval_policy): BA3C's authors' (argmax with their
    anti-stuck rule), DQN's for Gorila (epsilon-greedy 0.05)."""
    return algorithm(algo).eval_policy


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="python -m ba3c.evaluate", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("path", metavar="RUN_DIR_OR_CHECKPOINT",
                   help="run directory (its newest valid checkpoint) or a .npz")
    p.add_argument("--episodes", type=int, default=50, help="complete episodes to play (paper: 50)")
    p.add_argument("--policy", choices=POLICIES, default=None, metavar="PROTOCOL",
                   help=f"{', '.join(POLICIES)} (default: the run's algorithm's: "
                        f"{', '.join(f'{default_policy(n)} for {n}' for n in builtin_names())}). "
                        "paper: the BA3C authors' protocol (argmax, random action with "
                        "probability 0.001, action 1 (FIRE) at 30 identical choices in a row, cap "
                        f"{PAPER_MAX_EPISODE_STEPS:,} agent steps); greedy: plain argmax (a Breakout agent may never "
                        "serve again); sampled: as in training; egreedy: DQN / Gorila")
    p.add_argument("--epsilon", type=float, default=0.05, help="random-action probability for --policy egreedy")
    p.add_argument("--sticky-actions", type=float, default=0.0, metavar="P",
                   help="Atari: ALE's repeat_action_probability, 0 <= P < 1: at every emulator frame the previous "
                        "action is played again with probability P. 0: our environment (as trained); 0.25: the BA3C "
                        "authors' (gym's *-v0). Recorded in the JSON's protocol and the table")
    p.add_argument("--num-envs", type=int, default=16, help="environments played in parallel")
    p.add_argument("--max-episode-frames", type=int, default=None,
                   help="Atari episode cap in emulator frames (episodes cut there count, marked truncated); default: "
                        f"the protocol's (paper: {PAPER_MAX_EPISODE_STEPS:,} agent steps = "
                        f"{PAPER_MAX_EPISODE_STEPS * ATARI.frameskip:,} frames, "
                        f"others {STANDARD_MAX_EPISODE_FRAMES:,})")
    p.add_argument("--seed", type=int, default=0,
                   help="emulator seed (environment i gets seed + i) and action-noise seed")
    p.add_argument("--record", default="", metavar="OUT.gif",
                   help="save environment 0's first episode as a GIF (Atari)")
    p.add_argument("--json", default="", metavar="OUT.json",
                   help="result file (default RUN_DIR/eval-<policy>.json; with sticky actions "
                        "eval-<policy>-sticky<P>.json)")
    p.add_argument("--threads", type=int, default=0, help="TensorFlow and emulator threads (0: cores available)")
    return p


def progress_printer(episodes: int) -> Callable[[int, int], None]:
    """Prints where a long evaluation stands (called every minute by evaluate_model)."""
    t0 = time.monotonic()

    def report(counted: int, steps: int) -> None:
        print(f"ba3c.evaluate: {counted} of {episodes} episodes finished, {steps:,} agent steps played, "
              f"{(time.monotonic() - t0) / 60:.0f} min", flush=True)
    return report


def _output_problem(flag: str, path: str, example: str = "eval.json") -> str | None:
    """Why the result or recording cannot be written to `path` (asked before the games are played), or None."""
    if os.path.isdir(path):
        return f"{flag}: '{path}' is a directory; name a file, e.g. {os.path.join(path, example)}"
    if (why := unwritable(os.path.dirname(os.path.abspath(path)))) is not None:
        return f"{flag}: cannot write '{path}' ({why}); choose another path"
    return None


def check_args(args: argparse.Namespace) -> None:
    """Every option on its own, before a checkpoint is read or TensorFlow starts; raises EvalError."""
    check_options(args.episodes, args.num_envs, args.epsilon, args.max_episode_frames,
                  args.policy or default_policy(), args.sticky_actions)
    # environment i plays with seed + i (so many environments that no seed is left: the memory check refuses them)
    most = max(0, MAX_SEED - min(args.num_envs, args.episodes) + 1)
    if not 0 <= args.seed <= most:
        raise EvalError(f"--seed must be in [0, {most}] (environment i plays with seed + i, and emulators take 32-bit "
                        f"seeds), got {args.seed}")
    if not 0 <= args.threads <= MAX_THREADS:
        raise EvalError(f"--threads must be in [0, {MAX_THREADS}] (0: the cores available), got {args.threads}")
    for flag, path, example in (("--json", args.json, "eval.json"), ("--record", args.record, "episode.gif")):
        if path and (problem := _output_problem(flag, path, example)) is not None:
            raise EvalError(problem)


def check_memory(kind: str, envs: int) -> None:
    """The emulators against this host's memory (resources.py's estimates); raises EvalError with what fits."""
    usable = int(available_memory() * USABLE_FRACTION)
    if envs * EMULATOR_BYTES[kind] + BASE_BYTES > usable:
        fits = max(1, (usable - BASE_BYTES) // EMULATOR_BYTES[kind])
        raise EvalError(f"--num-envs {envs}: the emulators and TensorFlow need about "
                        f"{fmt_bytes(envs * EMULATOR_BYTES[kind] + BASE_BYTES)}, this machine has "
                        f"{fmt_bytes(available_memory())} available; use at most --num-envs {fits}")


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        check_args(args)
        loaded = locate_checkpoint(args.path)
        spec, trained = checkpoint_config(loaded.checkpoint)  # a config this version cannot read: said before TF
        args.policy = args.policy or default_policy(trained.learn.algo)  # each algorithm's own paper's protocol
        check_sticky_actions(args.sticky_actions, spec)
        check_memory(spec.kind, min(args.num_envs, args.episodes))
        sticky = f"-sticky{args.sticky_actions:g}" if args.sticky_actions else ""  # never over the evaluation without
        out = args.json or os.path.join(loaded.run_dir, f"eval-{args.policy}{sticky}.json")
        if not args.json and (problem := _output_problem("the result", out)) is not None:
            raise EvalError(f"{problem} (or give --json elsewhere)")
        from ba3c.tfquiet import import_tensorflow_quietly

        import_tensorflow_quietly()
        threads = args.threads or cores_available()
        set_tensorflow_threads(threads)
        c = loaded.checkpoint
        model, spec, cfg = model_from_checkpoint(c)
        print(f"ba3c.evaluate: {spec.kind}:{spec.name} {c.meta['model']} from {c.path} "
              f"({int(c.meta.get('frames', 0)):,} frames, {int(c.meta.get('updates', 0)):,} updates); "
              f"{args.episodes} episodes, {args.policy} protocol"
              + (f", sticky actions {args.sticky_actions:g}" if args.sticky_actions else ""), flush=True)
        result = evaluate_model(model, spec, args.episodes, args.policy, epsilon=args.epsilon,
                                num_envs=args.num_envs, max_episode_frames=args.max_episode_frames, seed=args.seed,
                                record_path=args.record or None, num_threads=threads,
                                fire_after_life_loss=cfg.sim.life_loss == "terminal",  # as it trained
                                sticky_actions=args.sticky_actions, progress=progress_printer(args.episodes))
    except (EvalError, ConfigError) as e:
        print(f"ba3c.evaluate: error: {e}", file=sys.stderr)
        return 2
    except NoSpaceError as e:  # the recording (--record) found no room
        print(f"ba3c.evaluate: error: {e.describe()}; {e.to_free()}, or give --record elsewhere; exit status "
              f"{EXIT_NO_SPACE}", file=sys.stderr)
        return EXIT_NO_SPACE
    result.update(checkpoint=os.path.abspath(c.path), run_dir=loaded.run_dir, model=c.meta["model"],
                  frames=c.meta.get("frames"), updates=c.meta.get("updates"),
                  # "seed" and protocol.sticky_actions are the evaluation's own; compare.py gives each run its row
                  train_seed=cfg.sim.seed, train_sticky_actions=cfg.sim.sticky_actions, algo=cfg.learn.algo,
                  date=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                  **training_cost(loaded.run_dir, c.meta))
    print(format_table(result))  # first: a result file the disk has no room for must not lose the scores
    if result["truncated_episodes"]:
        cap = result["protocol"]["max_episode_frames"]
        where = f"the cap of {cap:,} frames" if cap is not None else "the environment's time limit"
        print(f"note: {result['truncated_episodes']} episode(s) reached {where}")
    if result["recording"]:
        rec = result["recording"]
        cut = f", cut at {rec['truncated_at']} frames" if rec["truncated_at"] else ""
        print(f"recording: {rec['path']} ({rec['frames']} frames{cut})")
    try:
        write_json(out, result)
    except NoSpaceError as e:
        print(f"ba3c.evaluate: error: {e.describe()}; {e.to_free()} and evaluate again, or give --json elsewhere (the "
              f"scores are above); exit status {EXIT_NO_SPACE}", file=sys.stderr)
        return EXIT_NO_SPACE
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
