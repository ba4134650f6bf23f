"""Which points does a Pong agent lose, and how? (offline, reads the emulator's RAM)

    python -m benchmarks.pong_points runs/pong-seed2 --games 50
    python -m benchmarks.pong_points runs/pong-seed2/checkpoints/keep-0000039000.npz --games 20 --tag 10M
    python -m benchmarks.pong_points runs/pong-seed2 --openings --tag 20M   # the first point after 0-30 no-ops

A Pong agent near the top (19.9 over 50 games here) wins most games 21-0 or 21-1: which point it
loses says where to look next (the opening serve after the no-op start? late in a game? one kind of
ball?). This plays the paper protocol (argmax, a random action with p=0.001, the anti-stuck rule, the
40,000-step cap; `ba3c.evaluation.PROTOCOLS["paper"]`) on one ALE emulator of its own
(`benchmarks.ram_atari`, observations built as the trainer's) and reads after every agent step the
ball (RAM[49] x, RAM[54] y), the agent's paddle (RAM[51] y, RAM[46] x) and the two scores (RAM[13]
computer, RAM[14] agent): the coordinates as the ROM keeps them (atariari's annotations), not pixels.

Per point it records the game, the point's number in the game (0: the first), the agent step, who won
it and the score before it; per lost point also the last TRACE steps of ball and paddle, and the ball's
height against the paddle's at the last step before the ball passed the paddle's column (`miss_dy`).
For scale, scripted paddles that chase the ball to keep ball y - paddle y at a set offset, one game each
(seed 1): offsets 0 and -8 lost 21-0, offset 8 won 21-19, offset 16 led 20-11 after 6,000 steps; so the
paddle's hitting range lies at positive offsets, roughly 8-16. Writes
benchmarks/results/pong-points[-TAG].{json,png}.

`--openings` plays only the first point, once for each no-op count 0-30, without the random action: the
opening is then deterministic, and which no-op counts lose it is a property of the checkpoint. The no-ops
are emulator frames, so the count modulo 4 (the frameskip) sets which frames the agent sees and acts on;
the openings lost come in such residues (runs/pong-seed2 at 20 M frames: counts 3, 7, ..., 27).
Writes benchmarks/results/pong-openings[-TAG].{json,png}.
"""
from __future__ import annotations

import os
import sys
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from ba3c.evaluation import PROTOCOLS, AntiStuck, choose_actions
from ba3c.files import write_json
from benchmarks import harness
from benchmarks.ram_atari import NOOP_MAX, RamAtari, diagnosis_parser, load_model_for

BALL_X, BALL_Y, PADDLE_Y, PADDLE_X, CPU_SCORE, AGENT_SCORE = 49, 54, 51, 46, 13, 14  # Pong RAM addresses
TRACE = 32  # agent steps of ball and paddle kept before each lost point
PROTOCOL = PROTOCOLS["paper"]


@dataclass
class Point:
    game: int
    number: int          # the point's number in its game, 0 for the first
    step: int            # agent steps into the game when it was scored
    won: bool
    agent_before: int    # the score before it
    cpu_before: int
    miss_dy: int | None = None  # lost points: ball y - paddle y at the last step before the ball passed the paddle
    trace: list[tuple[int, int, int]] = field(default_factory=list)  # lost points: (ball x, ball y, paddle y) per step


@dataclass
class PongGame:
    score: float
    steps: int
    truncated: bool
    replaced: int        # actions the anti-stuck rule replaced
    points: list[Point]


def miss_dy(trace: Iterable[tuple[int, int, int]], paddle_x: int) -> int | None:
    """Ball y - paddle y at the last traced step with the ball short of the paddle's column, None if none."""
    before = [(by, py) for bx, by, py in trace if 0 < bx < paddle_x]
    return before[-1][0] - before[-1][1] if before else None


