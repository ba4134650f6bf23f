"""The paper's games, one long run after another, continued across sessions and machines.

    python -m benchmarks.paper_games --max-hours 2.5      # continue the first unfinished game
    python -m benchmarks.paper_games --status             # where each game stands

Each game is a `benchmarks.time_to_score` run with the default config on one rank, trained to the game's
frame cap, with the trainer's periodic evaluation (the paper's protocol: argmax, anti-stuck rule,
40,000-step cap; 10 games) recording when it first reached the game's target (the JSON's
frames_to_target) without stopping there: 10 games are too few to end a run on (Breakout's scored 371.5
at 16 M frames, the 50-game evaluation of the checkpoint at 18.6 M 292.8). The run's newest checkpoint
and CSVs are kept in `benchmarks/results/state/GAME/` at the end of every invocation (about 20 MB;
git-ignored: copy it with the checkout): where the run directory is gone the same command continues from
there, and where neither is there the game starts again from frame 0 (said so). A game at its cap is
evaluated with the paper's protocol, 50 episodes, on its final checkpoint
(`benchmarks/results/scores/eval-GAME-paper.json`), and `benchmarks/results/scores/SCORES.md` is rebuilt
(with the README's and docs/results/scores.md's tables); then the next game starts. Each run's
time_to_score results go to `benchmarks/results/time_to_score/`. Order and targets follow the issue that
asked for them: Breakout first (40 M frames; target the paper's 350, its early-stop threshold 300 is
read from eval.csv), then Boxing, Space Invaders, Seaquest and Beam Rider for 20 M frames each, then
Pong (20; the committed Pong run scored 19.0 and its checkpoint is not kept).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

from benchmarks import compare, time_to_score
from measure import harness

TAG = "games"  # time_to_score-GAME-games.json: these runs, apart from earlier single runs of a game


@dataclass(frozen=True)
class Game:
    name: str
    target: float    # periodic evaluation mean (paper protocol) whose first reach is recorded
    frame_cap: int   # frames the run trains for


GAMES = (Game("breakout", 350.0, 40_000_000), Game("boxing", 90.0, 20_000_000),
         Game("space_invaders", 650.0, 20_000_000), Game("seaquest", 1832.0, 20_000_000),
         Game("beam_rider", 14900.0, 20_000_000), Game("pong", 20.0, 20_000_000))


@dataclass(frozen=True)
class Standing:
    game: Game
    frames: int
    best_eval: float | None
    reached: bool
    evaluated: bool   # the 50-game evaluation is of the run's newest frames

    @property
    def trained(self) -> bool:
        return self.frames >= self.game.frame_cap

    @property
    def done(self) -> bool:
        return self.trained and self.evaluated


def parse_game(text: str) -> Game:
    """NAME[:TARGET:FRAME_CAP]; a name alone takes the built-in plan's numbers."""
    parts = text.split(":")
    known = {g.name: g for g in GAMES}
    if len(parts) == 1 and parts[0] in known:
        return known[parts[0]]
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: give NAME:TARGET:FRAME_CAP (e.g. pong:20:20000000), or one of "
                                         f"{', '.join(known)}")
    try:
        return Game(parts[0], float(parts[1]), int(float(parts[2])))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: TARGET must be a number and FRAME_CAP an integer") from None


def tts_dir(args: argparse.Namespace) -> str:
    """OUT/time_to_score: each game's time_to_score results."""
    return os.path.join(args.out, "time_to_score")


def scores_dir(args: argparse.Namespace) -> str:
    """OUT/scores: each game's 50-game evaluation, SCORES.md and scores.png."""
    return os.path.join(args.out, "scores")


def result_path(args: argparse.Namespace, g: Game) -> str:
    return os.path.join(tts_dir(args), f"time_to_score-{g.name.lower()}-{TAG}.json")


def eval_path(args: argparse.Namespace, g: Game) -> str:
    return os.path.join(scores_dir(args), f"eval-{g.name.lower()}-paper.json")


def state_dir(args: argparse.Namespace, g: Game) -> str:
    return os.path.join(args.state_root, g.name.lower())


def run_dir(args: argparse.Namespace, g: Game) -> str:
    return os.path.join(args.runs_dir, g.name.lower())


def standing(args: argparse.Namespace, g: Game) -> Standing:
    res: dict = {}
    if os.path.exists(result_path(args, g)):
        with open(result_path(args, g)) as fh:
            res = json.load(fh)
    best = res.get("best_criterion")
    frames = int(res.get("frames_total") or 0)
    evaluated = False
    if os.path.exists(eval_path(args, g)):
        with open(eval_path(args, g)) as fh:
            evaluated = int(json.load(fh).get("frames") or 0) >= frames > 0
    # judged against this plan's target, not the one the run was started with
    return Standing(g, frames, best, best is not None and best >= g.target, evaluated)


