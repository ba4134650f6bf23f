"""Which preset learns faster per core-hour: learning per frame (from two real runs) x cost per frame.

    python benchmarks/preset_compare.py --runs default=runs/pong-tts,paper=runs/pong-paper [--measure-seconds 60]

1. Cost (measured here, in one invocation): for each preset, `python -m ba3c.train --preset P`
   (one rank, all cores, the game of the runs) for --measure-seconds after start-up, twice, in
   alternating order; steady frames/s and CPU seconds per frame (progress.csv's cpu_s).
2. Learning (measured in the given runs): the mean-20 training return against frames, from each
   run's progress.csv, and the frames at which it first reaches each threshold.
3. Per core-hour: each run's frames x the CPU seconds per frame measured in step 1 for its preset,
   so both runs are costed alike on a quiet machine (modelled, labelled so); a run's own cpu_s
   (measured, but inflated when the machine was shared) is reported beside it. Without step 1
   the runs' own cpu_s is used, and a run without it is an error.
Writes preset_compare-GAME.json and .png in --out, and prints a table.
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
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from scaling import env, machine, read_csv  # noqa: E402



def measure_cost(game: str, preset: str, seconds: float, warmup: float) -> dict[str, Any]:
    """One short training run of `preset`: steady frames/s and CPU seconds per frame."""
    run_dir = tempfile.mkdtemp(prefix=f"ba3c-preset-{preset}-")
    cmd = [sys.executable, "-m", "ba3c.train", "--env", game, "--preset", preset, "--run-dir", run_dir,
           "--dist", "none", "--total-frames", "1000000000", "--log-interval-s", "1",
           "--checkpoint-interval-min", "1000", "--max-minutes", str((seconds + warmup) / 60)]
    p = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=seconds + warmup + 300)
    rows = read_csv(os.path.join(run_dir, "progress.csv"))
    steady = [r for r in rows if rows and float(r["time_s"]) >= float(rows[0]["time_s"]) + warmup]
    if p.returncode != 0 or len(steady) < 2:
        raise RuntimeError(f"preset {preset}: trainer failed or too few rows (exit {p.returncode}): {p.stderr[-800:]}")
    a, b = steady[0], steady[-1]
    frames = int(b["frames"]) - int(a["frames"])
    return {"preset": preset, "window_s": float(b["time_s"]) - float(a["time_s"]),
            "frames_per_s": frames / (float(b["time_s"]) - float(a["time_s"])),
            "cpu_s_per_mframe": 1e6 * (float(b["cpu_s"]) - float(a["cpu_s"])) / frames,
            "updates_per_mframe": 1e6 * (int(b["updates"]) - int(a["updates"])) / frames}


def curve(run_dir: str, cpu_s_per_frame: float | None, thresholds: list[float]) -> dict[str, Any]:
    rows = [r for r in read_csv(os.path.join(run_dir, "progress.csv")) if r.get("return_mean20")]
    if not rows:
        raise RuntimeError(f"{run_dir}: no progress rows with returns")
    has_cpu = all(r.get("cpu_s") for r in rows)
    if not has_cpu and cpu_s_per_frame is None:
        raise RuntimeError(f"{run_dir}: no cpu_s column and no measured cost to model it from (--measure-seconds > 0)")
    frames = [int(r["frames"]) for r in rows]
    modelled = cpu_s_per_frame is not None
    core_h = [f * cpu_s_per_frame / 3600 if modelled else float(r["cpu_s"]) / 3600 for r, f in zip(rows, frames)]
    ret = [float(r["return_mean20"]) for r in rows]
    reach = {}
    for t in thresholds:
        i = next((k for k, v in enumerate(ret) if v >= t), None)
        reach[str(t)] = None if i is None else {"frames": frames[i], "core_hours": round(core_h[i], 3),
                                               "wall_hours": round(float(rows[i]["time_s"]) / 3600, 3)}
    with open(os.path.join(run_dir, "config.json")) as fh:
        cfg = json.load(fh)
    return {"run_dir": run_dir, "preset": cfg["run"]["preset"], "model": cfg["learn"]["model"],
            "core_hours_basis": "modelled: frames x CPU seconds per frame measured for this preset here" if modelled
                                else "measured: the run's cpu_s",
            "own_cpu_hours_total": round(float(rows[-1]["cpu_s"]) / 3600, 3) if has_cpu else None,
            "frames_total": frames[-1], "core_hours_total": round(core_h[-1], 3), "best_return_mean20": max(ret),
            "reach": reach, "frames": frames, "core_hours": [round(c, 4) for c in core_h], "return_mean20": ret}


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, c in result["runs"].items():
        ax1.plot([f / 1e6 for f in c["frames"]], c["return_mean20"], label=name)
        ls = "-" if c["core_hours_basis"].startswith("measured") else "--"  # dashed: modelled
        ax2.plot(c["core_hours"], c["return_mean20"], ls, label=f"{name} ({c['core_hours_basis'].split(':')[0]})")
    ax1.set_xlabel("frames (millions)"); ax2.set_xlabel("core-hours")
    for ax in (ax1, ax2):
        ax.set_ylabel("mean-20 training return"); ax.grid(alpha=0.3); ax.legend(fontsize=8)
    fig.suptitle(f"{result['game']}: presets per frame and per core-hour (dashed = core-hours modelled)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="NAME=RUN_DIR,NAME=RUN_DIR (NAME is the label; the preset is read "
                                                 "from each run's config.json)")
    p.add_argument("--measure-seconds", type=float, default=60.0, help="steady seconds per cost run (0: skip step 1)")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds of progress rows dropped in each cost run")
    p.add_argument("--thresholds", default="-15,-10,0,10,18", help="mean-20 returns to time (default: Pong's)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    args = p.parse_args()
    thresholds = [float(t) for t in args.thresholds.split(",") if t]
    runs = dict(item.split("=", 1) for item in args.runs.split(",") if "=" in item)
    if len(runs) < 2:
        p.error("--runs needs at least two NAME=RUN_DIR pairs")
    for name, d in runs.items():
        if not os.path.exists(os.path.join(d, "progress.csv")) or not os.path.exists(os.path.join(d, "config.json")):
            p.error(f"--runs {name}={d}: not a run directory (needs progress.csv and config.json)")
    cfgs = {}
    for name, d in runs.items():
        with open(os.path.join(d, "config.json")) as fh:
            cfgs[name] = json.load(fh)
    games = {c["sim"]["env"] for c in cfgs.values()}
    if len(games) != 1:
        p.error(f"--runs must be runs of one game, got {sorted(games)}")
    game = games.pop()
    presets = sorted({c["run"]["preset"] for c in cfgs.values()})

    result: dict[str, Any] = {"game": game, "machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M"),
                              "cost": [], "runs": {}}
    if args.measure_seconds > 0:
        for rep in range(2):  # alternate the order so a drift in the machine's speed hits both presets
            for preset in (presets if rep == 0 else presets[::-1]):
                print(f"preset_compare: cost of preset '{preset}' (repeat {rep + 1}/2) ...", flush=True)
                result["cost"].append(measure_cost(game, preset, args.measure_seconds, args.warmup))
                print("   ", {k: round(v, 1) if isinstance(v, float) else v for k, v in result["cost"][-1].items()})
    per_frame = {pr: sum(c["cpu_s_per_mframe"] for c in result["cost"] if c["preset"] == pr) / 1e6
                 / max(1, sum(1 for c in result["cost"] if c["preset"] == pr)) for pr in presets}
    for name, d in runs.items():
        pr = cfgs[name]["run"]["preset"]
        result["runs"][name] = curve(d, per_frame[pr] if per_frame.get(pr) else None, thresholds)

    print(f"\n{'run':>10} {'preset':>8} {'frames':>12} {'core-h':>7} {'best20':>7}  first reached (frames M / core-h)")
    for name, c in result["runs"].items():
        hits = "  ".join(f"{t}: " + (f"{v['frames'] / 1e6:.1f}M/{v['core_hours']:.2f}h" if v else "-")
                         for t, v in c["reach"].items())
        print(f"{name:>10} {c['preset']:>8} {c['frames_total']:>12,} {c['core_hours_total']:>7.2f} "
              f"{c['best_return_mean20']:>7.1f}  {hits}")
    for pr in presets:
        cs = [c for c in result["cost"] if c["preset"] == pr]
        if cs:
            print(f"cost, preset {pr}: {sum(c['frames_per_s'] for c in cs) / len(cs):,.0f} frames/s, "
                  f"{1e6 * per_frame[pr]:,.0f} CPU s per million frames (1 rank, {result['machine']['cores']} cores)")
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"preset_compare-{game}")
    with open(stem + ".json", "w") as fh:
        json.dump(result, fh, indent=1)
    plot(result, stem + ".png")
    print(f"wrote {stem}.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
