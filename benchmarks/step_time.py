"""The time of one update against the per-rank batch: the node model for splitting a global batch.

    python -m benchmarks.step_time [--threads 1,2] [--batches 4,8,16,32,64,128,256] [--rounds 5]
            [--repeats 2] [--quick] [--out benchmarks/results/step_time] [--analyze-only FILE]

What runs: the product's own learner (`ba3c.learner.Learner`, Nature CNN, Adam, one-rank `Dist`, so
no exchange) on synthetic Pong-shaped batches (uint8 4x84x84 observations, 6 actions), timed per
`Learner.train` call, the wall time a trainer's update takes (host-to-tensor copies, the compiled
step, the losses read back). One worker process per TensorFlow thread count (intra-op T, inter-op 1,
as the scaling benchmark's runs): it traces every batch size, then times them in `--rounds` rounds,
the batch sizes in a new random order each round, so that a slow spell of a shared machine falls on
all of them; each cell is the median of as many calls as fill `--cell-seconds`. The workers run one
after the other, thread counts alternating, `--repeats` times. A batch of 1 (`--tiny`) is timed
alongside: almost nothing but the fixed cost of an update.

What it derives (benchmarks/scaling_model.py `fit_step_time`, labelled fitted): per thread count,
t(b) = a + c x b fitted to the medians (least squares on relative error, so that the small batches
count as much as the large), i.e. a fixed per-update overhead `a` (framework, host round-trips,
Python) and a compute term proportional to the batch; each point's split into the two, and the fit's
error at every measured batch. At one rank the exchange's exposed part is 0; for N nodes
benchmarks/plan.py adds it from the measured link model.

Writes OUT/step_time.json and OUT/step_time.png and prints the table. The spread given is the
range of the per-round medians over all rounds and repeats.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks import scaling_model as sm
from measure import harness

OUT = os.path.join(harness.RESULTS, "step_time")
BATCHES = (4, 8, 16, 32, 64, 128, 256)
OBS_SHAPE, ACTIONS = (4, 84, 84), 6  # Pong after the standard preprocessing


def parse_ints(text: str, what: str) -> list[int]:
    """A comma list of positive integers, or SystemExit(2) with one line naming the flag."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        out = []
    if not out or min(out) < 1:
        print(f"step_time: {what} {text!r}: expected a comma list of positive integers, e.g. 1,2", file=sys.stderr)
        raise SystemExit(2)
    return out


# ---------------------------------------------------------------- the worker (one TF thread count)

def worker(threads: int, batches: Sequence[int], rounds: int, cell_s: float, seed: int) -> dict[str, Any]:
    """Time Learner.train at every batch in `batches`, `rounds` times in shuffled order (in this process)."""
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from ba3c import api
    from ba3c.config import Config, LearnConfig
    from ba3c.experience import TrainBatch

    rng = np.random.default_rng(seed)

    def batch(b: int) -> TrainBatch:
        return TrainBatch(rng.integers(0, 255, (b, *OBS_SHAPE), dtype=np.uint8),
                          rng.integers(0, ACTIONS, b).astype(np.int32),
                          rng.normal(size=b).astype(np.float32), rng.normal(size=b).astype(np.float32))

    learner = api.plain_learner(api.network(Config(), OBS_SHAPE, ACTIONS, kind="nature", seed=0), LearnConfig(), 1e-4)
    # Two parts of the fixed cost, timed beside the updates: the optimizer alone (the learner's own compiled
    # clipping + Adam on gradient-shaped tensors: work in proportion to the parameters, not the batch) and
    # one call of a trivial compiled function read back to the host (TensorFlow's dispatch floor).
    grads = [tf.constant(rng.normal(scale=1e-3, size=v.shape).astype(np.float32))
             for v in learner.model.trainable_variables]
    trivial = tf.function(lambda x: x + 1.0)
    one = tf.constant(1.0)
    data = {b: batch(b) for b in batches}
    call: dict[int | str, Callable[[], Any]] = {b: (lambda b=b: learner.train(data[b])) for b in batches}
    call["optimizer"] = lambda: float(api.update_parts(learner).optimizer(grads))
    call["dispatch"] = lambda: float(trivial(one))
    calls: dict[int | str, int] = {}
    for key, fn in call.items():  # trace each shape, then size its cell from the last of a few calls
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
        calls[key] = max(3, min(200, math.ceil(cell_s / max(dt, 1e-6))))
    cells = []
    load0 = os.getloadavg()[0]
    keys = list(call)
    for r in range(rounds):
        for i in rng.permutation(len(keys)).tolist():
            key, times = keys[i], []
            cpu0 = time.process_time()
            for _ in range(calls[key]):
                t0 = time.perf_counter()
                call[key]()
                times.append(time.perf_counter() - t0)
            cells.append({"round": r, "batch": key, "calls": calls[key], "median_s": float(np.median(times)),
                          "min_s": min(times), "cpu_s_per_call": (time.process_time() - cpu0) / calls[key]})
    return {"threads": threads, "seed": seed, "load_avg_start": load0, "load_avg_end": os.getloadavg()[0],
            "cells": cells}


