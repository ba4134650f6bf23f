"""Throughput of each pipeline stage alone and of the whole trainer, measured in one run.

    python benchmarks/throughput.py [--seconds 20] [--pipeline-seconds 60] [--quick] [--out DIR]

With the default config (`ba3c.config.Config()`: pong, Nature CNN) on this machine's cores:

* E  simulators alone: AtariSimulator in async mode, random actions, agent steps/s;
* F  predictor forward (+ action sampling) alone at predict_batch, samples/s;
* T  learner train step alone at train_batch, single process, samples/s;
* P  `python -m ba3c.train` as a child process, steady-state agent steps/s from its progress.csv
     (start-up to its first row and the first `--warmup-frac` of the time after it are dropped).

E, F and T are each measured for half of --seconds before P and half after it, and averaged.
One agent step = one predictor sample = one train sample, so the stages are comparable. If the
three stages ran one after another on all cores, the rate would be C = 1/(1/E + 1/F + 1/T);
efficiency = P / C (above 1 means the trainer overlaps stages better than strictly serial).
Writes DIR/throughput.json and DIR/throughput.png (DIR: benchmarks/results).
"""
from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import math
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)  # run as a script from anywhere: ba3c is not installed into the venv

from ba3c.config import Config  # noqa: E402
from ba3c.runner import configure_tensorflow, cores_available  # noqa: E402
from ba3c.simulators import AtariSimulator, EnvSpec, resolve_env  # noqa: E402
from scaling import cpu_model  # noqa: E402  (benchmarks/ is on sys.path when run as a script)


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
    sim = AtariSimulator(spec, s.num_envs, s.predict_batch, s.env_threads or cores_available(), s.max_episode_frames)
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


def forward_step(cfg: Config, obs_shape: tuple[int, ...], num_actions: int) -> Callable[[], int]:
    """F: compiled forward pass at predict_batch plus action sampling (the trainer's 'predict' stage)."""
    from ba3c.model import build_model, resolve_model_kind
    from ba3c.predictor import Predictor, sample_actions

    model = build_model(resolve_model_kind(cfg.learn.model, obs_shape), obs_shape, num_actions, cfg.sim.seed)
    predictor = Predictor(model, obs_shape, np.dtype(np.uint8))
    rng = np.random.default_rng(0)
    obs = rng.integers(0, 256, size=(cfg.sim.predict_batch, *obs_shape), dtype=np.uint8)

    def step() -> int:
        logits, _ = predictor(obs)
        return len(sample_actions(logits, rng))

    return step


def train_step(cfg: Config, obs_shape: tuple[int, ...], num_actions: int) -> Callable[[], int]:
    """T: one Adam update on train_batch random samples, single process (`Dist()`)."""
    from ba3c.config import scaled_lr
    from ba3c.dist import Dist
    from ba3c.experience import TrainBatch
    from ba3c.learner import Learner
    from ba3c.model import build_model, resolve_model_kind

    l = cfg.learn
    model = build_model(resolve_model_kind(l.model, obs_shape), obs_shape, num_actions, cfg.sim.seed)
    lr = scaled_lr(cfg, 1)
    learner = Learner(model, l, Dist(), lr, l.warmup_updates if lr > l.lr else 0)
    rng = np.random.default_rng(0)
    n = l.train_batch
    batch = TrainBatch(rng.integers(0, 256, size=(n, *obs_shape), dtype=np.uint8),
                       rng.integers(num_actions, size=n, dtype=np.int32),
                       rng.normal(size=n).astype(np.float32), rng.normal(size=n).astype(np.float32))

    def step() -> int:
        learner.train(batch)
        return n

    return step


# ---------------------------------------------------------------- the whole trainer

def read_progress(path: str) -> list[dict[str, str]]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as fh:
        return [r for r in csv.DictReader(fh) if r.get("time_s") and r.get("frames")]


def steady_window(rows: list[dict[str, str]], warmup_frac: float) -> tuple[int, int]:
    """Indices (first, last) of the steady-state window of progress rows.

    Warm-up is everything up to the first row (start-up, graph tracing) plus `warmup_frac` of the
    time logged after it; the window runs from the first row at or past that point to the last row.
    """
    if len(rows) < 3:
        raise RuntimeError(f"the trainer logged {len(rows)} progress row(s); run it longer (--pipeline-seconds)")
    times = [float(r["time_s"]) for r in rows]
    cut = times[0] + warmup_frac * (times[-1] - times[0])
    first = next(k for k, t in enumerate(times) if t >= cut)
    return min(first, len(rows) - 2), len(rows) - 1  # at least one interval


