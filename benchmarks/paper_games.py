"""The paper's six games under one default, each trained and evaluated with the same protocol, continued across
sessions and machines.

    python -m benchmarks.paper_games --max-hours 2.5      # continue the first unfinished run
    python -m benchmarks.paper_games --status             # where each run (game, seed) stands

The plan (the issue that asked for it): every game trained to 40 M frames on one rank with the default config;
Breakout and Boxing with seeds 0, 1 and 2 (`ba3c.train --seed N`), the others with seed 0. Runs go in this order:
seed 0 of Breakout, Boxing, Space Invaders, Seaquest, Beam Rider and Pong, then Breakout's and Boxing's seed 1,
then their seed 2 (each game's first seed before any game's second), so that a partial campaign covers all six
games first. `--games NAME[:TARGET:FRAME_CAP[:SEEDS]]` gives another plan (e.g. pong:20:40000000:0,1).

Each run is a `benchmarks.time_to_score` run trained to the game's frame cap, with the trainer's periodic
evaluation (the paper's protocol: argmax, anti-stuck rule, 40,000-step cap; 10 games) recording when it first
reached the game's target (the JSON's frames_to_target) without stopping there: 10 games are too few to end a run
on (Breakout's scored 371.5 at 16 M frames, the 50-game evaluation of the checkpoint at 18.6 M 292.8). The run's
newest checkpoint and CSVs are kept in `benchmarks/results/state/GAME-sN/` at the end of every invocation (about
20 MB; git-ignored: copy it with the checkout): where the run directory is gone the same command continues from
there, and where neither is there the run starts again from frame 0 (said so). A run at its cap is evaluated
with the paper's protocol, 50 episodes, on its final checkpoint
(`benchmarks/results/scores/eval-GAME-paper-games2-sN.json`), and `benchmarks/results/scores/SCORES.md` is rebuilt
(with the README's and docs/results/scores.md's tables); then the next run starts. Each run's time_to_score
results go to `benchmarks/results/time_to_score/time_to_score-GAME-games2-sN*`; `--status` also counts the
collapse guard's rollbacks from their events CSV (the campaign's aim: none in any run).

The campaign's name, `games2` (CAMPAIGN), keeps these runs apart from the earlier single-seed runs of the old
default (`time_to_score-GAME-games.json`, `eval-GAME-paper.json`): every file of this campaign carries it in its
name, and each evaluation JSON gets `"campaign": "games2"`. `benchmarks.compare` shows, in the README's table, a
game's games2 runs where it has any (the mean of their 50-game means and their range over seeds), the earlier row
otherwise; the table's Runs column says which.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks import compare, time_to_score
from measure import harness

CAMPAIGN = compare.CAMPAIGN  # "games2": in every file name of these runs, and in their evaluation JSONs
FRAME_CAP = 40_000_000  # the budget: every game within 40 M frames


@dataclass(frozen=True)
class Game:
    name: str
    target: float    # periodic evaluation mean (paper protocol) whose first reach is recorded
    frame_cap: int   # frames each run trains for
    seeds: tuple[int, ...] = (0,)  # one run per seed (`ba3c.train --seed N`)


GAMES = (Game("breakout", 350.0, FRAME_CAP, (0, 1, 2)), Game("boxing", 90.0, FRAME_CAP, (0, 1, 2)),
         Game("space_invaders", 650.0, FRAME_CAP), Game("seaquest", 1832.0, FRAME_CAP),
         Game("beam_rider", 14900.0, FRAME_CAP), Game("pong", 20.0, FRAME_CAP))


@dataclass(frozen=True)
class Run:
    game: Game
    seed: int

    @property
    def name(self) -> str:
        """GAME-sN: the run's directory, state directory and (after the campaign) file names."""
        return f"{self.game.name.lower()}-s{self.seed}"

    @property
    def tag(self) -> str:
        """time_to_score's --tag: time_to_score-GAME-games2-sN.json."""
        return f"{CAMPAIGN}-s{self.seed}"


def plan(games: Sequence[Game]) -> list[Run]:
    """The runs in order: every game's first seed (in the games' order), then every game's second seed, ..."""
    rounds = max((len(g.seeds) for g in games), default=0)
    return [Run(g, g.seeds[i]) for i in range(rounds) for g in games if i < len(g.seeds)]


@dataclass(frozen=True)
class Standing:
    run: Run
    frames: int
    best_eval: float | None
    reached: bool
    evaluated: bool   # the 50-game evaluation is of the run's newest frames
    rollbacks: int | None  # the collapse guard's rollbacks (None: the run has not started)

    @property
    def trained(self) -> bool:
        return self.frames >= self.run.game.frame_cap

    @property
    def done(self) -> bool:
        return self.trained and self.evaluated


