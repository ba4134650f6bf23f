"""Gorila's TD loss and bootstrap target (`--dqn-loss huber|mse`, `--dqn-target max|double`): which learns
sooner and ends better, paired by seed, on CartPole with the Gorila learning test's settings.

    python -m studies.dqn_loss --seeds 10 --frames 50000 --eval-episodes 20

Each (variant, seed) is one `python -m ba3c.train --algo gorila --env CartPole-v1` run (the settings of
tests/unit/test_gorila_train.py: 8 environments, replay 20,000, warm-up 1,000 agent steps, one update of 64
samples every 4 agent steps, target copy every 100 updates, epsilon 1 to 0.05 over 10,000 steps, lr 1e-3)
with `--dqn-loss`, `--dqn-target` and `--seed` set, then `python -m ba3c.evaluate --policy greedy` on its
final checkpoint. The variants run in a different order for every seed (rotated), so a drift in this
shared machine's load hits each alike. A run with an evaluation JSON is done; run the same command again
to finish the rest. Compared per run: the mean-20 training return averaged over the run's frames (how soon
it learned), its best and its last mean-20, and the greedy evaluation (CartPole caps a game at 500).
Writes dqn_loss.json and dqn_loss.png in --out (default studies/dqn_loss/results) and prints the table.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from dataclasses import asdict, dataclass
from typing import Any

from measure import harness

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")  # this study's committed results

# the Gorila learning test's CartPole settings (tests/unit/test_gorila_train.py), so the study measures the same runs
CARTPOLE = ["--algo", "gorila", "--env", "CartPole-v1", "--num-envs", "8", "--predict-batch", "8",
            "--replay-size", "20000", "--learning-starts", "1000", "--train-every", "4", "--target-every", "100",
            "--eps-decay-steps", "10000", "--eps-end", "0.05", "--lr", "1e-3", "--train-batch", "64",
            "--log-interval-s", "1"]
VARIANTS = ("huber-max", "mse-max", "huber-double", "mse-double")  # LOSS-TARGET; the first is the default
METRICS = ("curve_mean", "best_mean20", "last_mean20", "eval_mean")


@dataclass(frozen=True)
class RunResult:
    """One run's numbers (unrounded) and its curve."""
    run: str
    variant: str
    seed: int
    frames: int
    updates: int
    curve_mean: float | None
    best_mean20: float | None
    last_mean20: float | None
    eval_mean: float | None
    eval_episodes: int
    curve_frames: list[int]
    curve_return_mean20: list[float]


def run_name(variant: str, seed: int) -> str:
    return f"{variant}-s{seed}"


def schedule(variants: list[str], seeds: int) -> list[tuple[str, int]]:
    """Every (variant, seed), the variants rotated by one place per seed."""
    return [(variants[(i + s) % len(variants)], s) for s in range(seeds) for i in range(len(variants))]


def train_and_evaluate(args: argparse.Namespace, variant: str, seed: int) -> None:
    """One run from scratch (a run left without its evaluation is started again), then its evaluation."""
    d = os.path.join(args.runs_dir, run_name(variant, seed))
    shutil.rmtree(d, ignore_errors=True)
    loss, target = variant.split("-")
    cmd = harness.train_command(*CARTPOLE, "--dqn-loss", loss, "--dqn-target", target, "--seed", str(seed),
                                "--total-frames", str(args.frames), "--run-dir", d)
    os.makedirs(d)
    done = harness.launch(harness.TrainerJob(cmd, [d], os.path.join(d, "stdout.log"), startup_timeout_s=600,
                                             run_timeout_s=3600))
    if not done.ok:
        raise RuntimeError(f"{run_name(variant, seed)}: the trainer ended badly ({done.outcome}, exit "
                           f"{done.returncode}):\n{done.log_tail[-1500:]}")
    ev = harness.TrainerJob([sys.executable, "-m", "ba3c.evaluate", d, "--episodes", str(args.eval_episodes),
                             "--policy", "greedy", "--json", os.path.join(d, "eval-greedy.json")], [],
                            os.path.join(d, "evaluate.log"), startup_timeout_s=None, run_timeout_s=None)
    done = harness.launch(ev)
    if done.returncode != 0:
        raise RuntimeError(f"{run_name(variant, seed)}: the evaluation failed:\n{done.log_tail[-1500:]}")


def summarize(args: argparse.Namespace, variant: str, seed: int) -> RunResult | None:
    d = os.path.join(args.runs_dir, run_name(variant, seed))
    ev_path = os.path.join(d, "eval-greedy.json")
    if not os.path.exists(ev_path):
        return None
    with open(ev_path) as fh:
        ev = json.load(fh)
    rows = harness.progress_rows(d)
    curve = [r for r in rows if r.get("return_mean20")]
    vals = [float(r["return_mean20"]) for r in curve]
    last = rows[-1]
    return RunResult(run_name(variant, seed), variant, seed, int(last["frames"]), int(last["updates"]),
                     harness.curve_mean(rows, int(last["frames"])), max(vals, default=None),
                     vals[-1] if vals else None, ev["score"]["mean"], ev["episodes"],
                     [int(r["frames"]) for r in curve], vals)


def paired(results: list[RunResult], variant: str, base: str, metric: str) -> dict[str, Any]:
    """`variant` against `base` seed by seed: how often it was higher, and the median difference."""
    by = {(x.variant, x.seed): getattr(x, metric) for x in results}
    diffs = [by[(variant, s)] - by[(base, s)] for (v, s) in by
             if v == variant and (base, s) in by and by[(variant, s)] is not None and by[(base, s)] is not None]
    return {"seeds": len(diffs), "higher": sum(d > 0 for d in diffs), "lower": sum(d < 0 for d in diffs),
            "median_difference": statistics.median(diffs) if diffs else None}


