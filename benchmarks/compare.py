"""Our evaluation scores beside the BA3C paper's, Gorila's, A2C's and PPO's at 40 M frames, and human and random play.

    python -m benchmarks.compare [PATH ...] [--published benchmarks/published_scores.csv] [--out DIR]
    python -m benchmarks.compare benchmarks/results/scores --readme README.md --readme docs/results/scores.md

Reads every evaluation JSON written by `python -m ba3c.evaluate` (files tagged with
"schema": "ba3c-eval/1") found under the given files or directories (default:
benchmarks/results/scores/ and runs/), and writes OUT/SCORES.md (a table per game and policy) and
OUT/scores.png (one bar chart per game). Published numbers come only from the CSV file, with
their protocol and citation. When one game and policy has several evaluations, the one of the
checkpoint with the most training frames is shown (the newest evaluation on a tie).

An evaluation written by a `make paper-games` campaign (benchmarks/paper_games.py) carries the campaign's name
("campaign": "games2"); its rows are kept apart from the earlier runs' rows, one per training seed. SCORES.md's
"Campaigns" section and the README's table show a campaign's seeds of a game as one row: the mean of the seeds'
50-game means and their range [min, max] over seeds, the number of seeds, frames per run and the core-hours of all
its runs together.

With --readme FILE (repeatable) the generated sections of FILE are rewritten, each between its two
marker lines (`SECTIONS`): the headline table (the paper's six games, paper protocol, no sticky actions: one row
each, the CAMPAIGN's runs of a game where it has any, otherwise the earlier run of the default seed), every
paper-protocol row, and the scaling headline (from --scaling, benchmarks/results/scaling/scaling.json). A FILE
holds any of them; one with none is an error. tests/docs/test_readme.py regenerates them from the committed results
and fails when a copy differs.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ba3c.config import LearnConfig
from measure import harness

DEFAULT_ALGO = LearnConfig.algo  # rows of other algorithms are noted as such

REPO = Path(__file__).resolve().parents[1]
DEFAULT_PUBLISHED = REPO / "benchmarks" / "published_scores.csv"
SCORES_DIR = REPO / "benchmarks" / "results" / "scores"  # the committed evaluations, SCORES.md and scores.png
SCALING_JSON = REPO / "benchmarks" / "results" / "scaling" / "scaling.json"
DEFAULT_PATHS = (SCORES_DIR, REPO / "runs")
EVAL_SCHEMA = "ba3c-eval/1"  # ba3c.evaluate.SCHEMA (not imported: this script needs no TensorFlow or ba3c on the path)
SOURCES = ("ba3c_paper", "gorila", "a2c_zoo", "ppo_cleanrl", "human", "random")
SOURCE_TITLES = {"ba3c_paper": "BA3C paper", "gorila": "Gorila", "a2c_zoo": "A2C, 40M frames (SB3 zoo)",
                 "ppo_cleanrl": "PPO, 40M frames (CleanRL)", "human": "Human", "random": "Random"}
STANDARD_MAX_EPISODE_FRAMES = 108_000  # ba3c.evaluate's default: 30 minutes of play
README_BEGIN, README_END = "<!-- scores table: benchmarks/compare.py --readme -->", "<!-- end of scores table -->"
ALL_PAPER_BEGIN, ALL_PAPER_END = ("<!-- paper-protocol scores: benchmarks/compare.py --readme -->",
                                  "<!-- end of paper-protocol scores -->")
SCALING_BEGIN, SCALING_END = "<!-- scaling table: benchmarks/compare.py --readme -->", "<!-- end of scaling table -->"
# The paper's six games, in the order of its results table (arXiv 1801.02852)
PAPER_GAMES = ("breakout", "pong", "space_invaders", "seaquest", "boxing", "beam_rider")
MAX_JSON_BYTES = 5_000_000  # evaluation files are small; skip anything big found while walking runs/
# benchmarks/paper_games.py's campaign (the six games re-run under one default, Breakout and Boxing with three seeds):
# the README's table shows its runs of a game where it has any
CAMPAIGN = "games2"


class CompareError(ValueError):
    pass


@dataclass(frozen=True)
class Published:
    score: float
    protocol: str
    citation: str


@dataclass(frozen=True)
class Row:
    game: str
    policy: str               # our protocol, short: greedy, sampled, egreedy 0.05
    protocol_note: str        # what differs from the standard protocol (episode cap), else ""
    mean: float
    std: float
    episodes: int
    frames: int | None
    train_wall_s: float | None
    core_hours: float | None
    published: dict[str, float]  # source -> score, only the sources that report this game
    path: str
    train_seed: int = 0               # the evaluated run's --seed
    train_sticky_actions: float = 0.0  # the evaluated run's --sticky-actions
    sticky_actions: float = 0.0       # the evaluation's repeat-action probability
    fire_after_life_loss: bool = False  # FIRE pressed after a lost life: the run trained with --life-loss terminal
    algo: str = "ba3c"                # the evaluated run's --algo: ba3c or gorila
    campaign: str = ""                # the paper_games campaign that made the run ("": none, an earlier run)


def load_published(path: str | Path) -> dict[str, dict[str, Published]]:
    """game -> source -> published score; one (game, source) pair may appear only once."""
    out: dict[str, dict[str, Published]] = {}
    with open(path, newline="") as fh:
        for i, r in enumerate(csv.DictReader(fh), start=2):
            game, source = r["game"].strip(), r["source"].strip()
            if source in out.get(game, {}):
                raise CompareError(f"{path}:{i}: duplicate entry for {game} / {source}")
            out.setdefault(game, {})[source] = Published(float(r["score"]), r["protocol"], r["citation"])
    return out


def find_evals(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Every ba3c evaluation JSON under the paths (files or directories), with its file in "_path"."""
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_file():
            files.append(p)
        elif p.is_dir():
            files += sorted(Path(d) / n for d, _, names in os.walk(p) for n in names if n.endswith(".json"))
    found = []
    for f in files:
        if f.stat().st_size > MAX_JSON_BYTES:
            continue
        try:
            data = json.loads(f.read_text())
        except (OSError, ValueError, UnicodeDecodeError):
            continue  # not ours (or half-written): ignore, the tag below is what identifies our files
        if isinstance(data, dict) and data.get("schema") == EVAL_SCHEMA:
            found.append({**data, "_path": str(f)})
    return found


