"""One rank against two ranks for the same total frames: frames/s of each, and that both learn.

    python benchmarks/ranks_compare.py [--env CartPole-v1] [--total-frames 150000] [--out benchmarks/results]

Writes ranks_compare.json (per run: ranks, global batch, steady frames/s, best mean-20 return,
wall seconds) and prints a table. Same per-rank settings in both runs, so the 2-rank run has twice
the global batch and half the updates; the learning rate follows the default rule (sqrt of the
global batch over 40, with warm-up).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from scaling import env, machine  # noqa: E402


def run(ranks: int, args: argparse.Namespace) -> dict:
    run_dir = tempfile.mkdtemp(prefix=f"ba3c-ranks{ranks}-")
    train = [sys.executable, "-m", "ba3c.train", "--env", args.env, "--num-envs", "8", "--predict-batch", "8",
             "--train-batch", "40", "--lr", "1e-3", "--lr-scaling", "sqrt", "--lr-ref-batch", "40", "--total-frames", str(args.total_frames),
             "--run-dir", run_dir, "--log-interval-s", "1", "--intra-op-threads", "1", "--env-threads", "1"]
    cmd = train if ranks == 1 else ["mpirun", "-np", str(ranks), "--bind-to", "core", *train]
    t0 = time.time()
    p = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"{ranks}-rank run failed:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(os.path.join(run_dir, "progress.csv"), newline="") as fh:
        rows = list(csv.DictReader(fh))
    steady = rows[len(rows) // 5:]
    a, b = steady[0], steady[-1]
    fps = (int(b["frames"]) - int(a["frames"])) / (float(b["time_s"]) - float(a["time_s"]))
    best = max(float(r["return_mean20"]) for r in rows if r["return_mean20"])
    return {"ranks": ranks, "global_batch": 40 * ranks, "updates": int(rows[-1]["updates"]), "frames": int(rows[-1]["frames"]),
            "steady_frames_per_s": round(fps, 1), "best_return_mean20": best,
            "final_return_mean20": float(rows[-1]["return_mean20"]), "wall_s": round(time.time() - t0, 1),
            "command": " ".join(cmd)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="CartPole-v1")
    p.add_argument("--total-frames", type=int, default=150_000)
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = p.parse_args()
    runs = [run(1, args), run(2, args)]
    res = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S"), "env": args.env,
           "total_frames": args.total_frames, "runs": runs,
           "note": "one core per rank (1 thread each), same per-rank settings; measured in one invocation"}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ranks_compare.json"), "w") as fh:
        json.dump(res, fh, indent=1)
    print(f"{'ranks':>5} {'global batch':>12} {'updates':>8} {'frames/s':>9} {'best mean-20':>12} {'final':>7} {'wall s':>7}")
    for r in runs:
        print(f"{r['ranks']:>5} {r['global_batch']:>12} {r['updates']:>8} {r['steady_frames_per_s']:>9.0f} "
              f"{r['best_return_mean20']:>12.1f} {r['final_return_mean20']:>7.1f} {r['wall_s']:>7.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