def run_worker(threads: int, batches: Sequence[int], rounds: int, cell_s: float, seed: int) -> dict[str, Any]:
    fd, path = tempfile.mkstemp(suffix=".json", prefix="ba3c-step-time-")
    os.close(fd)
    cmd = [sys.executable, "-m", "benchmarks.step_time", "--worker", str(threads), "--batches",
           ",".join(map(str, batches)), "--rounds", str(rounds), "--cell-seconds", str(cell_s),
           "--seed", str(seed), "--worker-out", path]
    try:
        p = subprocess.run(cmd, cwd=harness.ROOT, env=harness.child_env(), capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"worker ({threads} threads) exit {p.returncode}: {(p.stdout + p.stderr)[-1500:]}")
        with open(path) as fh:
            return json.load(fh)
    finally:
        os.unlink(path)


# ---------------------------------------------------------------- analysis (no TensorFlow)

def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    i = q * (len(s) - 1)
    lo, hi = math.floor(i), math.ceil(i)
    return s[lo] + (s[hi] - s[lo]) * (i - lo)


# What each fit is made to. `cpu`: the worker's CPU time per call, made only at 1 thread, where it is the wall
# time of an undisturbed core (the process's CPU time is not stolen by other work, as its wall time is).
ESTIMATES = {"median": "median_s", "least_disturbed": "min_s", "cpu": "cpu_s_per_call"}


def summarise(runs: Sequence[dict[str, Any]], tiny: int) -> dict[str, Any]:
    """Per thread count: each batch's median over all rounds and repeats with its range, and fits of
    t = a + c b over the batches other than `tiny`: to the medians (`median`: what this shared machine
    gave), to each batch's fastest round (`least_disturbed`) and, at 1 thread, to the median CPU time per
    call (`cpu`: a dedicated core's wall time); each batch's split by each and the fits' errors; and the
    median fit made on each repeat alone (how much a and c move)."""
    out: dict[str, Any] = {}
    for threads in sorted({r["threads"] for r in runs}):
        mine = [r for r in runs if r["threads"] == threads]
        cells = [c for r in mine for c in r["cells"]]

        def stats(key: int | str, cells: list[dict[str, Any]] = cells) -> dict[str, Any]:
            xs = [c["median_s"] for c in cells if c["batch"] == key]
            return {"median_s": _quantile(xs, 0.5), "min_s": min(xs), "max_s": max(xs),
                    "q25_s": _quantile(xs, 0.25), "q75_s": _quantile(xs, 0.75), "rounds": len(xs),
                    "cpu_s_per_call": _quantile([c["cpu_s_per_call"] for c in cells if c["batch"] == key], 0.5)}

        per_batch = {b: stats(b) for b in sorted({c["batch"] for c in cells if isinstance(c["batch"], int)})}
        parts = {k: stats(k) for k in ("optimizer", "dispatch") if any(c["batch"] == k for c in cells)}
        fits = {}
        for name, key in ESTIMATES.items():
            if name == "cpu" and threads != 1:
                continue  # CPU time sums the threads: not a wall time
            fit = sm.fit_step_time([(b, v[key]) for b, v in per_batch.items() if b != tiny])
            fits[name] = fit.to_json() if fit else None
            for b, v in per_batch.items():
                if fit:
                    v[name] = {"overhead_s": fit.overhead_s, "compute_s": fit.per_sample_s * b, "exchange_s": 0.0,
                               "model_s": fit.seconds(b), "error": sm.relative_error(fit.seconds(b), v[key])}
        by_repeat = []
        for r in mine:
            batches = sorted({c["batch"] for c in r["cells"] if isinstance(c["batch"], int)} - {tiny})
            row: dict[str, Any] = {"seed": r["seed"], "load_avg_start": r["load_avg_start"]}
            for name, key in (("median", "median_s"), ("cpu", "cpu_s_per_call")):
                f = sm.fit_step_time([(b, _quantile([c[key] for c in r["cells"] if c["batch"] == b], 0.5))
                                      for b in batches]) if name == "median" or threads == 1 else None
                if f:
                    row[name] = f.to_json()
            by_repeat.append(row)
        out[str(threads)] = {
            "batches": {str(b): v for b, v in per_batch.items()},
            "fits": fits,
            "fit_by_repeat": by_repeat,
            # the fixed cost's measured parts: clipping + Adam alone, and a trivial compiled call (dispatch)
            "parts": parts,
            "tiny_batch": tiny if tiny in per_batch else None,
            "load_avg": [[r["load_avg_start"], r["load_avg_end"]] for r in mine],
        }
    return out


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{1e3 * x:.1f}"


