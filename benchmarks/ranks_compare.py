"""One rank against two ranks for the same total frames: frames/s of each, and that both learn.

    python -m benchmarks.ranks_compare [--env CartPole-v1] [--total-frames 150000] [--out benchmarks/results]

Writes ranks_compare.json (per run: ranks, global batch, steady frames/s, best mean-20 return,
wall seconds) and prints a table. Same per-rank settings in both runs, so the 2-rank run has twice
the global batch and half the updates; the learning rate follows the default rule (sqrt of the
global batch over 40, with warm-up).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass

from benchmarks import harness

TRAIN_BATCH = 40


@dataclass(frozen=True)
class RanksRun:
    ranks: int
    global_batch: int
    updates: int
    frames: int
    steady_frames_per_s: float  # after the first 20% of the logged time
    best_return_mean20: float
    final_return_mean20: float
    wall_s: float
    command: str


def run(ranks: int, env: str, total_frames: int) -> RanksRun:
    run_dir = tempfile.mkdtemp(prefix=f"ba3c-ranks{ranks}-")
    train = harness.train_command(
        "--env", env, "--num-envs", "8", "--predict-batch", "8", "--train-batch", str(TRAIN_BATCH), "--lr", "1e-3",
        "--lr-scaling", "sqrt", "--lr-ref-batch", str(TRAIN_BATCH), "--total-frames", str(total_frames),
        "--run-dir", run_dir, "--log-interval-s", "1", "--intra-op-threads", "1", "--env-threads", "1")
    cmd = train if ranks == 1 else harness.mpirun_prefix(ranks, 1)[0] + train
    done = harness.launch(harness.TrainerJob(cmd, [run_dir], os.path.join(run_dir, "stdout.log"), run_timeout_s=900))
    rows = done.rows[0]
    w = harness.steady_window(rows, warmup_frac=0.2)
    if done.returncode != 0 or w is None:
        raise SystemExit(f"{ranks}-rank run failed ({done.outcome}, exit {done.returncode}):\n{done.log_tail}")
    return RanksRun(ranks, TRAIN_BATCH * ranks, int(rows[-1]["updates"]), int(rows[-1]["frames"]), w.frames_per_s,
                    max(float(r["return_mean20"]) for r in rows if r["return_mean20"]),
                    float(rows[-1]["return_mean20"]), done.wall_s, " ".join(cmd))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--total-frames", type=int, default=150_000)
    p.add_argument("--out", default=harness.RESULTS)
    args = p.parse_args(argv)
    harness.exit_on_sigterm()
    runs = [run(1, args.env, args.total_frames), run(2, args.env, args.total_frames)]
    res = {"machine": harness.machine(), "date": harness.now(), "env": args.env,
           "total_frames": args.total_frames, "runs": [asdict(r) for r in runs],
           "note": "one core per rank (1 thread each), same per-rank settings; measured in one invocation"}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ranks_compare.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"{'ranks':>5} {'global batch':>12} {'updates':>8} {'frames/s':>9} {'best mean-20':>12} {'final':>7} {'wall s':>7}")
    for r in runs:
        print(f"{r.ranks:>5} {r.global_batch:>12} {r.updates:>8} {r.steady_frames_per_s:>9.0f} "
              f"{r.best_return_mean20:>12.1f} {r.final_return_mean20:>7.1f} {r.wall_s:>7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
