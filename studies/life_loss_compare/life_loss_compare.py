"""A lost life as a terminal or not (`--life-loss ignore|terminal`): training return against frames,
the variants trained alike to the same frames.

    python -m studies.life_loss_compare --env breakout --frames 10000000 --seeds 0,1,2 \\
        --segment-minutes 30 --max-hours 8 --nice 10          # runs, or continues, every (variant, seed)
    python -m studies.life_loss_compare --env breakout --frames 10000000 --seeds 0,1,2 --analyze-only

Each (variant, seed) is one `python -m ba3c.train --life-loss VARIANT --seed SEED` run directory under
--runs-dir, with the default config otherwise (flags after `--` go to every run). The runs advance in
turns of --segment-minutes (the trainer's --max-minutes: it checkpoints and exits 0; the next turn
resumes it), each round in the opposite order of the last, so a drift in this shared machine's
speed hits every variant alike. A run at --frames is done. Interrupted, or out of --max-hours
(checked between turns): run the same command again to continue every run where it stopped.

Compared at the same frames: the mean training return of the last 20 full games (sampled policy;
one episode is one game with all its lives in both variants: progress.csv's return_mean20) at
every --mark-every frames that every run has reached, per run and averaged over the seeds of each
variant. With --eval-episodes N, once every run is at --frames, each run's final checkpoint is also
evaluated with the paper's protocol (`python -m ba3c.evaluate --policy paper`, N games; a `terminal`
run has FIRE pressed for it after a lost life, as it trained), and the scores join the comparison
(the evaluation JSON stays in the run directory, so it never enters the scores table). Writes
life_loss_compare-GAME.{json,png} and each run's progress.csv (life_loss_compare-GAME-VARIANT-sSEED-progress.csv)
in --out (default studies/life_loss_compare/results), and prints the table.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from measure import harness
from measure.harness import Row

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")  # this study's committed results

VARIANTS = ("ignore", "terminal")


@dataclass(frozen=True)
class Run:
    variant: str
    seed: int

    @property
    def name(self) -> str:
        return f"{self.variant}-s{self.seed}"


@dataclass(frozen=True)
class RunResult:
    """One run's curve (numbers unrounded) and where it stands."""
    run: str
    variant: str
    seed: int
    frames: int
    episodes: int
    wall_hours: float
    cpu_hours: float | None
    at_marks: dict[str, float | None]  # mark (frames) -> mean-20 return of the last row at or before it
    curve_frames: list[int]
    curve_return_mean20: list[float]
    curve_episode_length_mean: list[float]
    evaluation: dict[str, Any] | None = None  # the paper protocol at the run's final checkpoint (--eval-episodes)


def run_dir(args: argparse.Namespace, r: Run) -> str:
    return os.path.abspath(os.path.join(args.runs_dir, r.name))


def progress_copy(args: argparse.Namespace, r: Run) -> str:
    return os.path.join(args.out, f"life_loss_compare-{args.env.lower()}-{r.name}-progress.csv")


def eval_path(args: argparse.Namespace, r: Run) -> str:
    return os.path.join(run_dir(args, r), "eval-paper-final.json")


def read_evaluation(args: argparse.Namespace, r: Run) -> dict[str, Any] | None:
    """The summary of the run's final evaluation: from its run directory, else as kept in the results JSON."""
    if os.path.exists(eval_path(args, r)):
        with open(eval_path(args, r)) as fh:
            ev = json.load(fh)
        return {"policy": ev["policy"], "episodes": ev["episodes"], "frames": ev["frames"],
                "mean": ev["score"]["mean"], "std": ev["score"]["std"], "median": ev["score"]["median"],
                "truncated_episodes": ev.get("truncated_episodes"), "eval_wall_s": ev.get("eval_wall_s"),
                "fire_after_life_loss": ev["protocol"].get("fire_after_life_loss")}
    kept = os.path.join(args.out, f"life_loss_compare-{args.env.lower()}.json")
    if os.path.exists(kept):
        with open(kept) as fh:
            old = {x["run"]: x.get("evaluation") for x in json.load(fh).get("runs", [])}
        return old.get(r.name)
    return None