def policy_label(ev: dict[str, Any]) -> str:
    return f"egreedy {ev.get('epsilon')}" if ev["policy"] == "egreedy" else ev["policy"]


def sticky_actions(ev: dict[str, Any]) -> float:
    """The repeat-action probability an evaluation played (records from before the option: none, 0)."""
    return float((ev.get("protocol") or {}).get("sticky_actions") or 0.0)


def train_seed(ev: dict[str, Any]) -> int:
    """The seed the evaluated run trained with (records from before the field: 0, the default, which every
    run committed before it used, as their time_to_score-*-config.json files show)."""
    return int(ev.get("train_seed") or 0)


def train_sticky_actions(ev: dict[str, Any]) -> float:
    """The repeat-action probability the evaluated run trained with (records from before the field: 0, as
    every run before the option trained)."""
    return float(ev.get("train_sticky_actions") or 0.0)


def algo(ev: dict[str, Any]) -> str:
    """The algorithm the evaluated run trained with (records from before the field: ba3c, the only one then)."""
    return str(ev.get("algo") or DEFAULT_ALGO)


def algo_title(name: str) -> str:
    """The algorithm's name in the table ("Gorila"); its --algo value where this process cannot load it."""
    from ba3c import algos

    try:
        return algos.get(name).title or name
    except ValueError:
        return name


def fire_after_life_loss(ev: dict[str, Any]) -> bool:
    """FIRE was pressed for the policy after a lost life: the run trained with --life-loss terminal."""
    return str((ev.get("protocol") or {}).get("fire_after_life_loss", "")).startswith("FIRE")


def campaign(ev: dict[str, Any]) -> str:
    """The paper_games campaign that made the evaluated run ("" for the runs before campaigns were named)."""
    return str(ev.get("campaign") or "")