def measure_pipeline(cfg: Config, seconds: float, warmup_frac: float, run_dir: str,
                     extra: list[str]) -> dict[str, Any]:
    """P: run `python -m ba3c.train` for `seconds` after its first progress row, stop it with SIGTERM."""
    cmd = [sys.executable, "-m", "ba3c.train", "--env", cfg.sim.env, "--run-dir", run_dir, "--dist", "none",
           "--total-frames", str(10**10), "--checkpoint-interval-min", "1000", *extra]
    log_path = os.path.join(run_dir, "trainer.log")
    os.makedirs(run_dir, exist_ok=True)
    progress = os.path.join(run_dir, "progress.csv")
    t_launch = time.time()
    with open(log_path, "w") as log:
        child = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            t_first = None
            while child.poll() is None:
                time.sleep(0.5)
                if t_first is None and read_progress(progress):
                    t_first = time.time()
                if t_first is not None and time.time() - t_first >= seconds:
                    break
                if t_first is None and time.time() - t_launch > 300:
                    raise RuntimeError(f"the trainer wrote no progress in 300 s; see {log_path}")
            child.send_signal(signal.SIGTERM)  # it checkpoints at its next sync point and exits 75
            rc = child.wait(timeout=120)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
    if rc not in (0, 75):
        with open(log_path) as fh:
            raise RuntimeError(f"trainer exited {rc}:\n{fh.read()[-3000:]}")
    rows = read_progress(progress)
    i, j = steady_window(rows, warmup_frac)
    t0, t1 = float(rows[i]["time_s"]), float(rows[j]["time_s"])
    f0, f1 = int(float(rows[i]["frames"])), int(float(rows[j]["frames"]))
    # Share of the steady window's wall time each stage took (each thread's shares add up to ~1),
    # from the cumulative t_* stage seconds in progress.csv (as benchmarks/scaling.py reads them).
    steady_stages = {k[2:]: round((float(rows[j][k]) - float(rows[i][k] or 0)) / (t1 - t0), 3)
                     for k in rows[j] if k.startswith("t_") and rows[j][k]}
    with open(log_path) as fh:
        timer_table = [ln.rstrip() for ln in fh if ln.startswith(("stage (rank 0)", "  simulation", "  learner"))]
    return {"frames_per_s": (f1 - f0) / (t1 - t0), "rows_total": len(rows), "steady_rows": [i, j],
            "steady_window_s": [t0, t1], "steady_stage_fraction_of_wall": steady_stages,
            "timer_table_whole_run": timer_table, "command": " ".join(["python", *cmd[1:]])}


# ---------------------------------------------------------------- report

def machine() -> dict[str, Any]:
    return {"cores": cores_available(), "cpu_model": cpu_model(), "hostname": platform.node(),
            "python": platform.python_version(), "load_avg_at_start": list(os.getloadavg())}