def evaluate_all(args: argparse.Namespace, runs: list[Run]) -> None:
    """The paper's protocol, --eval-episodes games, on each finished run's final checkpoint (once per frames)."""
    for r in runs:
        done = read_evaluation(args, r)
        if done is not None and done["frames"] >= args.frames and done["episodes"] >= args.eval_episodes:
            continue
        if not os.path.isdir(os.path.join(run_dir(args, r), "checkpoints")):
            print(f"life_loss_compare: {r.name}: not evaluated: {run_dir(args, r)} holds no checkpoints", flush=True)
            continue
        cmd = [sys.executable, "-m", "ba3c.evaluate", run_dir(args, r), "--episodes", str(args.eval_episodes),
               "--policy", "paper", "--json", eval_path(args, r)]
        cmd = ["nice", "-n", str(args.nice), *cmd] if args.nice else cmd
        print(f"life_loss_compare: {r.name}: evaluating; {' '.join(cmd)}", flush=True)
        if subprocess.run(cmd, cwd=harness.ROOT, env=harness.child_env()).returncode != 0:
            print(f"life_loss_compare: {r.name}: the evaluation failed (above); the comparison goes on without it",
                  flush=True)


def rows_of(args: argparse.Namespace, r: Run) -> list[Row]:
    """The run's progress rows: from its run directory if present, else the copy kept with the results."""
    return harness.read_first([os.path.join(run_dir(args, r), "progress.csv"), progress_copy(args, r)])[0]


def frames_done(args: argparse.Namespace, r: Run) -> int:
    rows = rows_of(args, r)
    return int(rows[-1]["frames"]) if rows else 0


def turn(args: argparse.Namespace, r: Run, extra: list[str]) -> None:
    """One --segment-minutes turn of one run: started, or resumed from its checkpoint."""
    d = run_dir(args, r)
    common = ["--total-frames", str(args.frames), "--max-minutes", str(args.segment_minutes)]
    if os.path.exists(os.path.join(d, "config.json")):
        cmd = harness.train_command("--resume", d, *common)
    else:
        cmd = harness.train_command("--env", args.env, "--life-loss", r.variant, "--seed", str(r.seed),
                                    "--run-dir", d, *common, *extra)
    if args.nice:
        cmd = ["nice", "-n", str(args.nice), *cmd]
    os.makedirs(d, exist_ok=True)
    log = os.path.join(d, f"stdout-{time.strftime('%Y%m%d-%H%M%S')}.log")
    print(f"life_loss_compare: {r.name}: {frames_done(args, r):,} frames so far; {' '.join(cmd)}", flush=True)
    job = harness.TrainerJob(cmd, [d], log, startup_timeout_s=args.startup_min * 60,
                             run_timeout_s=args.segment_minutes * 60 + 600)
    done = harness.launch(job)
    if not done.ok:
        raise RuntimeError(f"{r.name}: the trainer ended badly ({done.outcome}, exit {done.returncode}); "
                           f"log {log}:\n{done.log_tail[-1500:]}")
    os.makedirs(args.out, exist_ok=True)
    shutil.copy(os.path.join(d, "progress.csv"), progress_copy(args, r))


def run_all(args: argparse.Namespace, runs: list[Run], extra: list[str]) -> bool:
    """Turns in alternating order until every run is at --frames (True) or the time budget is spent."""
    t0, order = time.time(), list(runs)
    while True:
        todo = [r for r in order if frames_done(args, r) < args.frames]
        if not todo:
            print("life_loss_compare: every run is at --frames", flush=True)
            return True
        for r in todo:
            if time.time() - t0 > args.max_hours * 3600:
                print(f"life_loss_compare: --max-hours {args.max_hours} spent; run again to continue", flush=True)
                return False
            turn(args, r, extra)
        order.reverse()


def at_mark(rows: list[Row], mark: int) -> float | None:
    """The mean-20 return of the last row at or before `mark` frames; None when the run has not reached it."""
    if not rows or int(rows[-1]["frames"]) < mark:
        return None
    before = [r for r in rows if int(r["frames"]) <= mark and r.get("return_mean20")]
    return float(before[-1]["return_mean20"]) if before else None