def train(args: argparse.Namespace, g: Game, hours: float, extra: list[str]) -> None:
    argv = ["--env", g.name, "--criterion", "eval", "--target", str(g.target), "--total-frames", str(g.frame_cap),
            "--eval-every-frames", str(args.eval_every_frames), "--eval-episodes", str(args.eval_episodes),
            "--max-hours", f"{hours:.4f}", "--nice", str(args.nice), "--run-dir", run_dir(args, g),
            "--state-dir", state_dir(args, g), "--out-dir", tts_dir(args), "--tag", TAG, "--train-past-target"]
    time_to_score.main(argv + (["--", *extra] if extra else []))


def evaluate(args: argparse.Namespace, g: Game) -> None:
    """The paper's protocol, 50 episodes, on the run's newest checkpoint (from the kept state if the run
    directory is gone)."""
    source = run_dir(args, g) if os.path.isdir(os.path.join(run_dir(args, g), "checkpoints")) else state_dir(args, g)
    cmd = ["nice", "-n", str(args.nice), sys.executable, "-m", "ba3c.evaluate", source, "--episodes",
           str(args.final_episodes), "--policy", "paper", "--json", eval_path(args, g)]
    print("paper_games:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=harness.child_env())
    # The README's and the scores page's tables show the committed results: refreshed only when they are what
    # was written.
    docs = [os.path.join(harness.ROOT, "README.md"), os.path.join(harness.ROOT, "docs", "results", "scores.md")]
    same = os.path.abspath(args.out) == os.path.abspath(harness.RESULTS)
    compare.main([scores_dir(args), "--out", scores_dir(args),
                  *([a for d in docs if os.path.exists(d) for a in ("--readme", d)] if same else [])])


def print_status(rows: list[Standing]) -> None:
    print(f"{'game':<16}{'target':>9}{'frame cap':>12}{'frames':>13}{'best eval':>11}  state")
    for s in rows:
        state = ("done" if s.done else "trained, not evaluated" if s.trained
                 else "partial" if s.frames else "not started")
        state += ", target reached by a periodic evaluation" if s.reached else ""
        best = "-" if s.best_eval is None else f"{s.best_eval:,.1f}"
        print(f"{s.game.name:<16}{s.game.target:>9,.0f}{s.game.frame_cap:>12,}{s.frames:>13,}{best:>11}  {state}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--games", type=parse_game, nargs="+", default=list(GAMES),
                   help="the plan, in order: NAME (built-in numbers) or NAME:TARGET:FRAME_CAP")
    p.add_argument("--max-hours", type=float, default=2.5, help="this invocation's training budget, all games")
    p.add_argument("--status", action="store_true", help="print where each game stands and exit")
    p.add_argument("--nice", type=int, default=10)
    p.add_argument("--eval-every-frames", type=int, default=1_000_000)
    p.add_argument("--eval-episodes", type=int, default=10, help="episodes of each periodic evaluation")
    p.add_argument("--final-episodes", type=int, default=50, help="episodes of the evaluation of a finished game")
    p.add_argument("--runs-dir", default=os.path.join("runs", "paper_games"))
    p.add_argument("--state-root", default=os.path.join(harness.RESULTS, "state"))
    p.add_argument("--out", default=harness.RESULTS,
                   help="results root: time_to_score results go to OUT/time_to_score, evaluations to OUT/scores")
    # anything after `--` goes to every trainer (e.g. `-- --num-envs 8`); the trainer rejects what it does not know
    args, extra = p.parse_known_args(argv)
    extra = [a for a in extra if a != "--"]
    if args.max_hours <= 0:
        p.error("--max-hours must be > 0")
    print_status([standing(args, g) for g in args.games])
    if args.status:
        return 0
    harness.exit_on_sigterm()
    deadline = time.time() + args.max_hours * 3600
    try:
        for g in args.games:
            s = standing(args, g)
            if not s.trained:
                hours = (deadline - time.time()) / 3600
                if hours <= 0.01:
                    break
                if s.frames and not any(os.path.exists(os.path.join(d, "config.json"))
                                        for d in (run_dir(args, g), state_dir(args, g))):
                    print(f"paper_games: {g.name}: neither {run_dir(args, g)} nor {state_dir(args, g)} holds the run "
                          f"recorded at {s.frames:,} frames in {result_path(args, g)}: it starts again from frame 0",
                          flush=True)
                print(f"paper_games: {g.name}: training (target {g.target:g}, cap {g.frame_cap:,} frames, "
                      f"{hours:.2f} h left)", flush=True)
                train(args, g, hours, extra)
                s = standing(args, g)
            if not s.trained:
                print(f"paper_games: {g.name} is partial at {s.frames:,} frames (state kept in {state_dir(args, g)}); "
                      f"the same command continues it", flush=True)
                break
            if not s.evaluated:
                evaluate(args, g)
    except (KeyboardInterrupt, SystemExit):
        print("paper_games: stopped; each run keeps its state", flush=True)
    print_status([standing(args, g) for g in args.games])
    return 0


if __name__ == "__main__":
    sys.exit(main())
