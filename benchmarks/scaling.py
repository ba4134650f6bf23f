"""Weak scaling of the full trainer, allreduce cost, a fitted update-time model and its projection.

    python -m benchmarks.scaling [--quick] [--ranks 1,2,4] [--seconds 25] [--out DIR] [-- TRAINER FLAGS]

1. Weak scaling (measured): for each rank count r, `mpirun -np r python -m ba3c.train` on Pong with
   a fixed per-rank config, in two layouts: `core` (one core, one thread per rank, ranks bound to
   disjoint cores) and `fat` (r ranks sharing all cores, cores/r threads each, as one rank per
   node or socket). Steady-state frames/s from the trainer's progress.csv after warm-up; the
   per-update time split from the trainer's own stage timers (rank 0).
2. Allreduce cost (measured): benchmarks/allreduce_probe.py at each r >= 2, Horovod and mpi4py.
3. Model (fitted, benchmarks/scaling_model.py): t_update(r) = t_compute + t_allreduce(r), with
   t_allreduce(r) = a + 2(r-1)/r * bytes / bandwidth + 2(r-1) * latency (ring allreduce),
   a, latency, bandwidth fitted to the sweep; t_compute from the 1-rank run.
4. Projection (modelled, labelled so): frames/s and weak-scaling efficiency for 1..128 nodes of --node-cores
   cores on 100 Gb/s InfiniBand and 10 GbE, per-node batch 32 and 64, by benchmarks/node_model.py's
   `update_time`, the one node model the planner uses too (its inputs: --node, --threads, this run's
   collection cost and Horovod fit, --shaped-links; each labelled in the JSON's `node_model`).
Minutes to a score per node count are the planner's (python -m benchmarks.plan, which make scaling-benchmark runs
next). Writes scaling.json and scaling.png in --out (default benchmarks/results/scaling), and prints a table.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks import node_model as nm
from benchmarks.scaling_results import (
    AllreduceSweep,
    Analysis,
    Measurement,
    ScalingData,
    analyze,
    to_json,
)
from measure import harness


@dataclass(frozen=True)
class Settings:
    """The per-rank trainer config and the timing of every run (one object, never changed)."""
    env: str
    num_envs: int
    predict_batch: int
    train_batch: int
    dist: str
    trainer_extra: tuple[str, ...]
    seconds: float
    warmup: float
    startup: float

    def config(self) -> dict[str, Any]:
        return {"env": self.env, "num_envs": self.num_envs, "predict_batch": self.predict_batch,
                "train_batch": self.train_batch, "seconds": self.seconds, "warmup": self.warmup, "dist": self.dist}


@dataclass(frozen=True)
class RunSpec:
    ranks: int
    threads: int
    layout: str  # core | fat | node | independent


def trainer_flags(s: Settings, threads: int) -> list[str]:
    return ["--env", s.env, "--total-frames", "1000000000", "--num-envs", str(s.num_envs),
            "--predict-batch", str(s.predict_batch), "--train-batch", str(s.train_batch),
            "--env-threads", str(threads), "--intra-op-threads", str(threads), "--inter-op-threads", "1",
            "--log-interval-s", "2", "--stats-interval-updates", "5", "--checkpoint-interval-min", "1000",
            "--lr-scaling", "none", *s.trainer_extra]


def trainer_job(spec: RunSpec, s: Settings, run_dir: str) -> tuple[harness.TrainerJob, bool]:
    independent = spec.layout == "independent"
    pre, over = harness.mpirun_prefix(spec.ranks, spec.threads, "core" if independent else spec.layout)
    train = harness.train_command(*trainer_flags(s, spec.threads))
    if independent:
        # The control: the same r processes, placed the same way, but no exchange at all (each its
        # own single-rank run). What they lose against one rank alone is the machine's, not ours.
        dirs = [os.path.join(run_dir, f"rank{i}") for i in range(spec.ranks)]
        cmd = pre + ["sh", "-c", f'exec "$@" --dist none --run-dir {run_dir}/rank$OMPI_COMM_WORLD_RANK', "sh", *train]
    else:
        dirs = [run_dir]
        cmd = pre + train + ["--run-dir", run_dir, "--dist", s.dist]
    # SIGUSR1: mpirun forwards it; the ranks agree, checkpoint and exit 75. Start-up (imports,
    # tracing; slow on a loaded machine) has its own cap; the window is timed by the trainer's rows.
    job = harness.TrainerJob(cmd, dirs, os.path.join(run_dir, "stdout.log"), signal.SIGUSR1,
                             startup_timeout_s=s.startup, run_timeout_s=s.warmup + s.seconds + 180)
    return job, over


def run_point(spec: RunSpec, s: Settings) -> Measurement:
    """One trainer run: steady frames/s of all ranks, updates/s and rank 0's split of an update."""
    run_dir = tempfile.mkdtemp(prefix=f"ba3c-scale-{spec.layout}{spec.ranks}-")
    job, over = trainer_job(spec, s, run_dir)
    run = harness.launch(job, harness.stop_after_logged(s.warmup + s.seconds))
    exchange = "none" if spec.layout == "independent" else "sync"
    common = dict(ranks=spec.ranks, layout=spec.layout, exchange=exchange,
                  threads_per_rank=spec.threads, oversubscribed=over, command=" ".join(job.command),
                  rows=len(run.rows[0]), dist_backend=_dist_backend(job.run_dirs[0]), startup_s=run.startup_s,
                  outcome=run.outcome)
    windows = [harness.steady_window(rows, s.warmup) for rows in run.rows]
    if any(w is None for w in windows):
        return Measurement(**common, error=f"{run.outcome}: too few steady progress rows\n{run.log_tail[-1500:]}")
    w = windows[0]
    updates = max(w.delta("updates"), 1)
    return Measurement(**common, frames_per_s=sum(x.frames_per_s for x in windows), updates_per_s=w.updates_per_s,
                       window_s=w.seconds,
                       ms_per_update_rank0={k: 1000 * v / updates for k, v in w.stage_seconds().items()})