def summarize(args: argparse.Namespace, r: Run, marks: list[int]) -> RunResult | None:
    rows = rows_of(args, r)
    if not rows:
        return None
    curve = [x for x in rows if x.get("return_mean20")]
    last = rows[-1]
    return RunResult(r.name, r.variant, r.seed, int(last["frames"]), int(last["episodes"]),
                     float(last["time_s"]) / 3600, float(last["cpu_s"]) / 3600 if last.get("cpu_s") else None,
                     {str(m): at_mark(rows, m) for m in marks}, [int(x["frames"]) for x in curve],
                     [float(x["return_mean20"]) for x in curve],
                     [float(x["episode_length_mean"] or "nan") for x in curve], read_evaluation(args, r))


def variant_means(results: list[RunResult], marks: list[int], variants: list[str],
                  seeds: list[int]) -> dict[str, dict[str, float | None]]:
    """Per variant, per mark: the mean over its seeds, only where every seed has a value (else None)."""
    out: dict[str, dict[str, float | None]] = {}
    for v in variants:
        mine = [x for x in results if x.variant == v]
        out[v] = {}
        for m in marks:
            vals = [x.at_marks[str(m)] for x in mine]
            complete = len(mine) == len(seeds) and all(y is not None for y in vals)
            out[v][str(m)] = sum(vals) / len(vals) if complete else None  # type: ignore[arg-type]
    return out


