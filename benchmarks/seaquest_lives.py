"""How do a Seaquest agent's lives end: out of oxygen, or hit? (offline, reads the emulator's RAM)

    python -m benchmarks.seaquest_lives runs/seaquest-terminal --games 10
    python -m benchmarks.seaquest_lives runs/seaquest-terminal/checkpoints/keep-0000019500.npz --games 3 --tag 5M

Seaquest's sub has to come up for air: its oxygen runs down under water and a life ends when it is
empty. A score plateau near 1,800 fits an agent that shoots but never surfaces (four lives of one tank
each); this measures it instead of guessing from the scores. It plays greedy games (argmax, a random
action with p=0.001 and FIRE after each lost life, as the paper protocol and `--life-loss terminal`
training do; no anti-stuck rule) on one ALE emulator of its own (`benchmarks.ram_atari`), whose RAM it
reads after every agent step: oxygen (RAM[102], 64 full, 0 empty) and the sub's depth (RAM[97], 13 at
the surface).

Per life it records how many agent steps it lasted, the oxygen reading before the tank first read 0,
and how often the tank refilled at the surface after a dive (a breath). Every death empties the tank
at once (it reads 0 through the death and the next sub's start, then fills), so a hit shows the level
it had (54-63 for the random and scripted play tried), while a tank that ran out shows 1: that is
the life counted as out of oxygen. Writes benchmarks/results/seaquest-lives[-TAG].{json,png}: the
summary, every life, and the first game's oxygen and depth per step.
"""
from __future__ import annotations

import os
import sys
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

import numpy as np

from ba3c.files import write_json
from benchmarks import harness
from benchmarks.ram_atari import RamAtari, diagnosis_parser, load_model_for

OXYGEN, DEPTH = 102, 97   # Seaquest RAM addresses (Activision's Seaquest; atariari's annotations)
SURFACE = 13              # RAM[97] with the sub at the surface
DIVED = 20                # RAM[97] deeper than this: under water
RANDOM_ACTION_P = 0.001   # as the paper protocol
MAX_STEPS = 40_000        # the paper protocol's cap, in agent steps


@dataclass
class Life:
    steps: int = 0
    oxygen_before_empty: int = -1  # the reading before the tank first read 0 (it reads 0 through every death)
    breaths: int = 0              # refills at the surface after a dive, with oxygen left
    deepest: int = 0              # largest RAM[97]
    dived: bool = False           # under water since the last surfacing

    def observe(self, before: int, oxygen: int, depth: int) -> None:
        """One agent step: the oxygen reading before it and after it, and the depth after it."""
        self.steps += 1
        self.deepest = max(self.deepest, depth)
        if oxygen == 0 and before > 0 and self.oxygen_before_empty < 0:
            self.oxygen_before_empty = before
        if oxygen == 0:
            self.dived = False  # dying: the next refill is a new life's
        elif depth > DIVED:
            self.dived = True
        elif self.dived and depth <= SURFACE and before < oxygen:
            self.dived = False
            self.breaths += 1

    @property
    def out_of_oxygen(self) -> bool:
        return self.oxygen_before_empty == 1  # ran down to empty; a hit empties it at once from where it was


@dataclass
class Game:
    score: float
    steps: int
    lives: list[Life]
    oxygen: list[int] = field(default_factory=list)  # per agent step (recorded for the first game only)
    depth: list[int] = field(default_factory=list)


def play(game: RamAtari, choose: Callable[[np.ndarray], int], rng: np.random.Generator, record: bool,
         max_steps: int = MAX_STEPS) -> Game:
    """One whole game; `choose(observation stack) -> action index`."""
    ale = game.ale
    obs = game.reset(rng)
    score, steps, lives = 0.0, 0, [Life()]
    lives_left = ale.lives()
    oxygen = int(game.ram()[OXYGEN])
    fire_next = False
    assert game.fire is not None  # Seaquest has FIRE
    trace_o, trace_d = [], []
    while not ale.game_over() and steps < max_steps:
        if fire_next:
            a = game.fire
        elif rng.random() < RANDOM_ACTION_P:
            a = int(rng.integers(0, len(game.actions)))
        else:
            a = choose(obs)
        fire_next = False
        before = oxygen
        score += game.step(a)
        obs, steps = game.stack, steps + 1
        ram = game.ram()
        oxygen, depth = int(ram[OXYGEN]), int(ram[DEPTH])
        lives[-1].observe(before, oxygen, depth)
        if record:
            trace_o.append(oxygen)
            trace_d.append(depth)
        if ale.lives() < lives_left or ale.game_over():
            lives_left = ale.lives()
            if not ale.game_over():
                lives.append(Life())
                fire_next = True  # trained with FIRE after a lost life
    return Game(score, steps, lives, trace_o, trace_d)


