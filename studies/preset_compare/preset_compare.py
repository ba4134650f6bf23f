"""Which preset learns faster per core-hour: learning per frame (from two real runs) x cost per frame.

    python -m studies.preset_compare --runs default=runs/pong-tts,paper=runs/pong-paper [--measure-seconds 60]

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
import json
import os
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Any

from measure import harness

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")  # this study's committed results


@dataclass(frozen=True)
class Cost:
    """One short training run of a preset: its steady state."""
    preset: str
    window_s: float
    frames_per_s: float
    cpu_s_per_mframe: float
    updates_per_mframe: float


@dataclass(frozen=True)
class Curve:
    """One given run: mean-20 return against frames and core-hours (numbers unrounded)."""
    run_dir: str
    preset: str
    model: str
    core_hours_basis: str
    own_cpu_hours_total: float | None
    frames_total: int
    core_hours_total: float
    best_return_mean20: float
    reach: dict[str, dict[str, float] | None]  # threshold -> frames, core_hours, wall_hours at first reach
    frames: list[int]
    core_hours: list[float]
    return_mean20: list[float]


def measure_cost(game: str, preset: str, seconds: float, warmup: float) -> Cost:
    """One short training run of `preset`: steady frames/s and CPU seconds per frame."""
    run_dir = tempfile.mkdtemp(prefix=f"ba3c-preset-{preset}-")
    cmd = harness.train_command("--env", game, "--preset", preset, "--run-dir", run_dir, "--dist", "none",
                                "--total-frames", "1000000000", "--log-interval-s", "1",
                                "--checkpoint-interval-min", "1000")
    job = harness.TrainerJob(cmd, [run_dir], os.path.join(run_dir, "stdout.log"), run_timeout_s=seconds + warmup + 300)
    run = harness.launch(job, harness.stop_after_logged(seconds + warmup))
    w = harness.steady_window(run.rows[0], warmup)
    if not run.ok or w is None:
        raise RuntimeError(f"preset {preset}: trainer failed or too few rows ({run.outcome}, exit {run.returncode}): "
                           f"{run.log_tail[-800:]}")
    frames = w.delta("frames")
    return Cost(preset, w.seconds, w.frames_per_s, 1e6 * w.delta("cpu_s") / frames, 1e6 * w.delta("updates") / frames)


def curve(run_dir: str, cpu_s_per_frame: float | None, thresholds: list[float]) -> Curve:
    rows = [r for r in harness.progress_rows(run_dir) if r.get("return_mean20")]
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
        reach[str(t)] = None if i is None else {"frames": frames[i], "core_hours": core_h[i],
                                               "wall_hours": float(rows[i]["time_s"]) / 3600}
    with open(os.path.join(run_dir, "config.json")) as fh:
        cfg = json.load(fh)
    return Curve(run_dir, cfg["run"]["preset"], cfg["learn"]["model"],
                 "modelled: frames x CPU seconds per frame measured for this preset here" if modelled
                 else "measured: the run's cpu_s",
                 float(rows[-1]["cpu_s"]) / 3600 if has_cpu else None, frames[-1], core_h[-1], max(ret), reach,
                 frames, core_h, ret)


@dataclass(frozen=True)
class PresetCompare:
    """studies/preset_compare/results/preset_compare-GAME.json."""
    game: str
    machine: dict[str, Any]
    date: str
    cost: list[Cost]
    runs: dict[str, Curve]

    def cpu_s_per_frame(self, preset: str) -> float | None:
        """The mean of the preset's cost runs; None without any."""
        cs = [c.cpu_s_per_mframe for c in self.cost if c.preset == preset]
        return sum(cs) / len(cs) / 1e6 if cs else None


def plot(result: PresetCompare, path: str) -> None:
    plt = harness.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, c in result.runs.items():
        ax1.plot([f / 1e6 for f in c.frames], c.return_mean20, label=name)
        ls = "-" if c.core_hours_basis.startswith("measured") else "--"  # dashed: modelled
        ax2.plot(c.core_hours, c.return_mean20, ls, label=f"{name} ({c.core_hours_basis.split(':')[0]})")
    ax1.set_xlabel("frames (millions)")
    ax2.set_xlabel("core-hours")
    for ax in (ax1, ax2):
        ax.set_ylabel("mean-20 training return")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{result.game}: presets per frame and per core-hour (dashed = core-hours modelled)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def report(result: PresetCompare) -> None:
    print(f"\n{'run':>10} {'preset':>8} {'frames':>12} {'core-h':>7} {'best20':>7}  first reached (frames M / core-h)")
    for name, c in result.runs.items():
        hits = "  ".join(f"{t}: " + (f"{v['frames'] / 1e6:.1f}M/{v['core_hours']:.2f}h" if v else "-")
                         for t, v in c.reach.items())
        print(f"{name:>10} {c.preset:>8} {c.frames_total:>12,} {c.core_hours_total:>7.2f} "
              f"{c.best_return_mean20:>7.1f}  {hits}")
    for pr in sorted({c.preset for c in result.cost}):
        cs = [c for c in result.cost if c.preset == pr]
        print(f"cost, preset {pr}: {sum(c.frames_per_s for c in cs) / len(cs):,.0f} frames/s, "
              f"{1e6 * result.cpu_s_per_frame(pr):,.0f} CPU s per million frames "
              f"(1 rank, {result.machine['cores']} cores)")


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, dict[str, str], dict[str, dict[str, Any]]]:
    """The options, the runs by name and their config.json; one game for all."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", required=True, help="NAME=RUN_DIR,NAME=RUN_DIR (NAME is the label; the preset is read "
                                                 "from each run's config.json)")
    p.add_argument("--measure-seconds", type=float, default=60.0, help="steady seconds per cost run (0: skip step 1)")
    p.add_argument("--warmup", type=float, default=15.0, help="seconds of progress rows dropped in each cost run")
    p.add_argument("--thresholds", default="-15,-10,0,10,18", help="mean-20 returns to time (default: Pong's)")
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args(argv)
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
    return args, runs, cfgs


def measure_costs(game: str, presets: list[str], seconds: float, warmup: float) -> list[Cost]:
    out = []
    for rep in range(2):  # alternate the order so a drift in the machine's speed hits both presets
        for preset in (presets if rep == 0 else presets[::-1]):
            print(f"preset_compare: cost of preset '{preset}' (repeat {rep + 1}/2) ...", flush=True)
            out.append(measure_cost(game, preset, seconds, warmup))
            print("   ", {k: round(v, 1) if isinstance(v, float) else v for k, v in asdict(out[-1]).items()})
    return out


def main(argv: list[str] | None = None) -> int:
    args, runs, cfgs = parse(argv)
    harness.exit_on_sigterm()
    thresholds = [float(t) for t in args.thresholds.split(",") if t]
    game = next(iter(cfgs.values()))["sim"]["env"]
    presets = sorted({c["run"]["preset"] for c in cfgs.values()})
    cost = measure_costs(game, presets, args.measure_seconds, args.warmup) if args.measure_seconds > 0 else []
    costed = PresetCompare(game, harness.machine(), harness.now(), cost, {})
    curves = {name: curve(d, costed.cpu_s_per_frame(cfgs[name]["run"]["preset"]), thresholds)
              for name, d in runs.items()}
    result = PresetCompare(game, costed.machine, costed.date, cost, curves)
    report(result)
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"preset_compare-{game}")
    with open(stem + ".json", "w") as fh:
        json.dump(asdict(result), fh, indent=1)
    plot(result, stem + ".png")
    print(f"wrote {stem}.json and .png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