def plot(args: argparse.Namespace, results: list[RunResult], path: str) -> None:
    plt = harness.pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    colours = {"ignore": "tab:blue", "terminal": "tab:red"}
    styles = ["-", "--", ":", "-."]
    for x in sorted(results, key=lambda x: (x.variant, x.seed)):
        ax.plot([f / 1e6 for f in x.curve_frames], x.curve_return_mean20, styles[x.seed % len(styles)],
                color=colours.get(x.variant), label=f"--life-loss {x.variant}, seed {x.seed}")
    ax.set(xlabel="frames (M)", ylabel="training return, mean of last 20 games (per full game)",
           title=f"{args.env}: a lost life as a terminal or not")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def analyze(args: argparse.Namespace, runs: list[Run], variants: list[str], seeds: list[int]) -> dict[str, Any]:
    marks = list(range(args.mark_every, args.frames + 1, args.mark_every))
    results = [x for x in (summarize(args, r, marks) for r in runs) if x is not None]
    out: dict[str, Any] = {
        "env": args.env.lower(), "frames": args.frames, "seeds": seeds, "variants": variants, "marks": marks,
        "criterion": "mean training return of the last 20 full games (sampled policy; progress.csv return_mean20)",
        "protocol": f"default config but --life-loss and --seed; flags to every run: {args.extra or 'none'}; turns "
                    f"of {args.segment_minutes} min in alternating order, nice {args.nice}",
        "machine": harness.machine(), "date": harness.now(),
        "variant_mean_at_marks": variant_means(results, marks, variants, seeds),
        "runs": [asdict(x) for x in results]}
    # the whole curve up to the frames every run has reached, averaged over frames, per run and per variant
    common = min((x.frames for x in results), default=0) if len(results) == len(runs) else 0
    per_run = {r.name: harness.curve_mean(rows_of(args, r), common) for r in runs} if common else {}
    out["curve_mean_frames"] = common
    out["curve_mean_per_run"] = per_run
    by_variant: dict[str, float | None] = {}
    for v in variants:
        vals = [per_run.get(r.name) for r in runs if r.variant == v]
        by_variant[v] = sum(vals) / len(vals) if vals and None not in vals else None  # type: ignore[arg-type]
    out["curve_mean_per_variant"] = by_variant
    # the final evaluations, per variant where every seed has one at --frames
    evals: dict[str, float | None] = {}
    for v in variants:
        mine = [x.evaluation for x in results if x.variant == v]
        full = len(mine) == len(seeds) and all(e is not None and e["frames"] >= args.frames for e in mine)
        evals[v] = sum(e["mean"] for e in mine) / len(mine) if full else None  # type: ignore[index]
    out["final_eval_mean_per_variant"] = evals
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, f"life_loss_compare-{args.env.lower()}")
    with open(stem + ".json", "w") as fh:
        json.dump(out, fh, indent=1)
    curves = any(x.curve_frames for x in results)
    if curves:
        plot(args, results, stem + ".png")
    shown = [m for m in marks if any(x.at_marks[str(m)] is not None for x in results)]
    print(f"\n{'run':<16}{'frames':>13}{'wall h':>8}  mean-20 return at " + ", ".join(f"{m / 1e6:g}M" for m in shown))
    for x in results:
        vals = ["-" if x.at_marks[str(m)] is None else f"{x.at_marks[str(m)]:.1f}" for m in shown]
        print(f"{x.run:<16}{x.frames:>13,}{x.wall_hours:>8.2f}  " + ", ".join(vals))
    for v, by_mark in out["variant_mean_at_marks"].items():
        vals = ["-" if by_mark[str(m)] is None else f"{by_mark[str(m)]:.1f}" for m in shown]
        print(f"{'mean ' + v:<16}{'':>13}{'':>8}  " + ", ".join(vals))
    if common:
        both = {**per_run, **{f"mean {v}": m for v, m in by_variant.items()}}
        print(f"mean-20 return averaged over the first {common:,} frames (every run has them): "
              + ", ".join(f"{k} {'-' if m is None else f'{m:.1f}'}" for k, m in both.items()))
    for x in results:
        if x.evaluation is not None:
            e = x.evaluation
            print(f"{x.run}: paper protocol at {e['frames']:,} frames, {e['episodes']} games: {e['mean']:.1f} +- "
                  f"{e['std']:.1f} (median {e['median']:g}, {e['truncated_episodes']} cut at the cap)")
    if any(m is not None for m in evals.values()):
        print("final evaluation, mean over seeds: " + ", ".join(f"{v} {'-' if m is None else f'{m:.1f}'}"
                                                             for v, m in evals.items()))
    print(f"wrote {stem}.json" + (" and .png" if curves else " (no finished games yet: no plot)"))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="breakout", help="an Atari game with lives")
    p.add_argument("--frames", type=int, default=10_000_000, help="every run trains to these frames")
    p.add_argument("--seeds", default="0", help="comma list; each variant runs once per seed")
    p.add_argument("--variants", default=",".join(VARIANTS), help="--life-loss values to compare")
    p.add_argument("--segment-minutes", type=float, default=30.0, help="one turn of one run (its --max-minutes)")
    p.add_argument("--max-hours", type=float, default=8.0, help="this invocation's budget, checked between turns")
    p.add_argument("--startup-min", type=float, default=30.0,
                   help="cap on one turn's start-up (a loaded machine is slow)")
    p.add_argument("--mark-every", type=int, default=1_000_000, help="frames between the compared marks")
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--runs-dir", default="", help="default runs/life_loss_compare-GAME")
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--eval-episodes", type=int, default=0,
                   help="once every run is at --frames, evaluate each with the paper's protocol, this many games "
                        "(0: off)")
    p.add_argument("--analyze-only", action="store_true")
    args, extra = p.parse_known_args(argv)
    args.extra = [a for a in extra if a != "--"]
    args.runs_dir = args.runs_dir or os.path.join("runs", f"life_loss_compare-{args.env.lower()}")
    variants = [v for v in args.variants.split(",") if v]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    bad = [v for v in variants if v not in VARIANTS]
    if (bad or not variants or not seeds or args.frames < 1 or args.mark_every < 1 or args.segment_minutes <= 0
            or args.eval_episodes < 0):
        p.error(f"--variants from {', '.join(VARIANTS)}, at least one seed, positive --frames, --mark-every and "
                f"--segment-minutes, --eval-episodes >= 0 (got variants {variants}, seeds {seeds})")
    runs = [Run(v, s) for s in seeds for v in variants]
    if not args.analyze_only:
        harness.exit_on_sigterm()
        try:
            if run_all(args, runs, args.extra) and args.eval_episodes:
                evaluate_all(args, runs)
        except (KeyboardInterrupt, SystemExit):  # the trainer checkpointed (harness ends its group); keep what there is
            print("life_loss_compare: stopped; run again to continue", flush=True)
    analyze(args, runs, variants, seeds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