def _dist_backend(run_dir: str) -> str | None:
    try:
        with open(os.path.join(run_dir, "meta.json")) as fh:
            return json.load(fh).get("dist_backend")
    except (OSError, ValueError):
        return None


def probe_allreduce(ranks: int, reps: int, layout: str) -> AllreduceSweep:
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    pre, _ = harness.mpirun_prefix(ranks, 1, "node" if layout == "node" else "core")
    cmd = pre + [sys.executable, "-m", "benchmarks.allreduce_probe", path, "--reps", str(reps)]
    p = subprocess.run(cmd, cwd=harness.ROOT, env=harness.child_env(), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return AllreduceSweep(ranks, error=(p.stdout + p.stderr)[-1500:])
    with open(path) as fh:
        return AllreduceSweep.from_json(json.load(fh))


def measure_models(seconds: float) -> dict[str, Any]:
    """Train-step samples/s of each network at batch 32 on one thread, in this process (for the projection)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from ba3c import api
    from ba3c.config import Config
    from ba3c.experience import TrainBatch

    rng = np.random.default_rng(0)
    b = TrainBatch(rng.integers(0, 255, (32, 4, 84, 84), dtype=np.uint8), rng.integers(0, 6, 32).astype(np.int32),
                   rng.normal(size=32).astype(np.float32), rng.normal(size=32).astype(np.float32))
    out: dict[str, Any] = {}
    for kind in ("nature", "paper"):
        learner = api.learner(Config(), (4, 84, 84), 6, lr=1e-4, kind=kind)
        model = learner.model
        learner.train(b)  # trace
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            learner.train(b)
            n += 1
        out[kind] = {"params": int(model.count_params()),
                     "train_samples_per_s_1thread": 32 * n / (time.perf_counter() - t0)}
    return out


def plan(args: argparse.Namespace, ranks: list[int]) -> list[RunSpec]:
    cores = harness.cores()
    layouts = args.layouts.split(",")
    out = []
    for r in ranks:
        for layout in layouts:
            threads = {"core": 1, "fat": max(cores // r, 1), "node": cores}[layout]
            if layout == "fat" and (threads == 1 or (r > 1 and r not in _ints(args.fat_ranks))):
                continue  # one thread each is the core layout
            out.append(RunSpec(r, threads, layout))
        if r in _ints(args.control_ranks) and r > 1 and "core" in layouts:
            out.append(RunSpec(r, 1, "independent"))
    return out


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def measure(args: argparse.Namespace, s: Settings, ranks: list[int], reps: int, data: ScalingData,
            save: Callable[[], None]) -> None:
    """Every planned trainer run, then the allreduce sweeps; `save()` after each (an interrupted run keeps them)."""
    for spec in plan(args, ranks):
        print(f"scaling: {spec.ranks} rank(s), {spec.layout} layout, {spec.threads} thread(s) each, "
              "...", flush=True)
        m = run_point(spec, s)
        data.measured.append(m)
        print(f"    frames/s {m.frames_per_s or float('nan'):.1f}, updates/s {m.updates_per_s or float('nan'):.2f}"
              + (f", start-up {m.startup_s:.0f} s" if m.startup_s is not None else "")
              + (f"\n    error: {m.error}" if m.error else ""), flush=True)
        save()
    layout = "node" if args.layouts == "node" else "core"
    for r in [r for r in ranks if r >= 2 and r in _ints(args.sweep_ranks)]:
        print(f"scaling: allreduce sweep at {r} ranks ...", flush=True)
        data.allreduce.append(probe_allreduce(r, reps, layout))
        save()


def plot(data: ScalingData, a: Analysis, path: str) -> None:
    plt = harness.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))

    def both(pts, style: str, label1: str, label2: str, **kw) -> None:
        if pts:
            rs = [p.m.ranks for p in pts]
            ax1.plot(rs, [p.m.frames_per_s for p in pts], style, label=label1, **kw)
            ax2.plot(rs, [np.nan if p.efficiency is None else p.efficiency for p in pts], style, label=label2, **kw)

    done = [p for p in a.scored if p.m.measured]
    for layout, marker in (("core", "o-"), ("fat", "s-")):
        label = f"measured, {layout} layout"
        both([p for p in done if p.m.layout == layout and p.m.exchange == "sync"], marker, label, label)
    both([p for p in done if p.m.layout == "independent"], "D", "control: r runs, no exchange",
         "control: r runs, no exchange (the machine's ceiling)", color="grey", ms=7)
    label = "measured, core, --exchange overlap (removed since)"
    both([p for p in done if p.m.exchange == "overlap"], "^", label, label, ms=9)
    base = data.base("core")
    if base:
        rmax = max(m.ranks for m in data.measured)
        rs = [r for r in (1, 2, 4, 8, 16, 32) if r <= max(rmax, 2)]
        ax1.plot(rs, [r * base.frames_per_s for r in rs], "k:", label="ideal (core layout)")
        if a.box_prediction:
            ax2.plot([p["ranks"] for p in a.box_prediction], [p["efficiency"] for p in a.box_prediction], "x--",
                     label="modelled (fit), this box")
    for key, net in a.networks.items():
        pts = [p for p in a.projection if p.network == key and p.per_node_batch == 32 and p.exchange == "sync"]
        if pts:
            ax2.plot([p.nodes for p in pts], [p.efficiency for p in pts], "--", alpha=0.7,
                     label=f"PROJECTED (node model), {net.name}, {pts[0].cores} cores, 32 per node")
    for ax, xlabel, ylabel in ((ax1, "ranks (measured)", "frames/s, all ranks"),
                               (ax2, "ranks / nodes", "weak-scaling efficiency")):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    ax2.set_ylim(0, 1.1)
    fig.suptitle(f"ba3c scaling on {data.machine['cores']} cores ({data.machine['cpu']}); dashed = modelled")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def _f(x: float | None, fmt: str) -> str:
    return format(float("nan") if x is None else x, fmt)


def report(a: Analysis, node_cores: int) -> None:
    print(f"\n{'ranks':>5} {'layout':>11} {'exch':>7} {'thr':>4} {'frames/s':>10} {'upd/s':>7} {'eff':>6} {'vs ctl':>6}"
          "  ms/update (rank 0)")
    for p in a.scored:
        m = p.m
        split = " ".join(f"{k}={v:.0f}" for k, v in sorted(m.ms_per_update_rank0.items()))
        print(f"{m.ranks:>5} {m.layout:>11} {m.exchange:>7} {m.threads_per_rank:>4} {_f(m.frames_per_s, '>10.0f')} "
              f"{_f(m.updates_per_s, '>7.2f')} {_f(p.efficiency, '>6.2f')} "
              f"{_f(p.efficiency_vs_control, '>6.2f')}  {split}")
    print("eff: frames/s over r x one rank's; vs ctl: over r exchange-free runs on the same cores (layout "
          "'independent'), i.e. what the exchange itself costs")
    for b, f in a.fits.items():
        if f:
            print(f"fit {b}: overhead {1e3 * f.overhead_s:.2f} ms, latency {1e6 * f.latency_s:.1f} us, "
                  f"bandwidth {f.bandwidth_bytes_per_s / 1e9:.2f} GB/s (modelled from {f.points} points)")
    if a.node_model is not None:
        n = a.node_model
        print(f"node model (benchmarks/node_model.py; the planner's too): fixed cost {1e3 * n.fixed_s.value:.2f} ms at "
              f"{n.threads} threads ({n.fixed_s.label}) -> {1e3 * n.fixed_at(node_cores):.2f} on {node_cores} (serial "
              f"fraction {n.serial.value:.2f}, {n.serial.label}); train {1e3 * n.train_s_per_sample.value:.4f} "
              f"ms/sample at {n.threads} threads ({n.train_s_per_sample.label}); collection "
              f"{1e3 * n.collect_s_per_sample_core.value:.2f} ms/sample/core ({n.collect_s_per_sample_core.label})")
    for pr in a.projection:
        if pr.nodes == 64 and pr.per_node_batch == 32:
            print(f"PROJECTED 64 nodes x {pr.cores} cores, {pr.network_name}, {pr.exchange} exchange, global batch "
                  f"2048: {pr.frames_per_s:,.0f} frames/s, weak-scaling efficiency {pr.efficiency:.2f} (ms per update: "
                  f"fixed {pr.fixed_ms:.2f}, train {pr.train_ms:.2f}, collection {pr.collect_ms:.2f}, exchange "
                  f"{pr.exchange_ms:.2f})")
    for pt in (a.prediction_from or {}).get("points", []):
        print(f"model from {a.prediction_from['file']}: {pt['ranks']} ranks predicted {pt['predicted']:.2f}, "
              f"measured {pt['measured']:.2f} (error {pt['error']:+.2f})")
    print("minutes to a score per node count: python -m benchmarks.plan (the same node model)")


def parse(argv: list[str] | None) -> tuple[argparse.ArgumentParser, argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="ranks 1 and 2, short windows (smoke test, a few minutes)")
    p.add_argument("--ranks", default="", help="comma list (default: 1,2,4,... up to the core count)")
    p.add_argument("--layouts", default="core,fat",
                   help="core (1 thread per rank), fat (cores/r threads per rank), node (cluster: one rank per node, "
                        "all its cores)")
    p.add_argument("--fat-ranks", default="1,2,4,8", help="rank counts measured in the fat layout")
    p.add_argument("--control-ranks", default="2,16",
                   help="rank counts also run as the no-exchange control: r independent single-rank runs placed "
                        "like the core layout (what the machine itself loses when r cores are busy)")
    p.add_argument("--sweep-ranks", default="2,4,8,16,32,64", help="rank counts for the allreduce sweep")
    p.add_argument("--seconds", type=float, default=30.0, help="measurement window per run, after warm-up")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of progress rows discarded as warm-up")
    p.add_argument("--startup", type=float, default=600.0,
                   help="cap on a run's start-up (launch to the first progress row of every rank), seconds")
    p.add_argument("--reps", type=int, default=20, help="allreduce repetitions per size")
    p.add_argument("--env", default="pong")
    p.add_argument("--dist", default="auto", choices=("auto", "horovod", "mpi", "none"),
                   help="the trainer's --dist (none: 1 rank only)")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--predict-batch", type=int, default=8)
    p.add_argument("--train-batch", type=int, default=32)
    p.add_argument("--node-cores", type=int, default=24, help="cores of the projected node (paper: 24)")
    p.add_argument("--out", default=os.path.join(harness.RESULTS, "scaling"))
    p.add_argument("--name", default="scaling", help="output file stem")
    p.add_argument("--node", default=nm.NODE_FILE,
                   help="the train step timed on a many-core machine (step_time.json layout): the node model's anchor")
    p.add_argument("--threads", default=nm.THREADS_FILE,
                   help="the fixed cost at 1 and 2 threads (step_time.json layout): its serial fraction")
    p.add_argument("--shaped-links", default=nm.SHAPED_LINKS_FILE,
                   help="the shaped-link study's Horovod JSON (TCP's fraction of line rate)")
    p.add_argument("--exposed", default="",
                   help="measured exposed share of the exchange per mode, NAME=SHARE[,...] (e.g. from the exchange "
                        "benchmark): adds projection rows t = compute + share x exchange")
    p.add_argument("--fit-from", default="",
                   help="a scaling.json whose fitted model predicts this machine (error reported)")
    p.add_argument("--analyze-only", default="",
                   help="re-analyse and re-plot saved JSON instead of measuring (comma list: merged, e.g. one per "
                        "cluster job)")
    args, extra = p.parse_known_args(argv)
    return p, args, [a for a in extra if a != "--"]  # after `--`: more ba3c.train flags for every run


def check_trainer_flags(p: argparse.ArgumentParser, flags: list[str]) -> None:
    """A bad trainer flag: say so now, not after the first mpirun."""
    check = subprocess.run([sys.executable, "-c", "import sys; from ba3c.train import resolve; resolve(sys.argv[1:])",
                            *flags], cwd=harness.ROOT, env=harness.child_env(), capture_output=True, text=True)
    if check.returncode != 0:
        p.error(f"trainer flags {' '.join(flags)}: {check.stderr.strip().splitlines()[-1]}")


def load(paths: str) -> ScalingData:
    """One saved file, or several (e.g. one per cluster job) merged."""
    data = None
    for path in paths.split(","):
        with open(path) as fh:
            more = ScalingData.from_json(json.load(fh))
        data = more if data is None else data.merged(more)
    return data.sorted()


def run_measurements(args: argparse.Namespace, extra: list[str], json_path: str) -> ScalingData:
    if args.quick:
        ranks, seconds, warmup, reps = [1, 2], 10.0, 4.0, 5
    else:
        ranks = _ints(args.ranks) or [r for r in (1, 2, 4, 8, 16, 32, 64) if r <= harness.cores()]
        seconds, warmup, reps = args.seconds, args.warmup, args.reps
    s = Settings(args.env, args.num_envs, args.predict_batch, args.train_batch, args.dist, tuple(extra),
                 seconds, warmup, args.startup)
    data = ScalingData(harness.machine(), harness.now(), s.config())

    def save() -> None:  # after every step, so an interrupted run keeps what it measured
        with open(json_path, "w") as fh:
            json.dump(to_json(data, None), fh, indent=1)

    measure(args, s, ranks, reps, data, save)
    print("scaling: train-step rate of each network (for the projection) ...", flush=True)
    data.models = measure_models(3.0 if args.quick else 8.0)
    save()
    return data


def _exposed(p: argparse.ArgumentParser, text: str) -> dict[str, float]:
    out = {}
    for item in (x for x in text.split(",") if x):
        name, _, share = item.partition("=")
        try:
            out[name] = float(share)
        except ValueError:
            p.error(f"--exposed {item}: expected NAME=SHARE with SHARE a number in [0, 1], e.g. in-graph=0.3")
        if not 0.0 <= out[name] <= 1.0:
            p.error(f"--exposed {item}: SHARE must be in [0, 1]")
    return out


def main(argv: list[str] | None = None) -> int:
    p, args, extra = parse(argv)
    harness.exit_on_sigterm()
    if extra:
        check_trainer_flags(p, extra)
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, f"{args.name}.json")
    envelope = None  # benchmarks/plan.py writes this block into the file (make scaling-benchmark reruns it after)
    if os.path.exists(json_path):
        with open(json_path) as fh:
            envelope = json.load(fh).get("time_to_score_envelope")
    data = load(args.analyze_only) if args.analyze_only else run_measurements(args, extra, json_path)
    other = None
    if args.fit_from and os.path.exists(args.fit_from):
        with open(args.fit_from) as fh:
            other = json.load(fh)
    exposed = _exposed(p, args.exposed)
    a = analyze(data, args.node_cores, other, args.fit_from, exposed, args.node, args.threads,
                nm.load_json(args.shaped_links))
    out = to_json(data, a)
    if exposed:
        out["projection_exposed"] = {
            "shares": exposed, "modelled": True,
            "note": "--exposed: each mode's exposed share of the exchange (e.g. studies/exchange's "
                    "projection_input, measured on one box at 2 ranks), applied to the modelled allreduce at every "
                    "node count and network: t = t_compute + share x t_allreduce. That the share carries over from "
                    "the box to a cluster is an assumption."}
    if envelope:
        out["time_to_score_envelope"] = envelope
    with open(json_path, "w") as fh:
        json.dump(out, fh, indent=1)
    try:
        plot(data, a, os.path.join(args.out, f"{args.name}.png"))
    except ImportError as e:  # e.g. a bare benchmark machine: re-plot elsewhere with --analyze-only
        print(f"scaling: no plot ({e})")
    report(a, args.node_cores)
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
