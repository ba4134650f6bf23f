"""Throughput of each pipeline stage alone and of the whole trainer, measured in one run.

    python -m benchmarks.throughput [--seconds 20] [--pipeline-seconds 60] [--quick] [--out DIR]

With the default config (`ba3c.config.Config()`: pong, Nature CNN) on this machine's cores:

* E  simulators alone: AtariSimulator in async mode, random actions, agent steps/s;
* F  predictor forward (+ action sampling) alone at predict_batch, samples/s;
* T  learner train step alone at train_batch, single process, samples/s;
* P  `python -m ba3c.train` as a child process, steady-state agent steps/s from its progress.csv
     (start-up to its first row and the first `--warmup-frac` of the time after it are dropped).

E, F and T are each measured for half of --seconds before P and half after it, and averaged.
One agent step = one predictor sample = one train sample, so the stages are comparable.

`--algo gorila` measures Gorila mode (docs/gorila.md) with its defaults: F is the Q-network's forward with
epsilon-greedy, T the DQN update (network and target network) at --train-batch 32, counted in agent steps
as samples / 8 (the replay ratio: 32 samples per 4 agent steps), P a Gorila trainer after a short warm-up
(--learning-starts 2000, --replay-size 100000), with its updates/s and the replay ratio it kept. Writes
DIR/throughput-gorila.json and .png. If the
three stages ran one after another on all cores, the rate would be C = 1/(1/E + 1/F + 1/T);
efficiency = P / C (above 1 means the trainer overlaps stages better than strictly serial).
Writes DIR/throughput.json and DIR/throughput.png (DIR: benchmarks/results/throughput).
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ba3c import api
from ba3c.algos import algorithm, builtin_names
from ba3c.config import Config
from ba3c.simulators import AtariSimulator, EnvSpec, resolve_env
from ba3c.workers import configure_tensorflow, cores_available
from measure import harness


def timed_rate(step: Callable[[], int], seconds: float, warmup_calls: int) -> float:
    """Items per second of `step()` (which returns how many items it processed), after warm-up calls."""
    for _ in range(warmup_calls):
        step()
    n, t0 = 0, time.perf_counter()
    while True:
        n += step()
        dt_ = time.perf_counter() - t0
        if dt_ >= seconds:
            return n / dt_


# ---------------------------------------------------------------- stages alone

def measure_env(cfg: Config, spec: EnvSpec, seconds: float) -> tuple[float, tuple[int, ...], int]:
    """E: async ALE vector env with random actions, as the trainer builds it. Returns (steps/s, obs shape, actions)."""
    s = cfg.sim
    sim = AtariSimulator(spec, s.num_envs, s.predict_batch, s.env_threads or cores_available(), s.max_episode_frames,
                         sticky_actions=s.sticky_actions)
    rng = np.random.default_rng(s.seed)
    try:
        sim.reset(s.seed)

        def step() -> int:
            sim.send(rng.integers(sim.num_actions, size=s.predict_batch, dtype=np.int32))
            return len(sim.recv().env_ids)

        rate = timed_rate(step, seconds, warmup_calls=20)
        return rate, sim.obs_shape, sim.num_actions
    finally:
        sim.close()


# ---------------------------------------------------------------- the whole trainer

@dataclass(frozen=True)
class Pipeline:
    """P: the trainer's steady state, from its progress.csv."""
    frames_per_s: float
    updates_per_s: float
    rows_total: int
    steady_rows: list[int]
    steady_window_s: list[float]
    steady_stage_fraction_of_wall: dict[str, float]  # each thread's shares add up to ~1
    timer_table_whole_run: list[str]
    command: str


def measure_pipeline(cfg: Config, seconds: float, warmup_frac: float, run_dir: str,
                     extra: list[str]) -> Pipeline:
    """P: run `python -m ba3c.train` for `seconds` after its first progress row, stop it with SIGTERM."""
    cmd = harness.train_command("--env", cfg.sim.env, "--run-dir", run_dir, "--dist", "none",
                                "--total-frames", str(10**10), "--checkpoint-interval-min", "1000", *extra)
    os.makedirs(run_dir, exist_ok=True)
    log_path = os.path.join(run_dir, "trainer.log")
    run = harness.launch(harness.TrainerJob(cmd, [run_dir], log_path, poll_s=0.5),
                         harness.stop_after_logged(seconds))
    if not run.ok:
        raise RuntimeError(f"trainer {run.outcome}, exit {run.returncode}; see {log_path}:\n{run.log_tail}")
    rows = run.rows[0]
    w = harness.steady_window(rows, warmup_frac=warmup_frac)
    if w is None:
        raise RuntimeError(f"the trainer logged {len(rows)} progress row(s); run it longer (--pipeline-seconds)")
    with open(log_path) as fh:
        timer_table = [ln.rstrip() for ln in fh if ln.startswith(("stage (rank 0)", "  simulation", "  learner"))]
    return Pipeline(w.frames_per_s, w.updates_per_s, len(rows), [w.first_index, w.last_index],
                    [float(w.first["time_s"]), float(w.last["time_s"])],
                    {k: v / w.seconds for k, v in w.stage_seconds().items()}, timer_table,
                    " ".join(["python", *cmd[1:]]))


