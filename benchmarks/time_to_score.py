"""Train until the score reaches a target; record when it did.

    python -m benchmarks.time_to_score --env pong --target 18 [--max-hours 3] [-- extra ba3c.train flags]
    python -m benchmarks.time_to_score --env breakout --resume --run-dir runs/X   # continue a stopped run
    python -m benchmarks.time_to_score --env breakout --run-dir runs/X --state-dir benchmarks/results/state/X
        # the same command continues the run in a later session or on another machine: at the end of
        # every invocation the run's newest checkpoint and CSVs are copied to --state-dir (copy it along),
        # and where --run-dir holds no run yet it starts from them

Runs `python -m ba3c.train` as a child process and follows its CSVs. `--criterion eval`
(default): the trainer evaluates its policy every `--eval-every-frames` (by default with the
paper's protocol, `--eval-episodes` episodes, eval.csv, whose `policy` column names the protocol)
and the target is met when an evaluation mean reaches it. `--criterion train20`: the mean training return of
the last 20 episodes (sampled policy, progress.csv). The child is stopped with SIGTERM (it checkpoints first) at
the target; the time budget it keeps itself (`--max-minutes`), so a trainer that reaches --total-frames within
the budget still finishes and records its last periodic evaluations (the harness allows `--final-eval-minutes`
more before it ends the child). Writes benchmarks/results/time_to_score/time_to_score-GAME[-TAG].json, the curve
PNG, the run's config and its CSVs (eval.csv, events.csv, and progress.csv's main columns). Core-hours are the CPU
seconds all ranks used (progress.csv's cpu_s), so they stay honest on a shared machine; where a run has no cpu_s
the JSON says the figure is wall x cores.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from measure import harness
from measure.harness import Row

# Early-stop thresholds of the paper (arXiv 1801.02852).
PAPER_TARGETS = {"breakout": 300.0, "pong": 10.0, "seaquest": 1830.0, "space_invaders": 700.0, "riverraid": 4000.0}


@dataclass(frozen=True)
class Criterion:
    file: str  # eval.csv or progress.csv in the run directory
    column: str
    metric: str


CRITERIA = {"eval": Criterion("eval.csv", "score_mean",
                              "periodic evaluation mean (eval.csv; protocol in its policy column)"),
            "train20": Criterion("progress.csv", "return_mean20",
                                 "mean training return of the last 20 episodes (sampled policy)")}


@dataclass(frozen=True)
class TimeToScore:
    """benchmarks/results/time_to_score/time_to_score-GAME[-TAG].json (numbers unrounded)."""
    env: str
    target: float
    reached: bool
    metric: str
    frames_to_target: int | None
    updates_to_target: int | None
    wall_s_to_target: float | None
    core_hours_to_target: float | None
    core_hours_total: float | None
    core_hours_basis: str
    frames_total: int
    wall_hours_total: float | None
    wall_hours_this_invocation: float
    resumed: bool
    best_return_mean20: float | None
    best_criterion: float | None
    updates_total: int
    run_dir: str
    command: list[str]
    machine: dict[str, Any]


def first_reach(rows: list[Row], target: float, column: str) -> Row | None:
    return next((r for r in rows if r.get(column) and float(r[column]) >= target), None)


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str], float]:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", default="pong")
    p.add_argument("--target", type=float, default=None, help="default: the paper's threshold for the game")
    p.add_argument("--startup-min", type=float, default=60.0,
                   help="cap on start-up (launch to the first progress row), minutes: a bound on a broken start")
    p.add_argument("--max-hours", type=float, default=3.0,
                   help="time budget, from the trainer's first progress row of this invocation (start-up excluded)")
    p.add_argument("--final-eval-minutes", type=float, default=30.0,
                   help="past the budget, how long a trainer that finished its frames may still play its last "
                        "periodic evaluations before it is stopped (a backstop; a trainer stopped by the budget "
                        "gives them up at once)")
    p.add_argument("--total-frames", type=int, default=40_000_000)
    p.add_argument("--keep-every-frames", type=int, default=5_000_000,
                   help="the trainer's --keep-every-frames: a checkpoint past every multiple of this many frames is "
                        "kept for good (rotation never deletes it; about 20 MB each for the Nature CNN; 0: off)")
    p.add_argument("--run-dir", default="")
    p.add_argument("--out-dir", default=os.path.join(harness.RESULTS, "time_to_score"))
    p.add_argument("--nice", type=int, default=0, help="run the trainer at this niceness")
    p.add_argument("--criterion", choices=tuple(CRITERIA), default="eval",
                   help="eval: periodic evaluation mean (paper protocol unless --eval-policy is passed on); "
                        "train20: training return, last 20 episodes")
    p.add_argument("--eval-every-frames", type=int, default=500_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--resume", action="store_true", help="continue the run in --run-dir from its checkpoint")
    p.add_argument("--state-dir", default="",
                   help="keep the run's newest checkpoint and CSVs here at the end of each invocation (about 20 MB "
                        "for the Nature CNN with Adam's state) and continue from them where --run-dir has no run: "
                        "the same command then resumes on another machine that has the folder")
    p.add_argument("--tag", default="", help="output name suffix, e.g. 'paper' -> time_to_score-pong-paper.json")
    p.add_argument("--train-past-target", action="store_true",
                   help="record when the target is first reached but train on to --total-frames (or the time budget)")
    args, extra = p.parse_known_args(argv)
    target = args.target if args.target is not None else PAPER_TARGETS.get(args.env.lower())
    if target is None:
        p.error(f"--target is required for {args.env} (paper thresholds exist for {', '.join(PAPER_TARGETS)})")
    if args.max_hours <= 0 or args.final_eval_minutes < 0 or args.keep_every_frames < 0:
        p.error("--max-hours must be > 0, --final-eval-minutes and --keep-every-frames >= 0")
    if args.state_dir and not args.run_dir:
        p.error("--state-dir needs --run-dir (where the kept state is continued)")
    has_run = any(os.path.exists(os.path.join(d, "config.json")) for d in (args.run_dir, args.state_dir) if d)
    if args.resume and not has_run:
        p.error("--resume needs --run-dir pointing at an existing run directory (one with config.json)"
                + (f" or --state-dir holding a kept state ({args.state_dir} has none)" if args.state_dir else ""))
    return args, [a for a in extra if a != "--"], target


def _given(flag: str, extra: list[str]) -> bool:
    """The user passed `flag` to the trainer themselves (as `--flag V` or `--flag=V`)."""
    return any(a == flag or a.startswith(flag + "=") for a in extra)


def trainer_command(args: argparse.Namespace, run_dir: str, extra: list[str]) -> list[str]:
    if args.resume:
        cmd = harness.train_command("--resume", run_dir, "--total-frames", str(args.total_frames), *extra)
    else:
        cmd = harness.train_command("--env", args.env, "--total-frames", str(args.total_frames), "--run-dir", run_dir,
                                    *extra)
    if args.criterion == "eval":
        cmd += ["--eval-every-frames", str(args.eval_every_frames), "--eval-episodes", str(args.eval_episodes)]
    if not _given("--keep-every-frames", extra):
        cmd += ["--keep-every-frames", str(args.keep_every_frames)]  # a good state survives a later collapse
    if not _given("--max-minutes", extra):
        # The trainer keeps the budget itself: the harness's timeout cannot tell a trainer still training
        # from one that finished and waits for its last evaluations (the suspected, untraced, cause of
        # Pong's missing 19 M/20 M evaluations).
        cmd += ["--max-minutes", f"{args.max_hours * 60:.4f}"]
    return ["nice", "-n", str(args.nice), *cmd] if args.nice else cmd


def summarize(args: argparse.Namespace, target: float, run_dir: str, cmd: list[str], wall_s: float) -> TimeToScore:
    crit = CRITERIA[args.criterion]
    rows = harness.progress_rows(run_dir)
    crit_rows = harness.read_rows(os.path.join(run_dir, crit.file))
    hit = first_reach(crit_rows, target, crit.column)
    last = rows[-1] if rows else {}
    cores = harness.cores()
    measured_cpu = bool(rows) and all(r.get("cpu_s") for r in rows)

    def core_hours(r: Row) -> float:
        """At an eval.csv or progress.csv row: the first progress row at or past its frames."""
        at = next((p for p in rows if int(p["frames"]) >= int(r["frames"])), rows[-1])
        return float(at["cpu_s"]) / 3600 if measured_cpu else float(at["time_s"]) / 3600 * cores

    return TimeToScore(
        env=args.env.lower(), target=target, reached=hit is not None, metric=crit.metric,
        frames_to_target=int(hit["frames"]) if hit else None, updates_to_target=int(hit["updates"]) if hit else None,
        wall_s_to_target=float(hit["time_s"]) if hit else None,
        core_hours_to_target=core_hours(hit) if hit and rows else None,
        core_hours_total=core_hours(last) if last else None,
        core_hours_basis=("measured: CPU seconds of all ranks (progress.csv cpu_s)" if measured_cpu
                          else f"not measured: wall time x {cores} cores (an upper bound on a shared machine)"),
        frames_total=int(last.get("frames", 0) or 0),
        wall_hours_total=float(last["time_s"]) / 3600 if last else None,
        wall_hours_this_invocation=wall_s / 3600, resumed=args.resume,
        best_return_mean20=max((float(r["return_mean20"]) for r in rows if r.get("return_mean20")), default=None),
        best_criterion=max((float(r[crit.column]) for r in crit_rows if r.get(crit.column)), default=None),
        updates_total=int(last.get("updates", 0) or 0), run_dir=run_dir, command=cmd, machine=harness.machine())


def write(result: TimeToScore, out_dir: str, tag: str) -> None:
    os.makedirs(out_dir, exist_ok=True)
    from ba3c.rundir import plot_curve  # the curve from the CSVs: a trainer ended by SIGKILL drew none

    if os.path.exists(os.path.join(result.run_dir, "progress.csv")):
        plot_curve(result.run_dir)
    name = f"time_to_score-{result.env}" + (f"-{tag}" if tag else "")
    with open(os.path.join(out_dir, f"{name}.json"), "w") as fh:
        json.dump(asdict(result), fh, indent=2)
    for src, dst in (("config.json", f"{name}-config.json"), ("learning_curve.png", f"{name}.png"),
                     ("eval.csv", f"{name}-eval.csv"), ("events.csv", f"{name}-events.csv")):
        if os.path.exists(os.path.join(result.run_dir, src)):
            shutil.copy(os.path.join(result.run_dir, src), os.path.join(out_dir, dst))
    keep_progress(os.path.join(result.run_dir, "progress.csv"), os.path.join(out_dir, f"{name}-progress.csv"))


# progress.csv's columns kept with the results: the curve and what the collapse guard watches (the run's
# own progress.csv has ~45 columns; a 40 M-frame run's is 600 kB)
KEPT_PROGRESS_COLUMNS = ("time_s", "cpu_s", "frames", "updates", "episodes", "return_mean20", "episode_length_mean",
                         "frames_per_s", "policy_loss", "value_loss", "entropy", "grad_norm", "lr", "guard",
                         "rollbacks",
                         # feature health (ba3c.model.HealthProbe): a trunk whose units die shows here
                         "units_active", "feature_std", "logit_std", "value_std",
                         # Gorila's learner (empty for BA3C): Q-values running past what a state can be worth
                         # show here (docs/gorila.md: the Breakout run with the Huber loss)
                         "td_loss", "q_mean", "td_abs_mean", "q_abs_max", "epsilon")


def keep_progress(src: str, dst: str) -> None:
    """A copy of progress.csv with KEPT_PROGRESS_COLUMNS, so the curve survives the (uncommitted) run."""
    if not os.path.exists(src):
        return
    with open(src, newline="") as fin, open(dst + ".new", "w", newline="") as fout:
        w = csv.DictWriter(fout, KEPT_PROGRESS_COLUMNS, extrasaction="ignore")
        w.writeheader()
        w.writerows(csv.DictReader(fin))
    os.replace(dst + ".new", dst)


def main(argv: list[str] | None = None) -> int:
    args, extra, target = parse(argv)
    harness.exit_on_sigterm()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = os.path.abspath(args.run_dir or os.path.join("runs", f"tts-{args.env.lower()}-{stamp}"))
    if args.state_dir:
        if harness.restore_state(args.state_dir, run_dir):
            print(f"time_to_score: continuing from the state kept in {args.state_dir}", flush=True)
        args.resume = args.resume or os.path.exists(os.path.join(run_dir, "config.json"))
    cmd = trainer_command(args, run_dir, extra)
    crit = CRITERIA[args.criterion]
    print("time_to_score:", " ".join(cmd), flush=True)
    t0 = time.time()

    def stop(_rows: list[list[Row]]) -> bool:  # at the target (the trainer keeps the time budget)
        if args.train_past_target:
            return False
        return first_reach(harness.read_rows(os.path.join(run_dir, crit.file)), target, crit.column) is not None

    job = harness.TrainerJob(cmd, [run_dir], log_path=None, startup_timeout_s=args.startup_min * 60,
                             run_timeout_s=(args.max_hours * 60 + args.final_eval_minutes) * 60, poll_s=2.0)
    try:
        run = harness.launch(job, stop)
        if run.outcome == "startup timeout":
            print(f"time_to_score: no progress row within --startup-min {args.startup_min:g} (building thousands of "
                  f"emulators on a loaded machine can take longer: raise it); the trainer was stopped", flush=True)
    except (KeyboardInterrupt, SystemExit):  # Ctrl-C, or SIGTERM via harness.exit_on_sigterm
        print("time_to_score: stopped; the trainer checkpointed; recording what it reached", flush=True)
    result = summarize(args, target, run_dir, cmd, time.time() - t0)
    write(result, args.out_dir, args.tag)
    if args.state_dir and harness.save_state(run_dir, args.state_dir):
        print(f"time_to_score: newest checkpoint and CSVs kept in {args.state_dir} (the same command continues "
              f"from there where --run-dir is gone)", flush=True)
    print(json.dumps(asdict(result), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