def pairs(variants: list[str]) -> list[tuple[str, str]]:
    """What is compared seed by seed: every variant against the first (the default), and Double DQN against
    the DQN target with the same loss."""
    out = [(v, variants[0]) for v in variants[1:]]
    return out + [(v, v.replace("-double", "-max")) for v in variants if v.endswith("-double")
                  and v.replace("-double", "-max") in variants and (v, v.replace("-double", "-max")) not in out]


def plot(results: list[RunResult], variants: list[str], path: str) -> None:
    import numpy as np

    plt = harness.pyplot()
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 5))
    colours = dict(zip(VARIANTS, ("tab:blue", "tab:orange", "tab:green", "tab:red")))
    for v in variants:
        mine = [x for x in results if x.variant == v and x.curve_frames]
        for x in mine:  # every seed faintly, the median over seeds (on a grid every run covers) boldly
            a.plot([f / 1e3 for f in x.curve_frames], x.curve_return_mean20, color=colours[v], alpha=0.15, lw=0.8)
        if mine:
            lo, hi = max(x.curve_frames[0] for x in mine), min(x.curve_frames[-1] for x in mine)
            grid = np.linspace(lo, hi, 50)
            med = np.median([np.interp(grid, x.curve_frames, x.curve_return_mean20) for x in mine], axis=0)
            a.plot(grid / 1e3, med, color=colours[v], lw=2.5, label=f"{v}: median of {len(mine)} seeds")
        b.scatter([variants.index(v)] * len(mine), [x.eval_mean for x in mine], color=colours[v], alpha=0.6)
        if mine:
            b.scatter([variants.index(v)], [statistics.median(x.eval_mean for x in mine)], color="black",
                      marker="_", s=400)
    a.set(xlabel="agent steps (thousands)", ylabel="training return, mean of last 20 episodes",
          title="CartPole, Gorila mode (--dqn-loss)-(--dqn-target)")
    b.set(xticks=range(len(variants)), xticklabels=variants, xlabel="(--dqn-loss)-(--dqn-target)",
          ylabel="greedy evaluation of the final weights (cap 500)", title="per seed (dots), median (bar)")
    for ax in (a, b):
        ax.grid(alpha=0.3)
    a.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def analyze(args: argparse.Namespace, variants: list[str]) -> dict[str, Any]:
    results = [x for x in (summarize(args, v, s) for v, s in schedule(variants, args.seeds)) if x is not None]
    out: dict[str, Any] = {
        "question": "which TD loss and bootstrap target learn CartPole sooner and end better in Gorila mode",
        "settings": " ".join(CARTPOLE), "frames": args.frames, "seeds": args.seeds,
        "eval": f"python -m ba3c.evaluate --policy greedy --episodes {args.eval_episodes} (final checkpoint)",
        "machine": harness.machine(), "date": harness.now(), "variants": variants,
        "median_per_variant": {v: {m: statistics.median(vals) if (vals := [getattr(x, m) for x in results if
                                                                            x.variant == v and getattr(x, m)
                                                                            is not None]) else None
                                   for m in METRICS} for v in variants},
        "paired": {f"{a} vs {b}": {m: paired(results, a, b, m) for m in METRICS} for a, b in pairs(variants)},
        "runs": [asdict(x) for x in results]}
    os.makedirs(args.out, exist_ok=True)
    stem = os.path.join(args.out, "dqn_loss")
    with open(stem + ".json", "w") as fh:
        json.dump(out, fh, indent=1)
    print(f"\n{'variant':<14}{'runs':>5}" + "".join(f"{m:>14}" for m in METRICS) + "   (medians over seeds)")
    for v in variants:
        med = out["median_per_variant"][v]
        n = sum(x.variant == v for x in results)
        print(f"{v:<14}{n:>5}" + "".join(f"{'-' if med[m] is None else f'{med[m]:.1f}':>14}" for m in METRICS))
    for pair, by_metric in out["paired"].items():
        print(f"{pair}, seeds higher/lower: " + ", ".join(
            f"{m} {p['higher']}/{p['lower']} of {p['seeds']}" for m, p in by_metric.items()))
    if results:
        plot(results, variants, stem + ".png")
    print(f"wrote {stem}.json" + (" and .png" if results else ""))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m studies.dqn_loss", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=10, help="seeds 0..N-1; each variant runs once per seed")
    p.add_argument("--frames", type=int, default=50_000, help="agent steps of each CartPole run")
    p.add_argument("--eval-episodes", type=int, default=20, help="greedy games on each run's final weights")
    p.add_argument("--variants", default=",".join(VARIANTS), help="LOSS-TARGET pairs; the first is the baseline")
    p.add_argument("--runs-dir", default=os.path.join("runs", "dqn_loss"))
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--analyze-only", action="store_true", help="summarize the finished runs only")
    args = p.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    if (any(v not in VARIANTS for v in variants) or not variants or args.seeds < 1 or args.frames < 2_000
            or args.eval_episodes < 1):
        p.error(f"--variants: one or more of {', '.join(VARIANTS)}; --seeds >= 1, --frames >= 2000 (past the "
                f"warm-up), --eval-episodes >= 1 (got {args.variants!r}, {args.seeds}, {args.frames}, "
                f"{args.eval_episodes})")
    if not args.analyze_only:
        harness.exit_on_sigterm()
        todo = [(v, s) for v, s in schedule(variants, args.seeds) if summarize(args, v, s) is None]
        for i, (v, s) in enumerate(todo):
            print(f"dqn_loss: run {i + 1}/{len(todo)}: {run_name(v, s)}", flush=True)
            train_and_evaluate(args, v, s)
    analyze(args, variants)
    return 0


if __name__ == "__main__":
    sys.exit(main())