def parse_seeds(text: str) -> tuple[int, ...]:
    """"0,1,2" -> (0, 1, 2); ValueError unless distinct integers >= 0."""
    seeds = tuple(int(s) for s in text.split(","))
    if min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(text)
    return seeds


def parse_game(text: str) -> Game:
    """NAME[:TARGET:FRAME_CAP[:SEEDS]]; a name alone takes the built-in plan's numbers and seeds."""
    parts = text.split(":")
    known = {g.name: g for g in GAMES}
    if len(parts) == 1 and parts[0] in known:
        return known[parts[0]]
    if len(parts) not in (3, 4):
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME:TARGET:FRAME_CAP[:SEEDS] (e.g. pong:20:40000000:0,1,2), "
                                         f"or one of {', '.join(known)}")
    try:
        target, cap = float(parts[1]), int(float(parts[2]))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: TARGET must be a number and FRAME_CAP an integer") from None
    try:
        seeds = parse_seeds(parts[3]) if len(parts) == 4 else (0,)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: SEEDS must be distinct integers >= 0 separated by commas "
                                         f"(e.g. 0,1,2)") from None
    return Game(parts[0], target, cap, seeds)


def tts_dir(args: argparse.Namespace) -> str:
    """OUT/time_to_score: each run's time_to_score results."""
    return os.path.join(args.out, "time_to_score")


def scores_dir(args: argparse.Namespace) -> str:
    """OUT/scores: each run's 50-game evaluation, SCORES.md and scores.png."""
    return os.path.join(args.out, "scores")


def result_path(args: argparse.Namespace, r: Run) -> str:
    return os.path.join(tts_dir(args), f"time_to_score-{r.game.name.lower()}-{r.tag}.json")


def events_path(args: argparse.Namespace, r: Run) -> str:
    """The run's events.csv as time_to_score keeps it (collapse-guard rollbacks among them)."""
    return os.path.join(tts_dir(args), f"time_to_score-{r.game.name.lower()}-{r.tag}-events.csv")


def eval_path(args: argparse.Namespace, r: Run) -> str:
    return os.path.join(scores_dir(args), f"eval-{r.game.name.lower()}-paper-{r.tag}.json")


def state_dir(args: argparse.Namespace, r: Run) -> str:
    return os.path.join(args.state_root, r.name)


def run_dir(args: argparse.Namespace, r: Run) -> str:
    return os.path.join(args.runs_dir, r.name)


def count_rollbacks(path: str) -> int:
    """Rows of an events CSV that are collapse-guard rollbacks (no file: none happened)."""
    if not os.path.exists(path):
        return 0
    with open(path, newline="") as fh:
        return sum(row.get("event") == "rollback" for row in csv.DictReader(fh))


def standing(args: argparse.Namespace, r: Run) -> Standing:
    res: dict = {}
    if os.path.exists(result_path(args, r)):
        with open(result_path(args, r)) as fh:
            res = json.load(fh)
    best = res.get("best_criterion")
    frames = int(res.get("frames_total") or 0)
    evaluated = False
    if os.path.exists(eval_path(args, r)):
        with open(eval_path(args, r)) as fh:
            evaluated = int(json.load(fh).get("frames") or 0) >= frames > 0
    # judged against this plan's target, not the one the run was started with
    return Standing(r, frames, best, best is not None and best >= r.game.target, evaluated,
                    count_rollbacks(events_path(args, r)) if res else None)


def train(args: argparse.Namespace, r: Run, hours: float, extra: list[str]) -> None:
    g = r.game
    argv = ["--env", g.name, "--criterion", "eval", "--target", str(g.target), "--total-frames", str(g.frame_cap),
            "--eval-every-frames", str(args.eval_every_frames), "--eval-episodes", str(args.eval_episodes),
            "--max-hours", f"{hours:.4f}", "--nice", str(args.nice), "--run-dir", run_dir(args, r),
            "--state-dir", state_dir(args, r), "--out-dir", tts_dir(args), "--tag", r.tag, "--train-past-target"]
    time_to_score.main([*argv, "--", "--seed", str(r.seed), *extra])


def mark_campaign(path: str) -> None:
    """Add "campaign": CAMPAIGN to an evaluation JSON (written beside, then renamed over): benchmarks.compare
    tells this campaign's rows from the earlier runs' by it."""
    with open(path) as fh:
        data = json.load(fh)
    data["campaign"] = CAMPAIGN
    with open(path + ".new", "w") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(path + ".new", path)