def play(game: RamAtari, logits_of: Callable[[np.ndarray], np.ndarray], rng: np.random.Generator, index: int,
         max_steps: int = PROTOCOL.max_episode_steps or 40_000, opening: int | None = None) -> PongGame:
    """One whole game under the paper protocol; `logits_of(observation stack) -> (1, actions) logits`.
    With `opening` (a no-op count): only the game's first point after exactly that many no-op frames, without
    the protocol's random action, so that the opening is the same every time it is played."""
    obs = game.reset(rng, opening)
    anti_stuck = AntiStuck(1, PROTOCOL.stuck_repeats, PROTOCOL.stuck_action)
    eps = (PROTOCOL.random_action_prob or 0.0) if opening is None else 0.0
    score, steps, replaced, points = 0.0, 0, 0, []
    recent: deque[tuple[int, int, int]] = deque(maxlen=TRACE)
    ram = game.ram()
    while not game.ale.game_over() and steps < max_steps and not (opening is not None and points):
        chosen = choose_actions(PROTOCOL.choice, logits_of(obs), rng, eps)
        played = anti_stuck(chosen, np.ones(1, bool))
        replaced += int(played[0] != chosen[0])
        before = (int(ram[AGENT_SCORE]), int(ram[CPU_SCORE]))
        r = game.step(int(played[0]))
        obs, steps, ram = game.stack, steps + 1, game.ram()
        recent.append((int(ram[BALL_X]), int(ram[BALL_Y]), int(ram[PADDLE_Y])))
        if r != 0:
            p = Point(index, len(points), steps, r > 0, *before)
            if r < 0:
                p.trace, p.miss_dy = list(recent), miss_dy(recent, int(ram[PADDLE_X]))
            points.append(p)
            score += r
    return PongGame(score, steps, not game.ale.game_over(), replaced, points)


def counts(values: list[int]) -> dict[str, int]:
    """How often each value occurs, by value, with string keys for JSON."""
    return {str(k): n for k, n in sorted(Counter(values).items())}


def summarize(games: list[PongGame]) -> dict[str, Any]:
    lost = [p for g in games for p in g.points if not p.won]
    numbers = [p.number for p in lost]
    per_game = [sum(not p.won for p in g.points) for g in games]
    dys = [p.miss_dy for p in lost if p.miss_dy is not None]
    return {
        "games": len(games), "score_mean": float(np.mean([g.score for g in games])),
        "scores": [g.score for g in games], "truncated_games": sum(g.truncated for g in games),
        "anti_stuck_replaced": sum(g.replaced for g in games),
        "points_lost": len(lost),
        "games_by_points_lost": counts(per_game),
        "lost_by_point_number": counts(numbers),
        "lost_first_point": numbers.count(0),
        "lost_step_median": float(np.median([p.step for p in lost])) if lost else None,
        "miss_dy": counts(dys),
    }