# ---------------------------------------------------------------- report

def plot(rates: dict[str, float], efficiency: float, path: str) -> None:
    plt = harness.pyplot()
    labels = ["E env", "F forward", "T train", "C ceiling", "P pipeline"]
    values = [rates[k] for k in ("E", "F", "T", "C", "P")]
    fig, ax = plt.subplots(figsize=(7, 4))
    bars = ax.bar(labels, values, color=["#4c72b0", "#4c72b0", "#4c72b0", "#8c8c8c", "#dd8452"])
    ax.bar_label(bars, fmt="{:,.0f}")
    ax.set_ylabel("agent steps (= samples) per second")
    ax.set_title(f"ba3c throughput, one run: P / C = {efficiency:.2f}")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


@dataclass(frozen=True)
class Throughput:
    """One run's result (benchmarks/results/throughput/throughput.json): rates in agent steps (= samples) per second."""
    env_steps_per_s: float
    forward_samples_per_s: float
    train_samples_per_s: float
    pipeline_steps_per_s: float
    ceiling_steps_per_s: float
    efficiency: float
    frames_per_s: float
    pipeline: dict[str, Any]
    stages_before_after: dict[str, dict[str, float]]
    machine: dict[str, Any]
    load_avg_at_end: list[float]
    date: str
    quick: bool
    seconds_per_stage: float
    pipeline_seconds: float
    warmup_frac: float
    config: dict[str, Any]
    trainer_extra_flags: list[str]
    command: str
    note: str
    algo: str = "ba3c"
    updates_per_s: float = 0.0          # P's updates per second
    samples_per_agent_step: float = 1.0  # the replay ratio configured (BA3C: each agent step is one sample)
    replay_ratio_measured: float = 1.0   # train samples per agent step played in P's steady window


def note(warmup_frac: float) -> str:
    return ("E, F, T and P were measured in one run on the same machine (E, F, T as the mean of a measurement "
            "before and one after P); compare ratios, not absolute rates, across machines or runs. E, F, T "
            "each use all cores alone; C assumes the stages run serially; P is the trainer's steady state "
            "(frames_per_s / 4), excluding its start-up to the first progress row and the first "
            f"{warmup_frac:.0%} of the time logged after it.")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0,
                   help="seconds per stage measurement (E, F, T), half before P and half after it")
    p.add_argument("--pipeline-seconds", type=float, default=60.0,
                   help="seconds the trainer runs after its first progress row (P)")
    p.add_argument("--warmup-frac", type=float, default=0.2, help="leading fraction of the trainer's run excluded")
    p.add_argument("--quick", action="store_true", help="short smoke run (about a minute; numbers are rough)")
    p.add_argument("--out", default=os.path.join(harness.RESULTS, "throughput"), help="output folder")
    p.add_argument("--keep-run-dir", action="store_true", help="keep the trainer's run directory (path printed)")
    p.add_argument("--algo", choices=builtin_names(), default="ba3c",
                   help="the algorithm measured, with its default settings (docs/gorila.md for gorila)")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds, args.pipeline_seconds = 2.0, 10.0
    return args