def select(evals: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One evaluation per (game, policy, sticky actions played, training seed, sticky actions trained with,
    lost lives terminal or not, algorithm, campaign): most training frames, then newest."""
    best: dict[tuple[str, str, float, int, float, bool, str, str], dict[str, Any]] = {}
    for ev in evals:
        key = (ev["game"], policy_label(ev), sticky_actions(ev), train_seed(ev), train_sticky_actions(ev),
               fire_after_life_loss(ev), algo(ev), campaign(ev))
        rank = (ev.get("frames") or 0, ev.get("date") or "")
        if key not in best or rank > (best[key].get("frames") or 0, best[key].get("date") or ""):
            best[key] = ev
    return [best[k] for k in sorted(best)]


def build_rows(evals: list[dict[str, Any]], published: dict[str, dict[str, Published]]) -> list[Row]:
    rows = []
    for ev in select(evals):
        pub = published.get(ev["game"], {})
        proto = ev.get("protocol") or {}
        cap, steps = proto.get("max_episode_frames"), proto.get("max_episode_steps")
        notes = [f"campaign {campaign(ev)}" if campaign(ev) else "",
                 "" if algo(ev) == DEFAULT_ALGO else f"trained by {algo_title(algo(ev))}",
                 "" if cap is None or cap == STANDARD_MAX_EPISODE_FRAMES
                 else f"cap {steps:,} agent steps" if steps else f"cap {cap:,} frames",
                 "FIRE after a lost life" if fire_after_life_loss(ev) else "",
                 f"sticky actions {sticky_actions(ev):g}" if sticky_actions(ev) else "",
                 f"training seed {train_seed(ev)}" if train_seed(ev) else "",
                 f"trained with sticky actions {train_sticky_actions(ev):g}" if train_sticky_actions(ev) else ""]
        note = ", ".join(n for n in notes if n)
        rows.append(Row(game=ev["game"], policy=policy_label(ev), protocol_note=note,
                        mean=float(ev["score"]["mean"]), std=float(ev["score"]["std"]),
                        episodes=int(ev["episodes"]), frames=ev.get("frames"),
                        train_wall_s=ev.get("train_wall_s"), core_hours=ev.get("core_hours"),
                        published={s: pub[s].score for s in SOURCES if s in pub}, path=ev["_path"],
                        train_seed=train_seed(ev), train_sticky_actions=train_sticky_actions(ev),
                        sticky_actions=sticky_actions(ev), fire_after_life_loss=fire_after_life_loss(ev),
                        algo=algo(ev), campaign=campaign(ev)))
    return rows


def human_normalized(score: float, human: float | None, random: float | None) -> float | None:
    """100 * (score - random) / (human - random), the usual Atari normalisation; None without both baselines."""
    if human is None or random is None or human == random:
        return None
    return 100.0 * (score - random) / (human - random)


def title(game: str) -> str:
    return game.replace("_", " ").title() if game.islower() else game


def _display(path: str | Path) -> str:
    p = Path(path).resolve()
    return str(p.relative_to(REPO)) if p.is_relative_to(REPO) else str(path)


def _num(x: float | None, fmt: str = "{:,.1f}") -> str:
    return "–" if x is None else fmt.format(x)


def _score(mean: float, std: float) -> str:
    """Two decimals below 100 points (Pong, Boxing: one decimal would show 19.96 as 20.0 beside a target of 20),
    one above; the std at the mean's precision."""
    d = 2 if abs(mean) < 100 else 1
    return f"{mean:,.{d}f} ± {std:,.{d}f}"


def _frames(f: int | None) -> str:
    return "–" if f is None else f"{f / 1e6:.1f}M" if f >= 1e5 else f"{f:,}"


def render_table(rows: list[Row]) -> list[str]:
    """The scores table, one Markdown line per row (SCORES.md's and the README's)."""
    head = ["Game", "Ours (mean ± std)", "Our protocol", "Episodes", "Frames", "Train wall (h)", "Core-hours",
            *(SOURCE_TITLES[s] for s in SOURCES), "Ours, human-normalized"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        hn = human_normalized(r.mean, r.published.get("human"), r.published.get("random"))
        ours_protocol = ", ".join(x for x in (r.policy, r.protocol_note) if x)
        cells = [title(r.game), _score(r.mean, r.std), ours_protocol, str(r.episodes), _frames(r.frames),
                 _num(None if r.train_wall_s is None else r.train_wall_s / 3600, "{:,.2f}"),
                 _num(r.core_hours, "{:,.2f}"), *(_num(r.published.get(s)) for s in SOURCES),
                 _num(hn, "{:,.0f}%")]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


@dataclass(frozen=True)
class GameRow:
    """A row of the README's table: one run's evaluation, or a campaign's runs of one game (one per seed)."""
    runs: tuple[Row, ...]  # by training seed

    @property
    def game(self) -> str:
        return self.runs[0].game

    @property
    def algo(self) -> str:
        return self.runs[0].algo

    @property
    def campaign(self) -> str:
        return self.runs[0].campaign

    @property
    def seeds(self) -> tuple[int, ...]:
        return tuple(r.train_seed for r in self.runs)

    @property
    def mean(self) -> float:
        """One run: its 50-game mean; several: the mean of their 50-game means (each seed weighs the same)."""
        return statistics.fmean(r.mean for r in self.runs)

    @property
    def low(self) -> float:
        return min(r.mean for r in self.runs)

    @property
    def high(self) -> float:
        return max(r.mean for r in self.runs)

    @property
    def core_hours(self) -> float | None:
        """All runs together (None when one of them has none)."""
        hours = [r.core_hours for r in self.runs]
        return None if None in hours else sum(hours)

    @property
    def published(self) -> dict[str, float]:
        return self.runs[0].published


def _headline_kind(r: Row) -> bool:
    """A row the README's table may show: the paper protocol without sticky actions, of a BA3C run trained
    without sticky actions."""
    return r.policy == "paper" and r.algo == DEFAULT_ALGO and not r.sticky_actions and not r.train_sticky_actions


def campaign_rows(rows: list[Row]) -> list[GameRow]:
    """Each campaign's runs of each game (any game, every seed) as one row, by campaign then game; one run per seed
    (the one with the most frames, should a seed have two, e.g. with and without terminal lost lives)."""
    groups: dict[tuple[str, str], dict[int, Row]] = {}
    for r in rows:
        if r.campaign and _headline_kind(r):
            seeds = groups.setdefault((r.campaign, r.game), {})
            if r.train_seed not in seeds or (r.frames or 0) > (seeds[r.train_seed].frames or 0):
                seeds[r.train_seed] = r
    return [GameRow(tuple(groups[k][seed] for seed in sorted(groups[k]))) for k in sorted(groups)]


def headline_rows(rows: list[Row]) -> list[GameRow]:
    """The README's table, per paper game: the CAMPAIGN's runs of it (every seed) where it has any; otherwise the
    earlier run (no campaign) of the default seed (0): of a game's runs with and without terminal lost lives, the
    one with them (the default for Atari games since 2026-12-02), then the one with more frames."""
    ours = {g.game: g for g in campaign_rows(rows) if g.campaign == CAMPAIGN}
    earlier: dict[str, Row] = {}
    for r in rows:
        if _headline_kind(r) and not r.campaign and not r.train_seed:
            old = earlier.get(r.game)
            if old is None or (r.fire_after_life_loss, r.frames or 0) > (old.fire_after_life_loss, old.frames or 0):
                earlier[r.game] = r
    return [ours[g] if g in ours else GameRow((earlier[g],)) for g in PAPER_GAMES if g in ours or g in earlier]


def _seeds_score(g: GameRow) -> str:
    """One run: mean ± std over its games; several: the mean of their means, [min, max] over seeds."""
    if len(g.runs) == 1:
        return _score(g.runs[0].mean, g.runs[0].std)
    d = 2 if abs(g.mean) < 100 else 1
    return f"{g.mean:,.{d}f} [{g.low:,.{d}f}, {g.high:,.{d}f}]"


def _runs(g: GameRow) -> str:
    """How many seeds, which, and from which campaign ("earlier runs": before campaigns were named)."""
    n = len(g.runs)
    return f"{n} seed{'s' if n > 1 else ''} ({', '.join(map(str, g.seeds))}), {g.campaign or 'earlier runs'}"


def _lost_lives(g: GameRow) -> str:
    terminal = {r.fire_after_life_loss for r in g.runs}
    return "mixed" if len(terminal) > 1 else "terminal" if terminal.pop() else "not terminal"


def _frames_per_run(g: GameRow) -> str:
    frames = sorted({r.frames for r in g.runs}, key=lambda f: f or 0)
    return _frames(frames[0]) if len(frames) == 1 else f"{_frames(frames[0])} to {_frames(frames[-1])}"


HEADLINE_PUBLISHED = ("ba3c_paper", "gorila", "a2c_zoo", "ppo_cleanrl")


def render_headline(rows: list[GameRow]) -> list[str]:
    """Ours beside the paper, Gorila, A2C and PPO: one row per game (the README's table, SCORES.md's campaigns)."""
    head = ["Game", "Ours (50 games a run: mean ± std; several seeds: mean of their means [min, max])", "Runs",
            "Lost lives in training", "Frames per run", "Core-hours (all runs)",
            *(SOURCE_TITLES[s] for s in HEADLINE_PUBLISHED)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for g in rows:
        cells = [title(g.game), _seeds_score(g), _runs(g), _lost_lives(g), _frames_per_run(g),
                 _num(g.core_hours, "{:,.2f}"), *(_num(g.published.get(s)) for s in HEADLINE_PUBLISHED)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def render_paper_rows(rows: list[Row]) -> list[str]:
    """Every paper-protocol evaluation shown in SCORES.md (other seeds, sticky actions), with its file."""
    head = ["Game", "Ours (mean ± std)", "Notes", "Episodes", "Frames", "Core-hours", "BA3C paper", "File"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted((r for r in rows if r.policy == "paper"), key=lambda r: (PAPER_GAMES.index(r.game)
                    if r.game in PAPER_GAMES else len(PAPER_GAMES), r.game, r.campaign, r.train_seed,
                    r.sticky_actions, r.train_sticky_actions)):
        note = r.protocol_note.replace("cap 40,000 agent steps", "").strip(", ")
        cells = [title(r.game), _score(r.mean, r.std), note or "-", str(r.episodes), _frames(r.frames),
                 _num(r.core_hours, "{:,.2f}"), _num(r.published.get("ba3c_paper")), f"`{Path(r.path).name}`"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


README_NETWORKS = ("ib100", "10gbe")  # the projection's networks in the README (10 GbE at the measured fraction)


def render_scaling(path: str | Path) -> list[str]:
    """The scaling headline from a scaling.json: measured frames/s and efficiency on this machine, the 64-node
    frames/s projection, and minutes to a score per node count (time_to_score_envelope, written by
    benchmarks/plan.py), both from the one node model (benchmarks/node_model.py) and labelled modelled."""
    d = json.loads(Path(path).read_text())
    lines = ["| setting | frames/s | weak-scaling efficiency | measured or modelled |", "|---|---|---|---|"]
    for m in d["measured"]:
        if m["layout"] == "core" and m["exchange"] == "sync":
            what = "1 rank, 1 core" if m["ranks"] == 1 else f"{m['ranks']} ranks, 1 core each"
            lines.append(f"| {what} | {m['frames_per_s']:,.0f} | {m['efficiency']:.2f} | measured, {d['date'][:10]} |")
    for p in d.get("projection", []):
        if (p["nodes"] == 64 and p["exchange"] == "sync" and p["per_node_batch"] == 32
                and p["network"] in README_NETWORKS):
            lines.append(f"| 64 nodes x {p['cores']} cores, 32 per node, {p['network_name']} | "
                         f"{p['frames_per_s']:,.0f} | {p['efficiency']:.2f} | modelled |")
    env = d.get("time_to_score_envelope")
    if not env or "games" not in env:
        return lines
    games, nets = env["games"], list(env["networks"])
    net_name = {"ib100": "IB", "10gbe": "10 GbE"}
    cores = env["settings"]["cores_per_node"]
    lines += ["", f"Minutes to a score on N nodes of {cores} cores (modelled by `benchmarks/plan.py` with the same "
                  "node model; core-hours in brackets; B: the planner's global batch, per node in brackets; eff: "
                  "against the best 1-node layout):", "",
              "| nodes | " + " | ".join(
                  f"{g['name']}, {net_name.get(k, k)}: min (core-h)" + (" | B | eff" if k == nets[0] else "")
                  for g in games.values() for k in nets) + " |",
              "|---" * (1 + len(games) * (len(nets) + 2)) + "|"]
    for i, r0 in enumerate(next(iter(games.values()))["by_network"][nets[0]]):
        cells = [str(r0["nodes"])]
        for g in games.values():
            for k in nets:
                r = g["by_network"][k][i]
                cells.append(f"{r['minutes']:.1f} ({r['core_hours']:,.0f})")
                if k == nets[0]:
                    cells += [f"{r['global_batch']:,} ({r['per_node_batch']})", f"{r['efficiency_vs_linear']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    paper = env["paper"]
    lines += ["", f"IB: 100 Gb/s InfiniBand ({env['networks'][nets[0]]['source']}); 10 GbE: "
                  f"{env['networks'][nets[1]]['source'].split(';')[0]}. The paper ({paper['source']}): "
                  f"{paper['game']} in {paper['minutes']:.0f} minutes on {paper['nodes']} nodes, {paper['cores']} "
                  f"cores ({paper['minutes'] / 60 * paper['cores']:,.0f} core-hours)."]
    goal = env.get("goal")
    if goal:
        lines.append(f"The design goal, Breakout 300 on {goal['nodes']} nodes in {goal['goal_minutes']:.0f} minutes on "
                     f"InfiniBand, is {'met' if goal['met'] else 'not met'} by the model ({goal['minutes']:.2f} "
                     f"minutes: {goal['updates']:,.0f} updates x {1e3 * goal['step_s']:.1f} ms)"
                     + ("." if goal["met"] else
                        f"; it needs {1e3 * goal['needed_step_s']:.1f} ms per update (a fixed cost of "
                        f"{1e3 * goal['needed_fixed_s']:.1f} ms instead of {1e3 * goal['fixed_s']:.1f}) or "
                        f"{goal['needed_updates']:,.0f} updates."))
    lines.append("Updates to the score (measured): " + "; ".join(
        f"{g['name']}: " + ", ".join(f"{u['updates']:,.0f} at batch {u['global_batch']}" for u in g["updates_measured"])
        for g in games.values()) + ". The runs' settings: " + "; ".join(r for g in games.values() for r in g["runs"])
        + ".")
    return lines


# marker pairs of the generated sections a Markdown file may hold
SECTIONS = ((README_BEGIN, README_END), (ALL_PAPER_BEGIN, ALL_PAPER_END), (SCALING_BEGIN, SCALING_END))


def sections(rows: list[Row], scaling_json: str | Path | None) -> dict[tuple[str, str], list[str]]:
    """Each generated section's lines, by its markers (the scaling one only with a scaling.json)."""
    out = {(README_BEGIN, README_END): render_headline(headline_rows(rows)),
           (ALL_PAPER_BEGIN, ALL_PAPER_END): render_paper_rows(rows)}
    if scaling_json:
        out[(SCALING_BEGIN, SCALING_END)] = render_scaling(scaling_json)
    return out


def committed_sections() -> dict[tuple[str, str], list[str]]:
    """The generated sections from the committed results alone (what README.md and the docs must show)."""
    rows = build_rows(find_evals([SCORES_DIR]), load_published(DEFAULT_PUBLISHED))
    return sections(rows, SCALING_JSON)


def section_span(text: str, begin: str, end: str) -> tuple[int, int] | None:
    """Where a section's lines go in `text`: after `begin`, before `end`; None when `begin` is absent."""
    b = text.find(begin)
    if b < 0:
        return None
    e = text.find(end, b)
    if e < 0:
        raise CompareError(f"{begin} has no {end} after it: put the two lines in this order around the section")
    return b + len(begin), e


def readme_section(path: str | Path, text: str) -> tuple[int, int]:
    """Where the scores table goes in `text` (the file at `path`): a clear error when the markers are missing or
    out of order."""
    begin, end = text.find(README_BEGIN), text.find(README_END)
    if begin < 0 or end < begin:
        raise CompareError(f"{path} has no scores section: put the lines {README_BEGIN} and {README_END} "
                           f"(in this order) where the table belongs")
    return begin + len(README_BEGIN), end


def check_markers(path: str | Path, text: str) -> None:
    """A file to fill must hold at least one section, each with its end marker after it."""
    try:
        spans = [section_span(text, b, e) for b, e in SECTIONS]
    except CompareError as e:
        raise CompareError(f"{path}: {e}") from None
    if not any(spans):
        readme_section(path, text)  # says which lines to add


def filled(text: str, table: dict[tuple[str, str], list[str]]) -> str:
    """`text` with every section it holds replaced by its lines (blank lines around them: Markdown ends a table)."""
    for (begin, end), lines in table.items():
        span = section_span(text, begin, end)
        if span:
            text = text[:span[0]] + "\n\n" + "\n".join(lines) + "\n\n" + text[span[1]:]
    return text


def fill_readme(path: str | Path, table: dict[tuple[str, str], list[str]]) -> None:
    """Rewrite the generated sections of `path` (written beside, then renamed over, so a crash leaves the old
    file whole)."""
    text = Path(path).read_text()
    check_markers(path, text)
    tmp = Path(str(path) + ".new")
    tmp.write_text(filled(text, table))
    os.replace(tmp, path)


def render_markdown(rows: list[Row], published: dict[str, dict[str, Published]], published_path: str) -> str:
    lines = ["# Scores", "",
             "Our numbers: `python -m ba3c.evaluate` (raw game score of full games, up to 30 no-op starts, "
             "no sticky actions, episodes capped at 108,000 frames unless noted). Published numbers: "
             f"`{_display(published_path)}`. Protocols differ, so read the comparison with them in mind "
             "(see the notes).", "",
             *render_table(rows)]
    campaigns = campaign_rows(rows)
    if campaigns:
        lines += ["", "## Campaigns", "",
                  "Each `make paper-games` campaign's runs of a game as one row (paper protocol, 50 games a run): "
                  "with several seeds, the mean of the seeds' 50-game means and, in brackets, the lowest and highest "
                  "of them; frames per run; core-hours of all the runs together.", "",
                  *render_headline(campaigns)]
    lines += ["", "## Notes", ""]
    shown = {s for r in rows for s in r.published}
    for s in SOURCES:
        if s not in shown:
            continue
        entries = [g[s] for g in published.values() if s in g]
        protocols = sorted({e.protocol for e in entries})
        citations = sorted({e.citation for e in entries})
        lines.append(f"* **{SOURCE_TITLES[s]}**: {'; '.join(protocols)}. {' / '.join(citations)}.")
    if any(r.policy == "paper" for r in rows):
        lines.append("* Our **paper** protocol is the BA3C authors' evaluation (argmax, a random action with "
                     "probability 0.001, action 1 (FIRE) at 30 identical choices in a row, episodes capped at "
                     "40,000 agent steps) "
                     "on our environment (ALE, frameskip 4, no sticky actions); they played gym's *-v0 games (sticky "
                     "actions 0.25, frameskip 2-4). Our **greedy** rows are plain argmax, without the anti-stuck rule.")
    for name in sorted({r.algo for r in rows} - {DEFAULT_ALGO}):
        t = algo_title(name)
        lines.append(f"* A row noted \"trained by {t}\" is our {t} (`--algo {name}`), played with the protocol its "
                     f"row names (DQN's, Gorila's, is epsilon-greedy 0.05); the others are our BA3C.")
    if "gorila" in shown:
        lines.append("* Gorila's numbers are from its human-starts evaluation (episodes start from states "
                     "sampled from human play), a harder protocol than our no-op starts.")
    if {"a2c_zoo", "ppo_cleanrl"} & shown:
        lines.append("* A2C and PPO are other algorithms at a comparable budget (10 M agent steps = 40 M frames; ours "
                     "states its frames in its row): the zoo's number is one trained agent evaluated with its "
                     "stochastic policy, CleanRL's the mean training return of 3 seeds at the end of training "
                     "(lost lives end its training episodes, the return counts full games), neither with the "
                     "paper's greedy protocol.")
    if any(r.train_sticky_actions for r in rows):
        lines.append("* A row noted \"trained with sticky actions P\" comes from a run trained with "
                     "`--sticky-actions P` "
                     "(the others trained without); \"sticky actions P\" alone says how the evaluation was played.")
    if any(r.train_seed for r in rows):
        lines.append("* Rows without a training seed come from runs of the default seed (0); a row noted "
                     "\"training seed N\" is another run of the same config with `--seed N`, shown beside it, so "
                     "that one run's luck is not the only number.")
    lines.append("* Core-hours: measured CPU seconds of all ranks where the checkpoint has them from the start of "
                 "the run, otherwise training wall time x cores of the run (`cores_basis` in each JSON says which).")
    if any(r.campaign for r in rows):
        lines.append("* A row noted \"campaign C\" is a run of the `make paper-games` campaign C "
                     "(benchmarks/paper_games.py), one row per training seed; the campaign's seeds of a game together "
                     "are under Campaigns above.")
    lines += ["", "Evaluation files:", ""]
    lines += [f"* {title(r.game)} ({r.policy}{'; ' + r.protocol_note if r.protocol_note else ''}): `{_display(r.path)}`"
              for r in rows]
    return "\n".join(lines) + "\n"


def plot(rows: list[Row], path: str | Path) -> None:
    plt = harness.pyplot()
    cols = min(3, len(rows))
    nrows = (len(rows) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(4.2 * cols, 3.2 * nrows), squeeze=False)
    colors = {"ours": "tab:blue", "ba3c_paper": "tab:orange", "gorila": "tab:green", "a2c_zoo": "tab:purple",
              "ppo_cleanrl": "tab:brown", "human": "tab:gray", "random": "lightgray"}
    for ax, r in zip(axes.flat, rows):
        names, values, cs = ["ours"], [r.mean], [colors["ours"]]
        for s in SOURCES:
            if s in r.published:
                names.append(SOURCE_TITLES[s])
                values.append(r.published[s])
                cs.append(colors[s])
        ax.bar(range(len(values)), values, color=cs)
        ax.errorbar([0], [r.mean], yerr=[r.std], color="black", capsize=4)  # only ours has a spread
        ax.set_xticks(range(len(values)), names, rotation=30, ha="right", fontsize=8)
        ax.axhline(0, color="black", linewidth=0.5)
        ours = "ours" if r.algo == DEFAULT_ALGO else f"ours, {algo_title(r.algo)}"
        ax.set_title(f"{title(r.game)} ({ours}: {r.policy}, {_frames(r.frames)} frames)", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.suptitle("Game score: ours (mean ± std) vs published", fontsize=11)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="*", help="evaluation JSON files or directories to search "
                   "(default: benchmarks/results/scores and runs)")
    p.add_argument("--published", default=str(DEFAULT_PUBLISHED), help="CSV of published scores")
    p.add_argument("--out", default=str(SCORES_DIR), help="directory for SCORES.md and scores.png")
    p.add_argument("--readme", action="append", default=[],
                   help="also rewrite this Markdown file's generated sections (repeatable), each between its marker "
                        f"lines, e.g. '{README_BEGIN}' and '{README_END}'")
    p.add_argument("--scaling", default=str(SCALING_JSON),
                   help="the scaling benchmark's JSON for the scaling section ('' for none)")
    args = p.parse_args(argv)
    wanted = [*args.paths, *args.readme, *([args.scaling] if args.scaling else [])]
    missing = [x for x in wanted if not os.path.exists(x)]
    if missing:
        print(f"compare: error: no such file or directory: {', '.join(missing)}", file=sys.stderr)
        return 2
    try:  # before any work: a README without its markers is refused now, not after the table is built
        for f in args.readme:
            check_markers(f, Path(f).read_text())
    except CompareError as e:
        print(f"compare: error: {e}", file=sys.stderr)
        return 2
    paths = args.paths or [str(x) for x in DEFAULT_PATHS]
    try:
        published = load_published(args.published)
    except (OSError, KeyError, ValueError) as e:
        print(f"compare: error: cannot read published scores {args.published}: {e}", file=sys.stderr)
        return 2
    rows = build_rows(find_evals(paths), published)
    if not rows:
        print(f"compare: error: no evaluation JSON (\"schema\": \"{EVAL_SCHEMA}\") under {', '.join(paths)}; "
              f"run python -m ba3c.evaluate RUN_DIR first", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "SCORES.md").write_text(render_markdown(rows, published, args.published))
    plot(rows, out / "scores.png")
    generated = sections(rows, args.scaling or None)
    for f in args.readme:
        try:
            fill_readme(f, generated)
        except CompareError as e:
            print(f"compare: error: {e}", file=sys.stderr)
            return 2
    print(f"compare: {len(rows)} row(s) -> {out / 'SCORES.md'}, {out / 'scores.png'}"
          + "".join(f", {f}" for f in args.readme))
    return 0


if __name__ == "__main__":
    sys.exit(main())