def plot(games: list[PongGame], path: str, title: str, openings: bool = False) -> None:
    """Lost points by point number (openings: by no-op count, each game's index), where they passed, traces."""
    plt = harness.pyplot()
    lost = [p for g in games for p in g.points if not p.won]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    if openings:
        axes[0].bar(range(len(games)), [sum(not p.won for p in g.points) for g in games])
        axes[0].set_xlabel("no-op frames before the first serve")
    else:
        n_max = max([p.number for p in lost] + [20])
        axes[0].bar(range(n_max + 1), [sum(p.number == k for p in lost) for k in range(n_max + 1)])
        axes[0].set_xlabel("point number in the game (0: the first)")
    axes[0].set_ylabel("points lost")
    axes[0].set_title(f"{len(lost)} points lost in {len(games)} games", fontsize=9)
    dys = [p.miss_dy for p in lost if p.miss_dy is not None]
    if dys:
        axes[1].hist(dys, bins=range(min(dys) - 1, max(dys) + 3, 2))
    axes[1].set_xlabel("ball y - paddle y before the ball passed (RAM units)")
    axes[1].set_title("where the lost balls went past the paddle", fontsize=9)
    for p in lost[:8]:
        t = np.asarray(p.trace, np.float64)
        t[(t[:, 0] == 0) | (t[:, 1] == 0), 1] = np.nan  # RAM 0: no ball on the screen (as a point is scored)
        line, = axes[2].plot(t[:, 1], lw=1, label=f"game {p.game} point {p.number}")
        axes[2].plot(t[:, 2], ls=":", lw=1, color=line.get_color())
    axes[2].set_xlabel(f"the last {TRACE} agent steps before the point")
    axes[2].set_ylabel("y (solid: ball, dotted: paddle)")
    axes[2].set_title("the first 8 lost points", fontsize=9)
    if lost:
        axes[2].legend(fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = diagnosis_parser(__doc__ or "", "pong-points", games=50)
    p.add_argument("--openings", action="store_true",
                   help=f"instead of --games whole games: the first point after each no-op count 0-{NOOP_MAX}, "
                        "without the random action (writes pong-openings[-TAG].*)")
    a = p.parse_args(argv)
    if a.games < 1:
        p.error("--games must be at least 1")
    found = load_model_for(a.checkpoint, "pong", "pong_points")
    if found is None:
        return 2
    loaded, model = found

    from ba3c.predictor import Predictor

    rng = np.random.default_rng(a.seed)
    game = RamAtari("pong", a.seed)
    predict = Predictor(model, game.stack.shape, game.stack.dtype)  # a traced forward pass: eager calls were slower

    def logits_of(obs: np.ndarray) -> np.ndarray:
        return predict(obs[None])[0]

    games = []
    for i in range(NOOP_MAX + 1 if a.openings else a.games):
        g = play(game, logits_of, rng, i, opening=i if a.openings else None)
        games.append(g)
        lost = [(q.number, q.step, q.miss_dy) for q in g.points if not q.won]
        if a.openings:
            outcome = "won" if g.score > 0 else "lost" if g.score < 0 else "not scored"  # none within the step cap
            print(f"{i} no-op frames: first point {outcome} at agent step {g.steps}", flush=True)
        else:
            print(f"game {i + 1}/{a.games}: score {g.score:+.0f}, {g.steps} agent steps; lost (point number, step, "
                  f"ball y - paddle y): {lost}", flush=True)
    summary = summarize(games)
    if a.openings:  # game i is the opening after i no-op frames
        summary = {"openings": len(games), "lost_noops": [i for i, g in enumerate(games) if g.score < 0],
                   "points_lost": summary["points_lost"], "miss_dy": summary["miss_dy"],
                   "lost_step_median": summary["lost_step_median"]}
    print("pong_points: " + ", ".join(f"{k} {v}" for k, v in summary.items() if k != "scores"))
    name = ("pong-openings" if a.openings else "pong-points") + (f"-{a.tag}" if a.tag else "")
    what = ("the first point of a Pong game after each no-op count (argmax, the anti-stuck rule, no random action)"
            if a.openings else "which points a Pong checkpoint loses, paper protocol")
    os.makedirs(a.out_dir, exist_ok=True)
    write_json(os.path.join(a.out_dir, name + ".json"), {
        "what": what + " on one RAM-read emulator (ball RAM[49]/[54], paddle RAM[51]/[46]); coordinates in RAM units",
        "command": "python -m benchmarks.pong_points " + " ".join(sys.argv[1:] if argv is None else argv),
        "checkpoint": loaded.checkpoint.path, "date": harness.now(), "machine": harness.machine(),
        "summary": summary,
        "lost_points": [asdict(q) for g in games for q in g.points if not q.won],
    })
    plot(games, os.path.join(a.out_dir, name + ".png"),
         f"Pong, {os.path.basename(loaded.checkpoint.path)}: " + (
             f"first point after 0-{NOOP_MAX} no-op frames, {len(summary['lost_noops'])} lost" if a.openings else
             f"{len(games)} games, paper protocol, mean {summary['score_mean']:.2f}"), openings=a.openings)
    print(f"pong_points: wrote {os.path.join(a.out_dir, name)}.{{json,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
