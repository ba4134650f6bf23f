"""Train until the score reaches a target; record when it did.

    python benchmarks/time_to_score.py --env pong --target 18 [--max-hours 3] [-- extra ba3c.train flags]
    python benchmarks/time_to_score.py --env breakout --resume --run-dir runs/X   # continue a stopped run

Runs `python -m ba3c.train` as a child process and follows its CSVs. `--criterion eval`
(default): the trainer evaluates the greedy policy every `--eval-every-frames` (the paper's
protocol, `--eval-episodes` episodes, eval.csv) and the target is met when an evaluation mean
reaches it. `--criterion train20`: the mean training return of the last 20 episodes (sampled
policy, progress.csv). The child is stopped with SIGTERM (it checkpoints first) at the target or
when the time budget is spent. Writes benchmarks/results/time_to_score-GAME[-TAG].json, the curve
PNG and the run's config. Core-hours are the CPU seconds all ranks used (progress.csv's cpu_s), so
they stay honest on a shared machine; where a run has no cpu_s the JSON says the figure is wall x cores.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time

from scaling import cpu_model  # benchmarks/ is on sys.path when run as a script

# Early-stop thresholds of the paper (arXiv 1801.02852).
PAPER_TARGETS = {"breakout": 300.0, "pong": 10.0, "seaquest": 1830.0, "space_invaders": 700.0, "riverraid": 4000.0}


def read_rows(path: str) -> list[dict[str, str]]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def first_reach(rows: list[dict[str, str]], target: float, column: str) -> dict[str, str] | None:
    for r in rows:
        if r.get(column) and float(r[column]) >= target:
            return r
    return None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="pong")
    p.add_argument("--target", type=float, default=None, help="default: the paper's threshold for the game")
    p.add_argument("--max-hours", type=float, default=3.0)
    p.add_argument("--total-frames", type=int, default=40_000_000)
    p.add_argument("--run-dir", default="")
    p.add_argument("--out-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"))
    p.add_argument("--nice", type=int, default=0, help="run the trainer at this niceness")
    p.add_argument("--criterion", choices=("eval", "train20"), default="eval",
                   help="eval: greedy evaluation mean (paper); train20: training return, last 20 episodes")
    p.add_argument("--eval-every-frames", type=int, default=500_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its checkpoint")
    p.add_argument("--tag", default="", help="output name suffix, e.g. 'paper' -> time_to_score-pong-paper.json")
    args, extra = p.parse_known_args()
    extra = [a for a in extra if a != "--"]
    game = args.env.lower()
    target = args.target if args.target is not None else PAPER_TARGETS.get(game)
    if target is None:
        p.error(f"--target is required for {args.env} (paper thresholds exist for {', '.join(PAPER_TARGETS)})")
    if args.resume and not (args.run_dir and os.path.exists(os.path.join(args.run_dir, "config.json"))):
        p.error("--resume needs --run-dir pointing at an existing run directory (one with config.json)")
    run_dir = args.run_dir or os.path.join("runs", f"tts-{game}-{time.strftime('%Y%m%d-%H%M%S')}")
    if args.resume:
        cmd = [sys.executable, "-m", "ba3c.train", "--resume", run_dir, "--total-frames", str(args.total_frames), *extra]
    else:
        cmd = [sys.executable, "-m", "ba3c.train", "--env", args.env, "--total-frames", str(args.total_frames),
               "--run-dir", run_dir, *extra]
    if args.criterion == "eval":
        cmd += ["--eval-every-frames", str(args.eval_every_frames), "--eval-episodes", str(args.eval_episodes)]
    watched, column = (("eval.csv", "score_mean") if args.criterion == "eval" else ("progress.csv", "return_mean20"))
    if args.nice:
        cmd = ["nice", "-n", str(args.nice), *cmd]
    print("time_to_score:", " ".join(cmd), flush=True)
    t0 = time.time()
    child = subprocess.Popen(cmd)
    watched_path = os.path.join(run_dir, watched)
    hit = None
    try:
        while child.poll() is None:
            time.sleep(2)
            hit = first_reach(read_rows(watched_path), target, column)
            if hit or time.time() - t0 > args.max_hours * 3600:
                child.send_signal(signal.SIGTERM)
                break
        child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGTERM)
        child.wait()
    rows = read_rows(os.path.join(run_dir, "progress.csv"))
    crit_rows = read_rows(watched_path)
    hit = first_reach(crit_rows, target, column)
    last = rows[-1] if rows else {}
    cores = os.cpu_count() or 1
    wall_h = (time.time() - t0) / 3600
    measured_cpu = bool(rows) and all(r.get("cpu_s") for r in rows)

    def core_hours(r: dict[str, str]) -> float:
        """At an eval.csv or progress.csv row: the first progress row at or past its frames."""
        at = next((p for p in rows if int(p["frames"]) >= int(r["frames"])), rows[-1])
        return float(at["cpu_s"]) / 3600 if measured_cpu else float(at["time_s"]) / 3600 * cores
    result = {
        "env": game, "target": target, "reached": hit is not None,
        "metric": ("greedy evaluation mean" if args.criterion == "eval"
                   else "mean training return of the last 20 episodes (sampled policy)"),
        "frames_to_target": int(hit["frames"]) if hit else None,
        "updates_to_target": int(hit["updates"]) if hit else None,
        "wall_s_to_target": float(hit["time_s"]) if hit else None,
        "core_hours_to_target": round(core_hours(hit), 3) if hit and rows else None,
        "core_hours_total": round(core_hours(last), 3) if last else None,
        "core_hours_basis": ("measured: CPU seconds of all ranks (progress.csv cpu_s)" if measured_cpu
                             else f"not measured: wall time x {cores} cores (an upper bound on a shared machine)"),
        "frames_total": int(last.get("frames", 0) or 0),
        "wall_hours_total": round(float(last["time_s"]) / 3600, 3) if last else None,
        "wall_hours_this_invocation": round(wall_h, 3), "resumed": args.resume,
        "best_return_mean20": max((float(r["return_mean20"]) for r in rows if r.get("return_mean20")), default=None),
        "best_criterion": max((float(r[column]) for r in crit_rows if r.get(column)), default=None),
        "updates_total": int(last.get("updates", 0) or 0),
        "run_dir": run_dir, "command": cmd,
        "machine": {"cores": cores, "cpu": cpu_model(), "host": platform.node()},
    }
    os.makedirs(args.out_dir, exist_ok=True)
    name = f"time_to_score-{game}" + (f"-{args.tag}" if args.tag else "")
    out = os.path.join(args.out_dir, f"{name}.json")
    with open(out, "w") as fh:
        json.dump(result, fh, indent=2)
    if os.path.exists(os.path.join(run_dir, "config.json")):
        shutil.copy(os.path.join(run_dir, "config.json"), os.path.join(args.out_dir, f"{name}-config.json"))
    curve = os.path.join(run_dir, "learning_curve.png")
    if os.path.exists(curve):
        shutil.copy(curve, os.path.join(args.out_dir, f"{name}.png"))
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