def life_record(life: Life) -> dict[str, Any]:
    d = asdict(life)
    del d["dived"]
    return {**d, "out_of_oxygen": life.out_of_oxygen}


def summarize(games: list[Game]) -> dict[str, Any]:
    lives = [life for g in games for life in g.lives]
    scores = [g.score for g in games]
    return {
        "games": len(games),
        "score_mean": float(np.mean(scores)), "score_min": float(np.min(scores)), "score_max": float(np.max(scores)),
        "lives": len(lives),
        "lives_out_of_oxygen": sum(life.out_of_oxygen for life in lives),
        "lives_with_a_breath": sum(life.breaths > 0 for life in lives),
        "breaths": sum(life.breaths for life in lives),
        "life_steps_median": float(np.median([life.steps for life in lives])),
    }


def plot(game: Game, path: str, title: str) -> None:
    plt = harness.pyplot()
    fig, ax = plt.subplots(figsize=(10, 4))
    ax.plot(game.oxygen, label="oxygen, RAM[102] (64 full)")
    ax.plot(game.depth, label="depth, RAM[97] (13 at the surface)", alpha=0.7)
    ends = np.cumsum([life.steps for life in game.lives])[:-1]
    for x in ends:
        ax.axvline(x, color="k", ls=":", lw=1)
    ax.set_xlabel("agent step (dotted: a life lost)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = diagnosis_parser(__doc__ or "", "seaquest-lives", games=10)
    a = p.parse_args(argv)
    if a.games < 1:
        p.error("--games must be at least 1")
    found = load_model_for(a.checkpoint, "seaquest", "seaquest_lives")
    if found is None:
        return 2
    loaded, model = found

    def choose(obs: np.ndarray) -> int:
        logits, _ = model(obs[None], training=False)
        return int(np.argmax(np.asarray(logits)[0]))

    rng = np.random.default_rng(a.seed)
    game = RamAtari("seaquest", a.seed)
    games = []
    for i in range(a.games):
        g = play(game, choose, rng, record=i == 0)
        games.append(g)
        print(f"game {i + 1}/{a.games}: score {g.score:.0f}, {g.steps} agent steps, lives lasted "
              f"{[life.steps for life in g.lives]}, oxygen before empty {[life.oxygen_before_empty for life in g.lives]}, "
              f"breaths {[life.breaths for life in g.lives]}", flush=True)
    summary = summarize(games)
    print("seaquest_lives: " + ", ".join(f"{k} {v}" for k, v in summary.items()))
    name = "seaquest-lives" + (f"-{a.tag}" if a.tag else "")
    os.makedirs(a.out_dir, exist_ok=True)
    write_json(os.path.join(a.out_dir, name + ".json"), {
        "what": "how a Seaquest checkpoint's lives end (RAM[102] oxygen, RAM[97] depth), greedy play",
        "command": "python -m benchmarks.seaquest_lives " + " ".join(sys.argv[1:] if argv is None else argv),
        "checkpoint": loaded.checkpoint.path, "date": harness.now(), "machine": harness.machine(),
        "summary": summary,
        "games": [{"score": g.score, "steps": g.steps, "lives": [life_record(life) for life in g.lives]} for g in games],
        "first_game_trace": {"oxygen": games[0].oxygen, "depth": games[0].depth},
    })
    plot(games[0], os.path.join(a.out_dir, name + ".png"),
         f"Seaquest, {os.path.basename(loaded.checkpoint.path)}: first game, score {games[0].score:.0f}")
    print(f"seaquest_lives: wrote {os.path.join(a.out_dir, name)}.{{json,png}}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
