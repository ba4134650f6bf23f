"""Which optimizer settings should the default be: each arm's curve, collapses and cost on the same game.

    python -m studies.optimizer --env breakout --arms old-default,adam-b2-0.75 --seeds 0,1 --frames 3000000 \\
        --nice 19 --max-hours 2.5              # runs, or continues, every (arm, seed), one after another
    python -m studies.optimizer --env breakout --arms old-default,adam-b2-0.75 --seeds 0,1 --analyze-only

An arm is a named set of trainer flags (ARMS below; flags after `--` go to every run). Each (arm, seed) is
one `python -m ba3c.train` run directory under --runs-dir, trained to --frames with the collapse guard on (the
default) and a periodic evaluation (the paper's protocol, --eval-episodes games every --eval-every-frames).
Runs go one after another, seed-major (every arm's seed 0 first), so a stopped screen has compared the arms
at the same seeds; a run directory already at --frames is skipped, one short of it is resumed. The machine's
drift between runs is not controlled here: record a step-time control (`python -m benchmarks.step_time
--quick --threads 1`) in the same hour.

Each run is judged by: its rollbacks and guard events (events.csv), the intervals the guard found suspect or
collapsed, its entropy and largest gradient norm, its evaluations and mean-20 training return against frames,
its frames/s and CPU hours. Writes optimizer-GAME.{json,png} and each run's progress, eval and events CSV
(optimizer-GAME-ARM-sSEED-*.csv, read back by --analyze-only when the run directory is gone) in --out.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from measure import harness
from measure.harness import Row

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")  # this study's committed results

# The candidates (issue 62): the default before this study (old-default); the paper's Adam betas and epsilon (arXiv
# 1801.02852, the authors' released command) at the default lr and clipping, the default since; beta2 between; the
# paper's whole preset; RMSProp as OpenAI baselines' and Stable-Baselines3's A2C set it (lr 7e-4, alpha 0.99, epsilon
# 1e-5 inside the square root). Every arm names its betas and epsilon, so that it means the same whatever the default.
# The trainer's --optimizer rmsprop was removed after the screen (no gain; ba3c.removed names its last commit): the
# arm stays for --analyze-only of its kept CSVs.
_OLD = ["--beta1", "0.9", "--adam-eps", "1e-5"]
ARMS: dict[str, list[str]] = {
    "old-default": [*_OLD, "--beta2", "0.999"],
    "adam-b2-0.75": ["--beta1", "0.8", "--beta2", "0.75", "--adam-eps", "1e-8"],
    "adam-b2-0.99": [*_OLD, "--beta2", "0.99"],
    "adam-b2-0.9": [*_OLD, "--beta2", "0.9"],
    "paper": ["--preset", "paper"],
    "rmsprop": ["--optimizer", "rmsprop", "--lr", "7e-4", "--rms-alpha", "0.99", "--adam-eps", "1e-5"],
}
CSVS = ("progress", "eval", "events")


@dataclass(frozen=True)
class Run:
    arm: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.arm}-s{self.seed}"


@dataclass(frozen=True)
class RunResult:
    """One run as far as it got (numbers unrounded)."""
    run: str
    arm: str
    seed: int
    flags: list[str]
    frames: int
    updates: int
    wall_hours: float
    cpu_hours: float | None
    frames_per_s_median: float | None
    rollbacks: int
    events: list[dict[str, Any]]       # events.csv: frames, event, reason
    first_event_frames: int | None
    intervals_suspect: int
    intervals_collapsed: int
    entropy_min: float | None
    grad_norm_max: float | None
    grad_norm_median: float | None     # median over rows of each row's largest gradient norm
    evaluations: list[tuple[int, float]]  # (frames, mean score) from eval.csv
    eval_best: float | None
    return_mean20_last: float | None
    curve_frames: list[int]
    curve_return_mean20: list[float]


def run_dir(args: argparse.Namespace, r: Run) -> str:
    return os.path.abspath(os.path.join(args.runs_dir, r.name))


def kept_csv(args: argparse.Namespace, r: Run, kind: str) -> str:
    return os.path.join(args.out, f"optimizer-{args.env.lower()}-{r.name}-{kind}.csv")


def rows_of(args: argparse.Namespace, r: Run, kind: str) -> list[Row]:
    """A CSV of the run: from its run directory if present, else the copy kept with the results."""
    return harness.read_first([os.path.join(run_dir(args, r), f"{kind}.csv"), kept_csv(args, r, kind)])[0]


def frames_done(args: argparse.Namespace, r: Run) -> int:
    rows = rows_of(args, r, "progress")
    return int(rows[-1]["frames"]) if rows else 0


def gave_up(args: argparse.Namespace, r: Run) -> bool:
    return any(e.get("event") == "give_up" for e in rows_of(args, r, "events"))


def train(args: argparse.Namespace, r: Run) -> None:
    """Trains one run to --frames (started, or resumed from its checkpoint); keeps its CSVs in --out."""
    d = run_dir(args, r)
    common = ["--total-frames", str(args.frames)]
    if os.path.exists(os.path.join(d, "config.json")):
        cmd = harness.train_command("--resume", d, *common)
    else:
        cmd = harness.train_command("--env", args.env, "--seed", str(r.seed), "--run-dir", d, *common,
                                    "--eval-every-frames", str(args.eval_every_frames),
                                    "--eval-episodes", str(args.eval_episodes), *ARMS[r.arm], *args.extra)
    if args.nice:
        cmd = ["nice", "-n", str(args.nice), *cmd]
    os.makedirs(d, exist_ok=True)
    log = os.path.join(d, f"stdout-{time.strftime('%Y%m%d-%H%M%S')}.log")
    print(f"optimizer: {r.name}: {frames_done(args, r):,} frames so far; {' '.join(cmd)}", flush=True)
    job = harness.TrainerJob(cmd, [d], log, startup_timeout_s=args.startup_min * 60,
                             run_timeout_s=args.max_hours * 3600 + 900)
    done = harness.launch(job)
    keep(args, r)
    if not done.ok and not gave_up(args, r):  # a guard that gave up (exit 3) is a result, not a failure
        raise RuntimeError(f"{r.name}: the trainer ended badly ({done.outcome}, exit {done.returncode}); "
                           f"log {log}:\n{done.log_tail[-1500:]}")


def keep(args: argparse.Namespace, r: Run) -> None:
    os.makedirs(args.out, exist_ok=True)
    for kind in CSVS:
        src = os.path.join(run_dir(args, r), f"{kind}.csv")
        if os.path.exists(src):
            shutil.copy(src, kept_csv(args, r, kind))


def run_all(args: argparse.Namespace, runs: list[Run]) -> bool:
    """Each run in turn to --frames (True), or until --max-hours is spent (checked between runs)."""
    t0 = time.time()
    for r in runs:
        if frames_done(args, r) >= args.frames or gave_up(args, r):
            continue
        if time.time() - t0 > args.max_hours * 3600:
            print(f"optimizer: --max-hours {args.max_hours} spent; run again to continue", flush=True)
            return False
        train(args, r)
        analyze(args, runs)  # the table so far, after every run
    return True


def _floats(rows: list[Row], key: str) -> list[float]:
    out = []
    for x in rows:
        try:
            out.append(float(x[key]))
        except (KeyError, TypeError, ValueError):
            continue
    return out


def summarize(args: argparse.Namespace, r: Run) -> RunResult | None:
    rows = rows_of(args, r, "progress")
    if not rows:
        return None
    last = rows[-1]
    events = [{"frames": int(e["frames"]), "event": e["event"], "reason": e.get("reason", "")}
              for e in rows_of(args, r, "events")]
    evals = [(int(e["frames"]), float(e["score_mean"])) for e in rows_of(args, r, "eval") if e.get("score_mean")]
    fps, ent, grads = _floats(rows, "frames_per_s"), _floats(rows, "entropy_mean"), _floats(rows, "grad_norm_max")
    curve = [x for x in rows if x.get("return_mean20")]
    mean20 = _floats(curve, "return_mean20")
    return RunResult(
        r.name, r.arm, r.seed, ARMS[r.arm] + args.extra, int(last["frames"]), int(last["updates"]),
        float(last["time_s"]) / 3600, float(last["cpu_s"]) / 3600 if last.get("cpu_s") else None,
        statistics.median(fps) if fps else None, int(float(last.get("rollbacks") or 0)), events,
        events[0]["frames"] if events else None, sum(1 for x in rows if x.get("guard") == "suspect"),
        sum(1 for x in rows if x.get("guard") == "collapsed"), min(ent) if ent else None,
        max(grads) if grads else None, statistics.median(grads) if grads else None, evals,
        max(s for _, s in evals) if evals else None, mean20[-1] if mean20 else None,
        [int(x["frames"]) for x in curve], mean20)


def plot(args: argparse.Namespace, results: list[RunResult], path: str) -> None:
    plt = harness.pyplot()
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(13, 5))
    arms = sorted({x.arm for x in results})
    colours = {a: f"C{i}" for i, a in enumerate(arms)}
    styles = ["-", "--", ":", "-."]
    for x in sorted(results, key=lambda x: (x.arm, x.seed)):
        style, label = styles[x.seed % len(styles)], f"{x.arm}, seed {x.seed}"
        ax.plot([f / 1e6 for f in x.curve_frames], x.curve_return_mean20, style, color=colours[x.arm], label=label)
        if x.evaluations:
            bx.plot([f / 1e6 for f, _ in x.evaluations], [s for _, s in x.evaluations], style, marker="o",
                    ms=3, color=colours[x.arm], label=label)
        for e in x.events:
            if e["event"] in ("rollback", "give_up"):
                ax.axvline(e["frames"] / 1e6, color=colours[x.arm], alpha=0.5, lw=1)
    ax.set(xlabel="frames (M)", ylabel="training return, mean of last 20 games",
           title=f"{args.env}: training curve (vertical lines: rollbacks)")
    bx.set(xlabel="frames (M)", ylabel="evaluation mean (paper protocol)", title="periodic evaluations")
    for a in (ax, bx):
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _fmt(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def analyze(args: argparse.Namespace, runs: list[Run]) -> dict[str, Any]:
    results = [x for x in (summarize(args, r) for r in runs) if x is not None]
    out: dict[str, Any] = {
        "env": args.env.lower(), "frames": args.frames,
        "arms": {a: ARMS[a] for a in dict.fromkeys(r.arm for r in runs)},
        "protocol": f"default config but each arm's flags and --seed; flags to every run: {args.extra or 'none'}; "
                    f"the collapse guard on (default); evaluation every {args.eval_every_frames:,} frames, "
                    f"{args.eval_episodes} games, paper protocol; runs one after another at nice {args.nice}",
        "machine": harness.machine(), "date": harness.now(), "runs": [asdict(x) for x in results]}
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"optimizer-{args.env.lower()}")
    with open(stem + ".json", "w") as fh:
        json.dump(out, fh, indent=1)
    if any(x.curve_frames for x in results):
        plot(args, results, stem + ".png")
    print(f"\n{'run':<18}{'frames':>12}{'fps':>7}{'cpu h':>7}{'rollb':>6}{'first ev':>10}{'susp':>5}{'coll':>5}"
          f"{'ent min':>9}{'g max':>8}{'g med':>7}{'mean20':>8}{'eval best':>10}  evaluations (M frames: mean)")
    for x in results:
        ev = ", ".join(f"{f / 1e6:.1f}: {s:.1f}" for f, s in x.evaluations)
        first = "-" if x.first_event_frames is None else f"{x.first_event_frames / 1e6:.2f}M"
        print(f"{x.run:<18}{x.frames:>12,}{_fmt(x.frames_per_s_median, '.0f'):>7}{_fmt(x.cpu_hours, '.2f'):>7}"
              f"{x.rollbacks:>6}{first:>10}{x.intervals_suspect:>5}{x.intervals_collapsed:>5}"
              f"{_fmt(x.entropy_min, '.3f'):>9}{_fmt(x.grad_norm_max, '.2f'):>8}{_fmt(x.grad_norm_median, '.2f'):>7}"
              f"{_fmt(x.return_mean20_last):>8}{_fmt(x.eval_best):>10}  {ev}")
    print(f"wrote {stem}.json" + (" and .png" if results else ""), flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="breakout", help="the game every run trains on")
    p.add_argument("--arms", default="old-default,adam-b2-0.75", help=f"comma list from {', '.join(ARMS)}")
    p.add_argument("--seeds", default="0", help="comma list; each arm runs once per seed")
    p.add_argument("--frames", type=int, default=3_000_000, help="every run trains to these frames")
    p.add_argument("--eval-every-frames", type=int, default=500_000, help="frames between periodic evaluations")
    p.add_argument("--eval-episodes", type=int, default=5, help="games per periodic evaluation")
    p.add_argument("--max-hours", type=float, default=2.5, help="this invocation's budget, checked between runs")
    p.add_argument("--startup-min", type=float, default=30.0, help="cap on one run's start-up (a loaded machine)")
    p.add_argument("--nice", type=int, default=19, help="niceness of the trainers")
    p.add_argument("--runs-dir", default="", help="default runs/optimizer-GAME")
    p.add_argument("--out", default=RESULTS, help="where the JSON, PNG and kept CSVs go")
    p.add_argument("--analyze-only", action="store_true", help="only the table, JSON and plot of what there is")
    args, extra = p.parse_known_args(argv)
    args.extra = [a for a in extra if a != "--"]
    args.runs_dir = args.runs_dir or os.path.join("runs", f"optimizer-{args.env.lower()}")
    arms = [a for a in args.arms.split(",") if a]
    try:
        seeds = [int(s) for s in args.seeds.split(",") if s]
    except ValueError:
        p.error(f"--seeds: a comma list of integers (got {args.seeds!r})")
    bad = [a for a in arms if a not in ARMS]
    if bad or not arms or not seeds or args.frames < 1 or args.eval_every_frames < 0 or args.eval_episodes < 1:
        p.error(f"--arms from {', '.join(ARMS)} (got {', '.join(bad) or 'none'}), at least one seed, positive "
                f"--frames and --eval-episodes, --eval-every-frames >= 0")
    runs = [Run(a, s) for s in seeds for a in arms]
    if not args.analyze_only:
        harness.exit_on_sigterm()
        try:
            run_all(args, runs)
        except (KeyboardInterrupt, SystemExit):  # the trainer checkpointed (harness ends its group); keep what there is
            print("optimizer: stopped; run again to continue", flush=True)
    analyze(args, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