def evaluate(args: argparse.Namespace, r: Run) -> None:
    """The paper's protocol, 50 episodes, on the run's newest checkpoint (from the kept state if the run
    directory is gone)."""
    source = run_dir(args, r) if os.path.isdir(os.path.join(run_dir(args, r), "checkpoints")) else state_dir(args, r)
    cmd = ["nice", "-n", str(args.nice), sys.executable, "-m", "ba3c.evaluate", source, "--episodes",
           str(args.final_episodes), "--policy", "paper", "--json", eval_path(args, r)]
    print("paper_games:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=harness.child_env())
    mark_campaign(eval_path(args, r))
    # The README's and the scores page's tables show the committed results: refreshed only when they are what
    # was written.
    docs = [os.path.join(harness.ROOT, "README.md"), os.path.join(harness.ROOT, "docs", "results", "scores.md")]
    same = os.path.abspath(args.out) == os.path.abspath(harness.RESULTS)
    compare.main([scores_dir(args), "--out", scores_dir(args),
                  *([a for d in docs if os.path.exists(d) for a in ("--readme", d)] if same else [])])


def print_status(rows: list[Standing]) -> None:
    print(f"{'game':<16}{'seed':>5}{'target':>9}{'frame cap':>12}{'frames':>13}{'best eval':>11}{'rollbacks':>10}"
          f"  state")
    for s in rows:
        state = ("done" if s.done else "trained, not evaluated" if s.trained
                 else "partial" if s.frames else "not started")
        state += ", target reached by a periodic evaluation" if s.reached else ""
        best = "-" if s.best_eval is None else f"{s.best_eval:,.1f}"
        rollbacks = "-" if s.rollbacks is None else str(s.rollbacks)
        g = s.run.game
        print(f"{g.name:<16}{s.run.seed:>5}{g.target:>9,.0f}{g.frame_cap:>12,}{s.frames:>13,}{best:>11}"
              f"{rollbacks:>10}  {state}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", type=parse_game, nargs="+", default=list(GAMES),
                   help="the plan: NAME (built-in) or NAME:TARGET:FRAME_CAP[:SEEDS] (SEEDS e.g. 0,1,2; default 0)")
    p.add_argument("--max-hours", type=float, default=2.5, help="this invocation's training budget, all runs")
    p.add_argument("--status", action="store_true", help="print where each run (game, seed) stands and exit")
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--eval-every-frames", type=int, default=1_000_000)
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes of each periodic evaluation")
    p.add_argument("--final-episodes", type=int, default=50, help="episodes of the evaluation of a finished run")
    p.add_argument("--runs-dir", default=os.path.join("runs", "paper_games"))
    p.add_argument("--state-root", default=os.path.join(harness.RESULTS, "state"))
    p.add_argument("--out", default=harness.RESULTS,
                   help="results root: time_to_score results go to OUT/time_to_score, evaluations to OUT/scores")
    # anything after `--` goes to every trainer (e.g. `-- --num-envs 8`); the trainer rejects what it does not know
    args, extra = p.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    if args.max_hours <= 0:
        p.error("--max-hours must be > 0")
    if any(a == "--seed" or a.startswith("--seed=") for a in extra):
        p.error("--seed: each run's seed comes from the plan; give seeds with --games NAME:TARGET:FRAME_CAP:SEEDS")
    names = [g.name.lower() for g in args.games]
    if len(set(names)) != len(names):
        p.error("--games names a game twice; give all its seeds in one entry (NAME:TARGET:FRAME_CAP:0,1,2)")
    runs = plan(args.games)
    print_status([standing(args, r) for r in runs])
    if args.status:
        return 0
    harness.exit_on_sigterm()
    deadline = time.time() + args.max_hours * 3600
    try:
        for r in runs:
            s = standing(args, r)
            if not s.trained:
                hours = (deadline - time.time()) / 3600
                if hours <= 0.01:
                    break
                if s.frames and not any(os.path.exists(os.path.join(d, "config.json"))
                                        for d in (run_dir(args, r), state_dir(args, r))):
                    print(f"paper_games: {r.name}: neither {run_dir(args, r)} nor {state_dir(args, r)} holds the run "
                          f"recorded at {s.frames:,} frames in {result_path(args, r)}: it starts again from frame 0",
                          flush=True)
                print(f"paper_games: {r.name}: training (target {r.game.target:g}, cap {r.game.frame_cap:,} frames, "
                      f"seed {r.seed}, {hours:.2f} h left)", flush=True)
                train(args, r, hours, extra)
                s = standing(args, r)
            if not s.trained:
                print(f"paper_games: {r.name} is partial at {s.frames:,} frames (state kept in {state_dir(args, r)}); "
                      f"the same command continues it", flush=True)
                break
            if not s.evaluated:
                evaluate(args, r)
    except (KeyboardInterrupt, SystemExit):
        print("paper_games: stopped; each run keeps its state", flush=True)
    print_status([standing(args, r) for r in runs])
    return 0


if __name__ == "__main__":
    sys.exit(main())