def plot(rates: dict[str, float], efficiency: float, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=20.0, help="seconds per stage measurement (E, F, T), half before P and half after it")
    p.add_argument("--pipeline-seconds", type=float, default=60.0,
                   help="seconds the trainer runs after its first progress row (P)")
    p.add_argument("--warmup-frac", type=float, default=0.2, help="leading fraction of the trainer's run excluded")
    p.add_argument("--quick", action="store_true", help="short smoke run (about a minute; numbers are rough)")
    p.add_argument("--out", default=os.path.join(REPO, "benchmarks", "results"), help="output folder")
    p.add_argument("--keep-run-dir", action="store_true", help="keep the trainer's run directory (path printed)")
    args = p.parse_args(argv)
    if args.quick:
        args.seconds, args.pipeline_seconds = 2.0, 10.0

    cfg = Config()
    spec = resolve_env(cfg.sim.env)
    if spec.kind != "atari":
        raise SystemExit(f"throughput: needs an Atari env, got {cfg.sim.env}")
    configure_tensorflow(cfg)  # the trainer's thread settings, before TensorFlow starts
    # Logging only: rows often enough to find a steady window; quick runs also gather stats sooner.
    trainer_flags = ["--log-interval-s", "1"] + (["--stats-interval-updates", "5"] if args.quick else [])

    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    mach = machine()
    print(f"throughput: {mach['cores']} cores ({mach['cpu_model']}), {spec.name}, num_envs={cfg.sim.num_envs} "
          f"predict_batch={cfg.sim.predict_batch} train_batch={cfg.learn.train_batch}", flush=True)
    # E, F and T are measured for half of --seconds each before P and again after it, so that a
    # change in background load during the run shows up (JSON: stages_before_after) and averages out.
    _, obs_shape, num_actions = measure_env(cfg, spec, 0.0)
    fwd, trn = forward_step(cfg, obs_shape, num_actions), train_step(cfg, obs_shape, num_actions)

    def stages() -> dict[str, float]:
        out = {"E": measure_env(cfg, spec, args.seconds / 2)[0],
               "F": timed_rate(fwd, args.seconds / 2, warmup_calls=5),
               "T": timed_rate(trn, args.seconds / 2, warmup_calls=3)}
        print("  " + "  ".join(f"{k} {v:,.0f}/s" for k, v in out.items()), flush=True)
        return out

    before = stages()
    tmp = tempfile.mkdtemp(prefix="ba3c-throughput-")
    run_dir = os.path.join(tmp, "run")
    try:
        pipe = measure_pipeline(cfg, args.pipeline_seconds, args.warmup_frac, run_dir, trainer_flags)
    finally:
        if args.keep_run_dir:
            print(f"  trainer run directory kept: {run_dir}", flush=True)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    pipe_steps = pipe["frames_per_s"] / spec.frames_per_step
    print(f"  P {pipe_steps:,.0f}/s", flush=True)
    after = stages()
    e, f, t = ((before[k] + after[k]) / 2 for k in ("E", "F", "T"))
    mach["load_avg_at_end"] = list(os.getloadavg())
    c = 1.0 / (1.0 / e + 1.0 / f + 1.0 / t)
    eff = pipe_steps / c

    print(f"\n{'stage':<34}{'rate /s':>12}")
    for name, v in (("E simulators (agent steps)", e), ("F predictor forward (samples)", f),
                    ("T learner train (samples)", t), ("C serial ceiling 1/(1/E+1/F+1/T)", c),
                    ("P trainer steady state (steps)", pipe_steps)):
        print(f"{name:<34}{v:>12,.0f}")
    print(f"{'efficiency P / C':<34}{eff:>12.2f}")
    print(f"{'trainer frames/s (4 x P)':<34}{pipe['frames_per_s']:>12,.0f}")
    print("\ntrainer stage timers, share of steady-state wall time (simulation thread | learner thread):")
    sim_keys, learn_keys = ("predict", "env", "experience", "queue_put_wait"), ("train", "queue_wait", "allreduce")
    st = pipe["steady_stage_fraction_of_wall"]
    for keys in (sim_keys, learn_keys):
        print("  " + "  ".join(f"{k} {st[k]:.0%}" for k in keys if k in st))
    print("trainer stage timers, whole run (including warm-up):")
    print("\n".join(pipe["timer_table_whole_run"]))

    result: dict[str, Any] = {
        "env_steps_per_s": e, "forward_samples_per_s": f, "train_samples_per_s": t,
        "pipeline_steps_per_s": pipe_steps, "ceiling_steps_per_s": c, "efficiency": eff,
        "frames_per_s": pipe["frames_per_s"],
        "pipeline": {k: v for k, v in pipe.items() if k != "frames_per_s"},
        "stages_before_after": {"before": before, "after": after},
        "machine": mach, "date": date, "quick": args.quick,
        "seconds_per_stage": args.seconds, "pipeline_seconds": args.pipeline_seconds, "warmup_frac": args.warmup_frac,
        "config": cfg.to_dict(), "trainer_extra_flags": trainer_flags,
        "command": " ".join([os.path.relpath(sys.executable, REPO), "benchmarks/throughput.py",
                             *(argv if argv is not None else sys.argv[1:])]),
        "note": ("E, F, T and P were measured in one run on the same machine (E, F, T as the mean of a measurement "
                 "before and one after P); compare ratios, not absolute rates, across machines or runs. E, F, T "
                 "each use all cores alone; C assumes the stages "
                 "run serially; P is the trainer's steady state (frames_per_s / 4), excluding its start-up to the "
                 f"first progress row and the first {args.warmup_frac:.0%} of the time logged after it."),
    }
    for k in ("env_steps_per_s", "forward_samples_per_s", "train_samples_per_s", "pipeline_steps_per_s"):
        if not (math.isfinite(result[k]) and result[k] > 0):
            raise RuntimeError(f"measured {k} = {result[k]}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "throughput.json"), "w") as fh:
        json.dump(result, fh, indent=2)
    plot({"E": e, "F": f, "T": t, "C": c, "P": pipe_steps}, eff, os.path.join(args.out, "throughput.png"))
    print(f"\nthroughput: wrote {os.path.join(args.out, 'throughput.json')} and throughput.png", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