def report(summary: dict[str, Any]) -> None:
    print("\nLearner.train per update, ms (Nature CNN, Adam, one rank: no exchange). median: over all rounds and "
          "repeats (range: min-max of the rounds); fastest: the least-disturbed round; cpu: the process's CPU time "
          "per call; split and fit error by the fit t = a + c x b (fitted) to the CPU times at 1 thread (there the "
          "wall time of an undisturbed core), to the fastest rounds at more threads")
    print(f"{'threads':>7} {'batch':>5} {'median':>7} {'range':>13} {'fastest':>7} {'cpu':>6} {'a':>6} {'c x b':>6} "
          f"{'fit':>6} {'error':>6} | median fit error")
    for threads, s in summary.items():
        for b, v in s["batches"].items():
            ld, md = v.get("cpu") or v.get("least_disturbed", {}), v.get("median", {})
            err = "-" if not ld else format(ld["error"], "+.0%")
            print(f"{threads:>7} {b:>5} {_ms(v['median_s']):>7} {_ms(v['min_s']) + '-' + _ms(v['max_s']):>13} "
                  f"{_ms(v['min_s']):>7} {_ms(v['cpu_s_per_call']):>6} {_ms(ld.get('overhead_s')):>6} "
                  f"{_ms(ld.get('compute_s')):>6} {_ms(ld.get('model_s')):>6} {err:>6} | "
                  f"{'-' if not md else format(md['error'], '+.0%')}")
        parts = s.get("parts", {})
        if parts:
            print(f"        parts of the fixed cost, timed alone (median / fastest round): clipping + Adam "
                  f"{_ms(parts['optimizer']['median_s'])} / {_ms(parts['optimizer']['min_s'])} ms, a trivial "
                  f"compiled call {_ms(parts['dispatch']['median_s'])} / {_ms(parts['dispatch']['min_s'])} ms")
        for name, f in s["fits"].items():
            if f:
                print(f"        fit to the {name.replace('_', '-')} times, {threads} thread(s): a = "
                      f"{1e3 * f['overhead_s']:.2f} ms, c = {1e3 * f['per_sample_s']:.3f} ms/sample "
                      f"({f['samples_per_s_asymptotic']:,.0f} samples/s at large batch), largest |error| "
                      f"{f['max_abs_error']:.1%}")
        for name in ("median", "cpu"):
            reps = "; ".join(f"a {1e3 * r[name]['overhead_s']:.1f} ms, c {1e3 * r[name]['per_sample_s']:.3f} ms"
                             for r in s["fit_by_repeat"] if name in r)
            if reps:
                print(f"        {name} fit per repeat: {reps}")