def run_pipeline(cfg: Config, args: argparse.Namespace, trainer_flags: list[str]) -> Pipeline:
    tmp = tempfile.mkdtemp(prefix="ba3c-throughput-")
    run_dir = os.path.join(tmp, "run")
    try:
        return measure_pipeline(cfg, args.pipeline_seconds, args.warmup_frac, run_dir, trainer_flags)
    finally:
        if args.keep_run_dir:
            print(f"  trainer run directory kept: {run_dir}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def print_result(r: Throughput) -> None:
    print(f"\n{'stage':<34}{'rate /s':>12}")
    for name, v in (("E simulators (agent steps)", r.env_steps_per_s),
                    ("F predictor forward (samples)", r.forward_samples_per_s),
                    ("T learner train (samples)", r.train_samples_per_s),
                    ("C serial ceiling 1/(1/E+1/F+1/T)", r.ceiling_steps_per_s),
                    ("P trainer steady state (steps)", r.pipeline_steps_per_s)):
        print(f"{name:<34}{v:>12,.0f}")
    print(f"{'efficiency P / C':<34}{r.efficiency:>12.2f}")
    if r.samples_per_agent_step != 1.0:  # a replay ratio: T's samples are not agent steps
        print(f"{'updates/s (P)':<34}{r.updates_per_s:>12,.1f}")
        print(f"{'replay ratio (samples/step) kept':<34}{r.replay_ratio_measured:>12.2f}  "
              f"(configured {r.samples_per_agent_step:g}; T counts samples / {r.samples_per_agent_step:g} as steps)")
    print(f"{'trainer frames/s (4 x P)':<34}{r.frames_per_s:>12,.0f}")
    print("\ntrainer stage timers, share of steady-state wall time (simulation thread | learner thread):")
    st = r.pipeline["steady_stage_fraction_of_wall"]
    for keys in (("predict", "env", "experience", "queue_put_wait"), ("train", "queue_wait", "allreduce")):
        print("  " + "  ".join(f"{k} {st[k]:.0%}" for k in keys if k in st))
    print("trainer stage timers, whole run (including warm-up):")
    print("\n".join(r.pipeline["timer_table_whole_run"]))


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    harness.exit_on_sigterm()
    algo = algorithm(args.algo)
    cfg = Config().replace(algo=args.algo, **algo.defaults)
    spec = resolve_env(cfg.sim.env)
    ratio = api.samples_per_agent_step(cfg, spec.frames_per_step)  # train samples per agent step
    if spec.kind != "atari":
        raise SystemExit(f"throughput: needs an Atari env, got {cfg.sim.env}")
    configure_tensorflow(cfg)  # the trainer's thread settings, before TensorFlow starts
    # Logging only: rows often enough to find a steady window; quick runs also gather stats sooner.
    trainer_flags = ["--log-interval-s", "1"] + (["--stats-interval-updates", "5"] if args.quick else [])
    # the algorithm's start shortened (a replay's warm-up): the steady state after it is the same
    trainer_flags += ["--algo", args.algo, *algo.quick_start_flags]
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    mach = harness.machine()
    print(f"throughput: {mach['cores']} cores ({mach['cpu']}), {spec.name}, num_envs={cfg.sim.num_envs} "
          f"predict_batch={cfg.sim.predict_batch} train_batch={cfg.learn.train_batch}", flush=True)
    # E, F and T are measured for half of --seconds each before P and again after it, so that a
    # change in background load during the run shows up (JSON: stages_before_after) and averages out.
    _, obs_shape, num_actions = measure_env(cfg, spec, 0.0)
    fwd, trn = api.forward_step(cfg, obs_shape, num_actions), api.update_step(cfg, obs_shape, num_actions)

    def stages() -> dict[str, float]:
        out = {"E": measure_env(cfg, spec, args.seconds / 2)[0],
               "F": timed_rate(fwd, args.seconds / 2, warmup_calls=5),
               "T": timed_rate(trn, args.seconds / 2, warmup_calls=3) / ratio}  # in agent steps
        print("  " + "  ".join(f"{k} {v:,.0f}/s" for k, v in out.items()), flush=True)
        return out

    before = stages()
    pipe = run_pipeline(cfg, args, trainer_flags)
    pipe_steps = pipe.frames_per_s / spec.frames_per_step
    print(f"  P {pipe_steps:,.0f}/s", flush=True)
    after = stages()
    e, f, t = ((before[k] + after[k]) / 2 for k in ("E", "F", "T"))
    c = 1.0 / (1.0 / e + 1.0 / f + 1.0 / t)
    pipeline = {k: v for k, v in asdict(pipe).items() if k != "frames_per_s"}
    kept = pipe.updates_per_s * cfg.learn.train_batch / pipe_steps if ratio != 1.0 else 1.0
    result = Throughput(e, f, t * ratio, pipe_steps, c, pipe_steps / c, pipe.frames_per_s, pipeline,
                        {"before": before, "after": after}, mach, list(os.getloadavg()), date, args.quick,
                        args.seconds, args.pipeline_seconds, args.warmup_frac, cfg.to_dict(), trainer_flags,
                        " ".join([os.path.relpath(sys.executable, harness.ROOT), "-m", "benchmarks.throughput",
                                  *(argv if argv is not None else sys.argv[1:])]), note(args.warmup_frac),
                        args.algo, pipe.updates_per_s, ratio, kept)
    print_result(result)
    for k in ("env_steps_per_s", "forward_samples_per_s", "train_samples_per_s", "pipeline_steps_per_s"):
        v = getattr(result, k)
        if not (math.isfinite(v) and v > 0):
            raise RuntimeError(f"measured {k} = {v}")
    os.makedirs(args.out, exist_ok=True)
    name = "throughput" if args.algo == Config().learn.algo else f"throughput-{args.algo}"  # the default's unnamed
    with open(os.path.join(args.out, f"{name}.json"), "w") as fh:
        json.dump(asdict(result), fh, indent=2)
    plot({"E": e, "F": f, "T": t, "C": c, "P": pipe_steps}, result.efficiency, os.path.join(args.out, f"{name}.png"))
    print(f"\nthroughput: wrote {os.path.join(args.out, name + '.json')} and {name}.png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