def plot(summary: dict[str, Any], path: str) -> None:
    plt = harness.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for threads, s in summary.items():
        bs = [int(b) for b in s["batches"]]
        med = [1e3 * v["median_s"] for v in s["batches"].values()]
        lo = [m - 1e3 * v["min_s"] for m, v in zip(med, s["batches"].values())]
        hi = [1e3 * v["max_s"] - m for m, v in zip(med, s["batches"].values())]
        line = ax1.errorbar(bs, med, yerr=[lo, hi], fmt="o", capsize=3, label=f"measured, {threads} thread(s)")
        ax2.plot(bs, [b / (m / 1e3) for b, m in zip(bs, med)], "o-", color=line[0].get_color(),
                 label=f"measured, {threads} thread(s)")
        ax1.plot(bs, [1e3 * v["min_s"] for v in s["batches"].values()], "v", color=line[0].get_color(), ms=4,
                 label=f"fastest round, {threads} thread(s)")
        if s["fits"].get("cpu"):
            ax1.plot(bs, [1e3 * v["cpu_s_per_call"] for v in s["batches"].values()], "P", color=line[0].get_color(),
                     ms=5, label=f"CPU time per call, {threads} thread")
        name = "cpu" if s["fits"].get("cpu") else "least_disturbed"
        f = s["fits"].get(name)
        if f:
            ax1.plot(bs, [1e3 * (f["overhead_s"] + f["per_sample_s"] * x) for x in bs], "--", color=line[0].get_color(),
                     label=f"fit to the {'CPU times' if name == 'cpu' else 'fastest rounds'}: "
                           f"a {1e3 * f['overhead_s']:.1f} "
                           f"ms, c {1e3 * f['per_sample_s']:.2f} ms/sample")
    for ax, ylabel in ((ax1, "ms per update"), (ax2, "samples/s")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("per-rank batch")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ax1.set_title("Learner.train per update (median, min-max bars)", fontsize=9)
    ax2.set_title("train samples/s (medians)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", default="1,2", help="TensorFlow intra-op thread counts, comma list")
    p.add_argument("--batches", default=",".join(map(str, BATCHES)), help="per-rank batches, comma list")
    p.add_argument("--tiny", type=int, default=1,
                   help="a tiny batch timed alongside (the fixed cost directly); 0: none")
    p.add_argument("--rounds", type=int, default=5, help="rounds per worker (all batches each round, shuffled)")
    p.add_argument("--repeats", type=int, default=2, help="workers per thread count (thread counts alternate)")
    p.add_argument("--cell-seconds", type=float, default=0.6, help="seconds of calls per batch per round")
    p.add_argument("--quick", action="store_true", help="batches 4,32, 2 rounds, 1 repeat (smoke run)")
    p.add_argument("--out", default=OUT)
    p.add_argument("--name", default="step_time", help="output file stem")
    p.add_argument("--analyze-only", default="",
                   help="re-analyse and re-plot saved JSON instead of measuring (comma list: their runs pooled)")
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", default="", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    for flag in ("rounds", "repeats"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag} must be at least 1")
    if args.cell_seconds <= 0:
        p.error("--cell-seconds must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    batches = parse_ints(args.batches, "--batches")
    if args.worker:
        with open(args.worker_out, "w") as fh:
            json.dump(worker(args.worker, batches, args.rounds, args.cell_seconds, args.seed), fh)
        return 0
    harness.exit_on_sigterm()
    threads = parse_ints(args.threads, "--threads")
    if args.analyze_only:
        saved, runs, pooled = {}, [], []
        for path in args.analyze_only.split(","):  # several files: their runs pooled (e.g. one per session)
            with open(path) as fh:
                more = json.load(fh)
            saved = saved or more
            runs += more["runs"]
            pooled += more.get("pooled", [{"date": more["date"], "runs": len(more["runs"]),
                                           "load_avg": more["machine"].get("load_avg")}])
        config = saved["config"]
    else:
        if args.quick:
            batches, args.rounds, args.repeats, args.cell_seconds = [4, 32], 2, 1, 0.2
        tiny = [args.tiny] if args.tiny and args.tiny not in batches else []
        config = {"threads": threads, "batches": batches, "tiny": args.tiny, "rounds": args.rounds,
                  "repeats": args.repeats, "cell_seconds": args.cell_seconds, "inter_op_threads": 1,
                  "model": "nature", "obs_shape": list(OBS_SHAPE), "actions": ACTIONS,
                  "what": "wall time of ba3c.learner.Learner.train per call, one rank (Dist(): no exchange), "
                          "synthetic batches"}
        runs = []
        for rep in range(args.repeats):
            for t in (threads if rep % 2 == 0 else threads[::-1]):
                print(f"step_time: {t} thread(s), repeat {rep + 1}/{args.repeats} ...", flush=True)
                runs.append(run_worker(t, tiny + batches, args.rounds, args.cell_seconds, seed=rep))
    summary = summarise(runs, config["tiny"])
    out = {"machine": harness.machine(), "date": harness.now(), "config": config, "runs": runs,
           "summary": summary,
           "fitted": "summary.*.fits and each batch's split by each fit (overhead_s, compute_s, model_s) are fitted"}
    if args.analyze_only:
        out["machine"], out["date"] = saved["machine"], saved["date"]
        out["pooled"] = pooled  # the measurements pooled here: date, worker runs, load average at the start
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{args.name}.json")
    with open(path, "w") as fh:
        json.dump(out, fh, indent=1)
    try:
        plot(summary, os.path.join(args.out, f"{args.name}.png"))
    except ImportError as e:
        print(f"step_time: no plot ({e})")
    report(summary)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
