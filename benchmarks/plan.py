"""Minutes to Breakout 300 and Pong 18 on 1 to N nodes, and the global and per-node batch that gets there soonest:
the planner (modelled).

    python -m benchmarks.plan [--nodes 64] [--cores-per-node 24] [--network ib100] [--node FILE] [--threads FILE]
            [--batch-scaling FILE] [--breakout FILES] [--scaling FILE] [--shaped-links FILE] [--fixed-cost A,B]

For each game, each node count N (1, 2, 4, ... up to --nodes) and each global batch B (powers of two up to the
trainer's 4,096, at least N), with per-node batch b = B / N (`--train-batch b` on N ranks, one per node):

    minutes(N, B) = updates_to_score(B) x t_update(b, N) / 60

* t_update: benchmarks/node_model.py's `update_time`, the one node model every projection uses (fixed cost, train
  compute, collection, exchange; its inputs from --node, --threads, --scaling and --shaped-links, each labelled).
* updates_to_score(B): measured at the global batches that reached the score, Pong 18 from the batch-scaling study
  (--batch-scaling: frames to a mean-20 return of 18 / (4 x B)) and Breakout 300 from time-to-score runs
  (--breakout: their `updates_to_target`; the runs' settings differ and are printed); between two measured batches
  interpolated in log-log (fitted); below the smallest, its frames (assumed); above the largest no fewer updates
  (`--beyond plateau`, assumed) or the batch-scaling noise-scale model's (`--beyond noise-model`, Pong only).

Prints, per game: the best (B, b) per node count on --network with its minutes, core-hours, efficiency against the
best 1-node layout, what binds, and the fixed per-node batch of 32 (the paper's layout) beside it under the same
model and against the same 1-node time; the headline (minutes and core-hours on 100 Gb/s InfiniBand and on 10 GbE);
the design goal (Breakout 300 on 64 nodes of 24 cores in 2 minutes on InfiniBand) and what would have to change;
the inputs that most change the answer; the model against measured step times; and two designs the trainer does
not have (a sharded optimizer, local SGD), for Pong. Writes OUT/plan.json, OUT/plan.png and the envelope into
scaling.json (`time_to_score_envelope`, which the README's scaling table is generated from). All of it modelled.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks import node_model as nm, scaling_model as sm
from measure import harness

FRAMES_PER_STEP = nm.FRAMES_PER_STEP
PAPER_MINUTES = 21.0  # arXiv 1801.02852: Breakout in 21 minutes on 64 nodes, 768 cores in all
PAPER_CORES = 768
GOAL = {"game": "breakout", "nodes": 64, "network": "ib100", "minutes": 2.0}  # the design goal: 10x the paper
TARGETS = {32: 0.5, 64: 0.35}  # issue 44: time to Pong 18 against linear
HEADLINE_NETWORKS = ("ib100", "10gbe")
LOCAL_STEPS = (2, 4, 8)  # local SGD's averaging periods (updates between weight averages) modelled beside the envelope
STEP_TIME = os.path.join(nm.STEP_TIME_DIR, "step_time.json")
FLOOR_PROBE = os.path.join(nm.STEP_TIME_DIR, "floor_probe.json")
# the learner's fixed-cost A/B at one thread (Keras 3's Adam and three read backs, then the fused Adam and one)
FIXED_COST = ",".join(os.path.join(nm.STEP_TIME_DIR, f"fixed_cost-{w}.json") for w in ("before", "after"))
BATCH_SCALING = os.path.join(harness.ROOT, "studies", "batch_scaling", "results", "batch_scaling.json")
TIME_TO_SCORE = os.path.join(harness.RESULTS, "time_to_score")
# Breakout to 300 at global batch 64 (one rank) and 2048 (the paper's preset, 64 ranks rehearsed on one)
BREAKOUT = ",".join(os.path.join(TIME_TO_SCORE, f"time_to_score-breakout-{n}.json") for n in ("300", "gb2048-paper"))
EXCHANGE = os.path.join(harness.ROOT, "studies", "exchange", "results", "exchange.json")
OUT = os.path.join(harness.RESULTS, "plan")
NETWORKS = nm.networks()


# ---------------------------------------------------------------- updates to the score

@dataclass(frozen=True)
class Updates:
    """Updates to the score at a global batch, how the number was obtained (measured | fitted | assumed)
    and from what."""
    global_batch: int
    updates: float
    label: str
    source: str


def measured_updates(frames: Sequence[sm.FramesToScore]) -> list[Updates]:
    """The measured batches that reached the score, as updates (frames / (4 x B)); modelled entries and
    batches that did not reach it are left out."""
    out = [Updates(f.global_batch, f.frames / (FRAMES_PER_STEP * f.global_batch), "measured", f.source)
           for f in frames if not f.modelled and f.frames]
    return sorted(out, key=lambda u: u.global_batch)


def updates_at(batch: int, measured: Sequence[Updates], beyond: str = "plateau",
               modelled: Sequence[sm.FramesToScore] = ()) -> Updates:
    """Updates to the score at `batch`: measured there; between two measured batches, interpolated
    linearly in log(updates) against log(batch); below the smallest, that batch's frames (assumed);
    above the largest, its updates (`plateau`, assumed) or the noise-scale model's frames at `batch`
    (`noise-model`, assumed; the plateau where the model has no entry)."""
    if not measured:
        raise ValueError("no measured batch reached the score")
    pts = sorted(measured, key=lambda u: u.global_batch)
    for u in pts:
        if u.global_batch == batch:
            return u
    lo, hi = pts[0], pts[-1]
    if batch < lo.global_batch:
        frames = lo.updates * lo.global_batch
        return Updates(batch, frames / batch, "assumed",
                       f"the frames of batch {lo.global_batch} (the smallest measured)")
    if batch > hi.global_batch:
        if beyond == "noise-model":
            m = [f for f in modelled if f.modelled and f.global_batch == batch and f.frames]
            if m:
                return Updates(batch, m[0].frames / (FRAMES_PER_STEP * batch), "assumed",
                               f"extrapolated: the {m[0].source} (modelled)")
        return Updates(batch, hi.updates, "assumed",
                       f"extrapolated: no fewer updates than batch {hi.global_batch} (the largest that reached "
                       "the score)")
    down = max((u for u in pts if u.global_batch < batch), key=lambda u: u.global_batch)
    up = min((u for u in pts if u.global_batch > batch), key=lambda u: u.global_batch)
    w = (math.log(batch) - math.log(down.global_batch)) / (math.log(up.global_batch) - math.log(down.global_batch))
    updates = math.exp((1 - w) * math.log(down.updates) + w * math.log(up.updates))
    return Updates(batch, updates, "fitted",
                   f"interpolated in log-log between batches {down.global_batch} and {up.global_batch}")


@dataclass(frozen=True)
class Game:
    """A score to reach: the updates measured to it at some global batches, the noise-scale model's frames where
    there is one (`--beyond noise-model`), and each run's settings where they differ."""
    key: str  # breakout | pong
    name: str  # e.g. "Breakout 300"
    measured: tuple[Updates, ...]
    modelled: tuple[sm.FramesToScore, ...] = ()
    runs: tuple[str, ...] = ()


def run_settings(cfg: dict[str, Any]) -> str:
    """The settings that differ between time-to-score runs, from a run's resolved config (config.json)."""
    learn, sim, run = cfg.get("learn", {}), cfg.get("sim", {}), cfg.get("run", {})
    ranks = int(run.get("rehearse_ranks", 1) or 1)
    return (f"--train-batch {learn.get('train_batch')}" + (f" x {ranks} rehearsed ranks" if ranks > 1 else "")
            + f", preset {run.get('preset', 'default')}, lr {learn.get('lr'):g} ({learn.get('lr_scaling')} rule), Adam "
            f"betas {learn.get('beta1'):g}/{learn.get('beta2'):g} eps {learn.get('adam_eps'):g}, clip "
            f"{learn.get('clip_mode')} {learn.get('clip_norm'):g}, lost lives {sim.get('life_loss')}")


def time_to_score_updates(path: str) -> tuple[Updates | None, str]:
    """A benchmarks/time_to_score.py result (and its -config.json): the updates to its target at its global batch
    (per-rank batch x rehearsed ranks), and the run's settings. None where it did not reach the target."""
    d = nm.load_json(path)
    cfg = nm.load_json(path[:-len(".json")] + "-config.json")
    if d is None or cfg is None:
        raise LookupError(f"{path}: no such time-to-score result with its -config.json")
    ranks = int(cfg["run"].get("rehearse_ranks", 1) or 1)
    batch = int(cfg["learn"]["train_batch"]) * ranks
    name = os.path.basename(path)
    settings = f"Breakout batch {batch}: {run_settings(cfg)} (`{name}`)"
    if not d.get("reached") or not d.get("updates_to_target"):
        return None, settings
    return Updates(batch, float(d["updates_to_target"]), "measured", name), settings


def breakout_game(paths: Sequence[str]) -> Game:
    found = [time_to_score_updates(p) for p in paths]
    return Game("breakout", "Breakout 300", tuple(sorted((u for u, _ in found if u), key=lambda u: u.global_batch)),
                runs=tuple(s for _, s in found))


def pong_game(batch_scaling: dict[str, Any]) -> Game:
    from benchmarks.scaling_results import frames_from_batch_scaling

    frames = frames_from_batch_scaling(batch_scaling)
    measured = measured_updates(frames)
    rules = {int(p["global_batch"]): p.get("rule") for p in batch_scaling.get("points", [])
             if any(u.source.startswith(p["point"] + " ") for u in measured)}
    runs = tuple(f"Pong batch {u.global_batch}: {rules.get(u.global_batch)} lr rule, reached by the "
                 f"{u.source.split('(')[-1].rstrip(')')}" for u in measured)
    return Game("pong", "Pong 18", tuple(measured), tuple(f for f in frames if f.modelled), runs)


# ---------------------------------------------------------------- choices

@dataclass(frozen=True)
class Choice:
    nodes: int
    global_batch: int
    per_node_batch: int
    updates: float
    updates_label: str
    updates_source: str
    overhead_s: float
    compute_s: float
    collect_s: float
    exchange_s: float
    per_node_batch_label: str  # fitted (inside the node file's batches) | extrapolated

    @property
    def step_s(self) -> float:
        return self.overhead_s + self.compute_s + self.collect_s + self.exchange_s

    @property
    def floor_s(self) -> float:
        """What an update costs whatever its batch: the fixed cost and the exchange."""
        return self.overhead_s + self.exchange_s

    @property
    def minutes(self) -> float:
        return self.updates * self.step_s / 60.0

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "step_s": self.step_s, "minutes": self.minutes,
                "floor_share": self.floor_s / self.step_s}


@dataclass(frozen=True)
class Settings:
    nodes: int
    cores_per_node: int
    network: str
    node_file: str
    beyond: str
    fixed_per_node_batch: int = 32
    max_global_batch: int = sm.MAX_GLOBAL_BATCH


def node_counts(most: int) -> list[int]:
    """1, 2, 4, ... up to `most`, and `most` itself."""
    out = [1 << i for i in range(most.bit_length()) if 1 << i <= most]
    return out if out[-1] == most else out + [most]


def global_batches(nodes: int, most: int) -> list[int]:
    """Powers of two from `nodes` (a batch of at least one sample per node) up to `most`; with a node count
    that is not a power of two, its multiples by powers of two."""
    out, b = [], nodes
    while b <= most:
        out.append(b)
        b *= 2
    return out


@dataclass(frozen=True)
class Sharding:
    """A sharded optimizer (ZeRO-1; the trainer has none: modelled here to judge whether to build one). Each of N
    ranks reduce-scatters the flat gradient, allreduces its slice's squared norm (global-norm clipping), clips and
    applies Adam to its 1/N of the parameters, and allgathers the updated slices. Its parts are benchmarks/
    floor_probe.py's, timed on one core (assumed the same on a node: more threads would shrink the optimizer and so
    the saving): the learner's clipping + Adam, its sharded form on 1/k of the flat parameters (fitted as
    fixed + all / k), the gradients flattened for the reduce-scatter and the gathered weights put back."""
    optimizer_s: float
    shard_fixed_s: float
    shard_all_s: float
    flatten_s: float
    unflatten_s: float
    extra_collectives: int = 2  # the scalar allreduce and the allgather; the reduce-scatter replaces the allreduce
    source: str = ""

    def saving_s(self, nodes: int) -> float:
        """The fixed cost per update it removes on `nodes` ranks (negative: it adds); 0 on one node (nothing to
        share)."""
        if nodes <= 1:
            return 0.0
        return self.optimizer_s - self.shard_fixed_s - self.shard_all_s / nodes - self.flatten_s - self.unflatten_s


def choice(nodes: int, batch: int, upd: Updates, node: nm.NodeModel, net: nm.Network, cores: int,
           sharding: Sharding | None = None, local_steps: int = 1) -> Choice:
    """Global batch `batch` on `nodes` nodes under the node model. With a sharded optimizer (not in the trainer) the
    ring's bytes are the same (a reduce-scatter and an allgather are an allreduce's two halves), each extra
    collective costs Horovod's fixed cost and the latency once more, and the fixed cost falls by the optimizer work
    shared. With local steps (local SGD; not in the trainer) the ranks average their weights once every
    `local_steps` updates: the exchange per update is divided by it."""
    b = batch // nodes
    t = nm.update_time(node, net, b, nodes, cores)
    exch, cut = t.exchange_s / local_steps, 0.0
    if sharding is not None and nodes > 1:
        exch += sharding.extra_collectives * (node.exchange_overhead_s.value + 2 * net.latency_s)
        cut = sharding.saving_s(nodes)
    inside = (not node.fitted_batches) or min(node.fitted_batches) <= b <= max(node.fitted_batches)
    return Choice(nodes, batch, b, upd.updates, upd.label, upd.source, t.fixed_s - cut, t.train_s, t.collect_s, exch,
                  "fitted" if inside else "extrapolated (outside the fitted batches)")


def choices_for(nodes: int, s: Settings, node: nm.NodeModel, net: nm.Network, game: Game,
                sharding: Sharding | None = None, local_steps: int = 1) -> list[Choice]:
    return [choice(nodes, gb, updates_at(gb, game.measured, s.beyond, game.modelled), node, net, s.cores_per_node,
                   sharding, local_steps)
            for gb in global_batches(nodes, s.max_global_batch)]


def best(choices: Sequence[Choice]) -> Choice:
    return min(choices, key=lambda c: (c.minutes, c.global_batch))


def efficiency(one_node_minutes: float, nodes: int, minutes: float) -> float:
    """Against linear scaling from the best 1-node layout: its minutes / (N x minutes at N)."""
    return one_node_minutes / (nodes * minutes)


@dataclass(frozen=True)
class EnvelopeRow:
    nodes: int
    best: Choice
    efficiency_vs_linear: float  # against the best 1-node layout (the envelope's own 1-node row)
    binds: str
    fixed: Choice | None  # the fixed per-node batch (B = 32 N) under the same model
    fixed_efficiency_vs_linear: float | None  # against the same best 1-node layout
    cores_per_node: int = 1
    target: float | None = None
    needed_step_s: float | None = None  # the time per update the target allows at the best choice's updates
    # the most this choice's B could give against linear with no per-update floor at all (no fixed cost, no exchange,
    # on one node too): the fewest samples to the score at any batch / the samples at B
    sample_bound: float | None = None

    @property
    def core_hours(self) -> float:
        return self.best.minutes / 60.0 * self.nodes * self.cores_per_node

    def to_json(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "global_batch": self.best.global_batch,
                "per_node_batch": self.best.per_node_batch, "minutes": self.best.minutes,
                "core_hours": self.core_hours, "efficiency_vs_linear": self.efficiency_vs_linear,
                "efficiency_basis": "the best 1-node layout", "binds": self.binds, "target": self.target,
                "needed_step_s": self.needed_step_s, "sample_bound": self.sample_bound, "best": self.best.to_json(),
                "fixed_per_node_batch": None if self.fixed is None else {
                    **self.fixed.to_json(), "efficiency_vs_linear": self.fixed_efficiency_vs_linear}}


def binds(c: Choice, eff: float, needed_step_s: float | None) -> str:
    """What sets the time at the best choice. With a target not met: 'time per update' when the per-update
    floor (fixed cost + exchange) alone exceeds the time per update the target allows at these updates (no
    choice of B/N fixes it); else 'updates' (a smaller per-node batch would need a smaller B and more updates
    than it saves). Without a target: whichever is most of an update, the floor or the compute on b samples."""
    floor = "time per update (fixed cost + exchange)"
    if needed_step_s is not None:
        if eff >= 1.0 or c.step_s <= needed_step_s:
            return "target met"
        return floor if c.floor_s > needed_step_s else "updates"
    return floor if c.floor_s >= 0.5 * c.step_s else "updates (compute on the per-node batch)"


def envelope(s: Settings, node: nm.NodeModel, net: nm.Network, game: Game, sharding: Sharding | None = None,
             local_steps: int = 1) -> list[EnvelopeRow]:
    """Per node count: the best (B, b), its efficiency against the best 1-node layout, what binds, and the fixed
    per-node batch beside it against the same 1-node time (all under one model). Issue 44's targets apply to Pong.
    With `local_steps` > 1 the updates to the score are taken as those of the same global batch (local SGD's
    first-order equivalence; assumed, never measured here)."""
    rows: list[EnvelopeRow] = []
    one = 0.0
    fewest_samples = min(u.updates * u.global_batch for u in game.measured)
    for n in node_counts(s.nodes):
        cs = choices_for(n, s, node, net, game, sharding, local_steps)
        top = best(cs)
        fixed_gb = s.fixed_per_node_batch * n
        fixed = next((c for c in cs if c.global_batch == fixed_gb), None)
        if fixed is None and fixed_gb <= s.max_global_batch:
            fixed = choice(n, fixed_gb, updates_at(fixed_gb, game.measured, s.beyond, game.modelled), node, net,
                           s.cores_per_node, sharding, local_steps)
        if n == 1:
            one = top.minutes
        eff = efficiency(one, n, top.minutes)
        target = TARGETS.get(n) if game.key == "pong" else None
        needed = one * 60.0 / (target * n) / top.updates if target else None
        rows.append(EnvelopeRow(n, top, eff, binds(top, eff, needed), fixed,
                                efficiency(one, n, fixed.minutes) if fixed else None, s.cores_per_node, target,
                                needed, fewest_samples / (top.updates * top.global_batch)))
    return rows


# ---------------------------------------------------------------- the headline, the goal, what changes the answer

def headline(s: Settings, node: nm.NodeModel, nets: dict[str, nm.Network],
             games: Sequence[Game]) -> dict[str, dict[str, list[EnvelopeRow]]]:
    """Every game's envelope on each headline network (100 Gb/s InfiniBand, 10 GbE at the measured fraction)."""
    return {g.key: {k: envelope(dataclasses.replace(s, network=k), node, nets[k], g) for k in HEADLINE_NETWORKS}
            for g in games}


def goal_check(row: EnvelopeRow, minutes: float) -> dict[str, Any]:
    """The design goal against the envelope's row: met or not, and at this row's global batch what would have to
    change alone to meet it: the time per update (and so the fixed cost, all else as modelled), or the updates."""
    c = row.best
    needed_step = minutes * 60.0 / c.updates
    return {"nodes": row.nodes, "goal_minutes": minutes, "minutes": c.minutes, "met": c.minutes <= minutes,
            "global_batch": c.global_batch, "per_node_batch": c.per_node_batch, "updates": c.updates,
            "step_s": c.step_s, "fixed_s": c.overhead_s, "exchange_s": c.exchange_s, "binds": row.binds,
            "needed_step_s": needed_step, "needed_fixed_s": needed_step - (c.step_s - c.overhead_s),
            "needed_updates": minutes * 60.0 / c.step_s, "modelled": True}


def scaled_game(game: Game, factor: float) -> Game:
    """The game with every batch's updates to the score (and the noise model's frames) times `factor`."""
    return dataclasses.replace(
        game, measured=tuple(dataclasses.replace(u, updates=u.updates * factor) for u in game.measured),
        modelled=tuple(dataclasses.replace(f, frames=f.frames * factor if f.frames else f.frames)
                       for f in game.modelled))


def with_fixed(node: nm.NodeModel, value: float, how: str, label: str = "assumed") -> nm.NodeModel:
    return dataclasses.replace(node, fixed_s=nm.Term(value, label, how))


def sensitivity(s: Settings, node: nm.NodeModel, nets: dict[str, nm.Network], game: Game, nodes: int,
                one_thread_a: float | None, cut_s: float | None) -> list[dict[str, Any]]:
    """Minutes at `nodes` nodes (the envelope's best B there) with one input changed at a time, on the goal's network;
    each variant's minutes against the model's own. All modelled."""
    sub = dataclasses.replace(s, nodes=nodes)
    base_net = nets[GOAL["network"]]
    a = node.fixed_s.value
    variants: list[tuple[str, nm.NodeModel, nm.Network, Game]] = [
        ("as modelled", node, base_net, game),
        ("fixed cost halved", with_fixed(node, a / 2, "halved"), base_net, game),
        ("no fixed cost at all", with_fixed(node, 0.0, "none"), base_net, game),
        ("fixed cost held serial (s = 1)", dataclasses.replace(node, serial=nm.Term(1.0, "assumed", "s = 1")),
         base_net, game),
        ("10 GbE at the measured fraction of line rate", node, nets["10gbe"], game),
        ("10 GbE at the nominal 0.8 of line rate", node, nets["10gbe-nominal"], game),
        ("no Horovod fixed cost per allreduce",
         dataclasses.replace(node, exchange_overhead_s=nm.Term(0.0, "assumed", "none")), base_net, game),
        ("updates to the score halved", node, base_net, scaled_game(game, 0.5)),
        ("updates to the score doubled", node, base_net, scaled_game(game, 2.0)),
        ("no collection cost (simulators on other cores)",
         dataclasses.replace(node, collect_s_per_sample_core=nm.Term(0.0, "assumed", "none")), base_net, game),
    ]
    if cut_s:
        variants.insert(2, (f"fixed cost less the fused-Adam cut measured at one thread ({1e3 * cut_s:.2f} ms)",
                            with_fixed(node, a - cut_s, "less the one-thread cut"), base_net, game))
    if one_thread_a is not None:
        # this machine's one-thread fixed cost (today's code), carried to the node's threads by the fitted fraction
        scaled = one_thread_a / nm.amdahl(node.serial.value, 1) * nm.amdahl(node.serial.value, node.threads)
        variants.insert(2, (f"fixed cost from this machine's one thread ({1e3 * one_thread_a:.2f} ms) by Amdahl",
                            with_fixed(node, scaled, "one thread here, by Amdahl"), base_net, game))
    out = []
    base = None
    for name, nd, net, g in variants:
        row = envelope(sub, nd, net, g)[-1]
        base = base if base is not None else row.best.minutes
        out.append({"variant": name, "nodes": nodes, "global_batch": row.best.global_batch,
                    "step_ms": 1e3 * row.best.step_s, "fixed_ms": 1e3 * row.best.overhead_s,
                    "minutes": row.best.minutes, "vs_model": row.best.minutes / base, "modelled": True})
    return out


def one_thread_fixed(threads: dict[str, Any] | None) -> float | None:
    """This machine's fixed cost at one thread, from the threads file's estimate the node model takes."""
    try:
        return float(nm.fixed_cost_threads(threads)[nm.SERIAL_ESTIMATE]["a1_s"]) if threads else None
    except (KeyError, LookupError):
        return None


# ---------------------------------------------------------------- inputs from the results files

load_json = nm.load_json


def sharding_from(probe: dict[str, Any] | None) -> Sharding | None:
    """The sharded optimizer's parts from benchmarks/floor_probe.py's summary (median CPU time per call, one
    thread); None without the file."""
    summary = (probe or {}).get("summary") or {}
    shards = [(1.0 / int(k.split()[1]), v["cpu_s_per_call_median"]) for k, v in summary.items()
              if k.startswith("shard ")]
    fit = sm.fit_step_time(shards)
    if fit is None or not all(k in summary for k in ("optimizer", "flatten", "unflatten")):
        return None
    part = lambda k: float(summary[k]["cpu_s_per_call_median"])  # noqa: E731
    return Sharding(part("optimizer"), fit.overhead_s, fit.per_sample_s, part("flatten"), part("unflatten"),
                    source=f"benchmarks/floor_probe.py, {probe.get('date', '')}: clipping + Adam "
                           f"{1e3 * part('optimizer'):.2f} ms (measured), on 1/k of the flat parameters "
                           f"{1e3 * fit.overhead_s:.2f} + {1e3 * fit.per_sample_s:.2f} / k ms (fitted to k = "
                           f"{', '.join(str(round(1 / x)) for x, _ in sorted(shards, reverse=True))}), flatten "
                           f"{1e3 * part('flatten'):.2f} ms, weights back {1e3 * part('unflatten'):.2f} ms (measured); "
                           "one thread, assumed the same on a node; each extra collective Horovod's fitted fixed "
                           "cost (assumed)")


def fixed_cost_cut(before: dict[str, Any] | None, after: dict[str, Any] | None) -> float | None:
    """The fixed cost per update the learner's cuts removed at one thread (the A/B's CPU-time fits: a before - a
    after), or None without both files."""
    try:
        a = [d["summary"]["1"]["fits"]["cpu"]["overhead_s"] for d in (before, after)]
    except (TypeError, KeyError):
        return None
    return a[0] - a[1]


def model_check(step_time: dict[str, Any] | None, node_file: dict[str, Any] | None,
                node: nm.NodeModel) -> list[dict[str, Any]]:
    """The node model's per-update time (learner alone: one rank, no collection) against measured ones: (1) each
    thread count's step_time.json fits against what they were fitted to; (2) the node file's fit against its own
    points at its thread count; (3) the model carried to each other thread count the node file measured (fixed cost
    by the fitted serial fraction, compute linear in threads: both assumed) against those points."""
    out: list[dict[str, Any]] = []

    def add(check: str, threads: int, batch: int, measured: float, model: float) -> None:
        out.append({"check": check, "threads": threads, "batch": batch, "measured_s": measured, "model_s": model,
                    "error": sm.relative_error(model, measured)})

    summary = (step_time or {}).get("summary") or {}
    for t, v in sorted(summary.items(), key=lambda kv: int(kv[0])):
        for b, m in v["batches"].items():
            for name, key in (("median", "median_s"), ("least_disturbed", "min_s"), ("cpu", "cpu_s_per_call")):
                if name in m and int(b) != v.get("tiny_batch"):
                    add(f"fit to the {name.replace('_', '-')} times", int(t), int(b), m[key], m[name]["model_s"])
    for t, v in sorted(((node_file or {}).get("summary") or {}).items(), key=lambda kv: int(kv[0])):
        check = ("node file's fit vs its own points" if int(t) == node.threads
                 else f"node model carried to {t} thread(s) vs the node file's points")
        for b, m in v["batches"].items():
            if int(b) != v.get("tiny_batch"):
                model = node.fixed_at(int(t)) + node.train_s_per_sample.value * node.threads / int(t) * int(b)
                add(check, int(t), int(b), m["median_s"], model)
    return out


def exchange_check(scaling: dict[str, Any] | None, exchange: dict[str, Any] | None) -> dict[str, Any] | None:
    """The exchange term at 2 ranks with this box's own allreduce fit (overhead, bandwidth, latency from the
    scaling benchmark's sweep) against the exposed exchange the exchange study measured in the learner's step
    (2 ranks x 1 core, grouped, the default)."""
    fit = sm.AllreduceFit.from_json((((scaling or {}).get("fit") or {}).get("allreduce") or {}).get("horovod"))
    measured = ((exchange or {}).get("projection_input") or {}).get("exposed_ms_grouped")
    if fit is None or not measured:
        return None
    model = sm.t_allreduce(2, nm.GRADIENT_BYTES, fit)
    return {"ranks": 2, "model_s": model, "measured_exposed_s": measured / 1e3,
            "error": sm.relative_error(model, measured / 1e3)}


# ---------------------------------------------------------------- report, plot, files

def _f2(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report_inputs(node: nm.NodeModel, nets: dict[str, nm.Network], games: Sequence[Game], cores: int) -> None:
    print(f"inputs of the node model (benchmarks/node_model.py; a node of {cores} cores):")
    for name, term, shown in (
            ("fixed cost per update", node.fixed_s,
             f"{1e3 * node.fixed_s.value:.2f} ms at {node.threads} threads -> {1e3 * node.fixed_at(cores):.2f} ms on "
             f"{cores}"),
            ("its serial fraction", node.serial, f"{node.serial.value:.2f}"),
            ("train compute", node.train_s_per_sample,
             f"{1e3 * node.train_s_per_sample.value:.4f} ms/sample at {node.threads} threads -> "
             f"{1e3 * node.train_s_per_sample.value * node.threads / cores:.4f} on {cores} (linear in cores: assumed)"),
            ("collection", node.collect_s_per_sample_core,
             f"{1e3 * node.collect_s_per_sample_core.value:.2f} ms/sample on one core -> "
             f"{1e3 * node.collect_s_per_sample_core.value / cores:.4f} on {cores} (linear in cores: assumed)"),
            ("Horovod per allreduce", node.exchange_overhead_s, f"{1e3 * node.exchange_overhead_s.value:.2f} ms")):
        print(f"  {name}: {shown} [{term.label}: {term.source}]")
    for k in HEADLINE_NETWORKS:
        n = nets[k]
        print(f"  {n.name}: {n.bandwidth_bytes_per_s / 1e9:.2f} GB/s ({n.bandwidth_label}), "
              f"{1e6 * n.latency_s:.0f} us ({n.latency_label}): {n.source}")
    for g in games:
        print(f"  {g.name}, updates to the score: " + ", ".join(
            f"{u.updates:,.0f} at batch {u.global_batch} ({u.label})" for u in g.measured))
        for r in g.runs:
            print(f"    {r}")


def report(s: Settings, net: nm.Network, game: Game, rows: Sequence[EnvelopeRow]) -> None:
    print(f"\n{game.name} on N nodes x {s.cores_per_node} cores, {net.name} (MODELLED; beyond the largest measured "
          f"batch: {s.beyond})")
    print(f"{'nodes':>5} {'B':>5} {'B/N':>5} {'updates':>8} {'upd. from':>9} {'a ms':>6} {'comp ms':>7} "
          f"{'exch ms':>7} {'minutes':>8} {'core-h':>7} {'eff':>5}  | fixed B/N=32: {'min':>6} {'eff':>5} | binds")
    for r in rows:
        c, f = r.best, r.fixed
        fixed = f"{f.minutes:>6.2f} {_f2(r.fixed_efficiency_vs_linear):>5}" if f else f"{'-':>6} {'-':>5}"
        target = (f" (target {r.target}: needs {1e3 * r.needed_step_s:.2f} ms per update at these updates, i.e. a "
                  f"floor of {1e3 * (r.needed_step_s - c.compute_s - c.collect_s):.2f} ms against "
                  f"{1e3 * c.floor_s:.2f}; with no floor at all, here or on one node, B = {c.global_batch} gives at "
                  f"most {r.sample_bound:.2f}: the samples it needs to the score against the fewest)"
                  if r.target and r.binds != "target met" else "")
        print(f"{r.nodes:>5} {c.global_batch:>5} {c.per_node_batch:>5} {c.updates:>8,.0f} {c.updates_label:>9} "
              f"{1e3 * c.overhead_s:>6.2f} {1e3 * (c.compute_s + c.collect_s):>7.2f} {1e3 * c.exchange_s:>7.2f} "
              f"{c.minutes:>8.2f} {r.core_hours:>7.1f} {r.efficiency_vs_linear:>5.2f}  | {fixed:>26} | "
              f"{r.binds}{target}")
    print("eff: minutes of the best 1-node layout / (N x minutes at N), for both columns; comp: train compute + "
          "collection; upd. from: measured, fitted (interpolated) or assumed")


def report_headline(games: Sequence[Game], nets: dict[str, nm.Network],
                    head: dict[str, dict[str, list[EnvelopeRow]]]) -> None:
    print("\nMINUTES TO A SCORE (MODELLED; core-hours in brackets; the planner's best global batch per node count; "
          f"paper: Breakout in {PAPER_MINUTES:.0f} minutes on 64 nodes, {PAPER_CORES} cores, "
          f"{PAPER_MINUTES / 60 * PAPER_CORES:.0f} core-hours)")
    cols = [(g, k) for g in games for k in HEADLINE_NETWORKS]
    print(f"{'nodes':>5} " + " ".join(f"{g.name + ', ' + nets[k].name.split(' (')[0]:>28}" for g, k in cols))
    for i, r0 in enumerate(head[games[0].key][HEADLINE_NETWORKS[0]]):
        cells = []
        for g, k in cols:
            r = head[g.key][k][i]
            cell = f"{r.best.minutes:.2f} ({r.core_hours:.1f}) B={r.best.global_batch} e={r.efficiency_vs_linear:.2f}"
            cells.append(f"{cell:>28}")
        print(f"{r0.nodes:>5} " + " ".join(cells))
    print("e: efficiency against the best 1-node layout")


def report_goal(goal: dict[str, Any] | None, sens: Sequence[dict[str, Any]]) -> None:
    if goal:
        print(f"\nDESIGN GOAL (modelled): Breakout 300 on {goal['nodes']} nodes in <= {goal['goal_minutes']:.0f} "
              f"minutes on InfiniBand: {goal['minutes']:.2f} minutes, {'MET' if goal['met'] else 'NOT MET'} "
              f"(B = {goal['global_batch']}, {goal['updates']:,.0f} updates x {1e3 * goal['step_s']:.2f} ms, of which "
              f"fixed {1e3 * goal['fixed_s']:.2f} and exchange {1e3 * goal['exchange_s']:.2f}; binds: {goal['binds']})")
        if not goal["met"]:
            print(f"  to meet it at this batch, one of: {1e3 * goal['needed_step_s']:.2f} ms per update (fixed cost "
                  f"{1e3 * goal['needed_fixed_s']:.2f} ms instead of {1e3 * goal['fixed_s']:.2f}), or "
                  f"{goal['needed_updates']:,.0f} updates instead of {goal['updates']:,.0f} "
                  f"({goal['needed_updates'] / goal['updates']:.2f}x)")
    if sens:
        print(f"\nWhat changes the answer (modelled; {sens[0]['nodes']} nodes, one input at a time):")
        for v in sens:
            print(f"  {v['variant']:<72} B={v['global_batch']:>5} {v['step_ms']:>6.2f} ms/update "
                  f"{v['minutes']:>6.2f} min ({v['vs_model']:.2f}x)")


def report_checks(checks: Sequence[dict[str, Any]], xcheck: dict[str, Any] | None) -> None:
    print("\nThe node model's per-update time (learner alone, one rank) against measured ones:")
    for kind in dict.fromkeys(c["check"] for c in checks):
        mine = [c for c in checks if c["check"] == kind]
        worst = max(abs(c["error"]) for c in mine)
        print(f"  {kind}: largest |error| {worst:.0%} ({'within' if worst <= 0.15 else 'NOT within'} 15%): "
              + ", ".join(f"{c['threads']}t b{c['batch']} {c['error']:+.0%}" for c in mine))
    if xcheck:
        print(f"  the exchange term at 2 ranks with this box's fitted allreduce: {1e3 * xcheck['model_s']:.1f} ms, "
              f"against {1e3 * xcheck['measured_exposed_s']:.1f} ms exposed in the learner's step (exchange study, "
              f"grouped): {xcheck['error']:+.0%}")


def report_sharding(sharding: Sharding, rows: Sequence[EnvelopeRow], sharded: Sequence[EnvelopeRow]) -> None:
    print("\nA sharded optimizer (ZeRO-1; not in the trainer; modelled), Pong 18: the fixed cost per update falls by "
          "the optimizer work shared, the exchange gains two collectives")
    print(f"  parts: {sharding.source}")
    print(f"{'nodes':>5} {'fixed cost cut ms':>17} {'extra exchange ms':>17} {'floor ms':>8} {'minutes':>8} "
          f"{'eff':>5} | unsharded: {'floor ms':>8} {'minutes':>8} {'eff':>5}")
    for r, q in zip(rows, sharded):
        print(f"{q.nodes:>5} {1e3 * (r.best.overhead_s - q.best.overhead_s):>17.2f} "
              f"{1e3 * (q.best.exchange_s - r.best.exchange_s):>17.2f} {1e3 * q.best.floor_s:>8.2f} "
              f"{q.best.minutes:>8.2f} {q.efficiency_vs_linear:>5.2f} | {1e3 * r.best.floor_s:>18.2f} "
              f"{r.best.minutes:>8.2f} {r.efficiency_vs_linear:>5.2f}")


def report_local_steps(rows: Sequence[EnvelopeRow], local: dict[int, Sequence[EnvelopeRow]]) -> None:
    """Beside the synchronous envelope (`rows`), local SGD's per averaging period H (`local`, row for row)."""
    print("\nLocal SGD (weights averaged every H updates; not in the trainer; modelled), Pong 18: the exchange per "
          "update falls to 1/H; updates to 18 assumed those of the same global batch (never measured here)")
    print(f"{'nodes':>5} {'sync min':>8} {'eff':>5} | " + " | ".join(
        f"H={h}: {'min':>5} {'eff':>5} {'x upd':>5}" for h in local))
    for i, sync in enumerate(rows):
        cells = []
        for h, local_rows in local.items():
            loc = local_rows[i]
            cells.append(f"{' ' * (len(str(h)) + 4)}{loc.best.minutes:>5.2f} {loc.efficiency_vs_linear:>5.2f} "
                         f"{sync.best.minutes / loc.best.minutes:>5.2f}")
        print(f"{sync.nodes:>5} {sync.best.minutes:>8.2f} {sync.efficiency_vs_linear:>5.2f} | " + " | ".join(cells))
    print("x upd: how many times the synchronous run's updates local SGD may need and still be no slower "
          "(sync minutes / local minutes at equal updates)")


def plot(games: Sequence[Game], nets: dict[str, nm.Network], head: dict[str, dict[str, list[EnvelopeRow]]],
         s: Settings, path: str) -> None:
    plt = harness.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    for g, color in zip(games, ("C0", "C1", "C2")):
        for k, style in zip(HEADLINE_NETWORKS, ("o-", "s--")):
            rows = head[g.key][k]
            ns = [r.nodes for r in rows]
            label = f"{g.name}, {nets[k].name}"
            ax1.plot(ns, [r.best.minutes for r in rows], style, color=color, label=label)
            ax2.plot(ns, [r.efficiency_vs_linear for r in rows], style, color=color, label=label)
            if k == HEADLINE_NETWORKS[0]:
                fx = [r for r in rows if r.fixed]
                ax2.plot([r.nodes for r in fx], [r.fixed_efficiency_vs_linear for r in fx], ":", color=color, alpha=0.6,
                         label=f"{g.name}, {nets[k].name}, 32 per node")
    ax1.plot([64], [PAPER_MINUTES], "r*", ms=12, label="paper: Breakout in 21 min on 64 nodes")
    ax1.plot([GOAL["nodes"]], [GOAL["minutes"]], "rv", ms=9, label="design goal: Breakout 300, 2 min, 64 nodes, IB")
    ax1.set_yscale("log")
    ax1.set_ylabel("minutes to the score (MODELLED)")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("efficiency against the best 1-node layout")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower left" if ax is ax1 else "upper right")
    fig.suptitle(f"planner (MODELLED, benchmarks/node_model.py): {s.cores_per_node} cores per node, best global "
                 "batch per node count", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def envelope_json(s: Settings, node: nm.NodeModel, nets: dict[str, nm.Network], games: Sequence[Game],
                  head: dict[str, dict[str, list[EnvelopeRow]]], goal: dict[str, Any] | None,
                  sens: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The block scaling.json holds as `time_to_score_envelope` (the README's minutes table is made from it)."""
    return {"written_by": "benchmarks/plan.py", "modelled": True, "settings": asdict(s),
            "node_model": node.to_json(), "networks": {k: asdict(nets[k]) for k in HEADLINE_NETWORKS},
            "paper": {"minutes": PAPER_MINUTES, "nodes": 64, "cores": PAPER_CORES, "game": "Breakout",
                      "source": "Adamski et al., arXiv 1801.02852 (their protocol and threshold)"},
            "goal": goal, "sensitivity": list(sens),
            "games": {g.key: {"name": g.name, "runs": list(g.runs), "updates_measured": [asdict(u) for u in g.measured],
                              "by_network": {k: [r.to_json() for r in rows] for k, rows in head[g.key].items()}}
                      for g in games},
            "note": "minutes to the score = updates to it at global batch B x the node model's time per update at "
                    "per-node batch B/N; efficiency_vs_linear = minutes of the best 1-node layout / (N x minutes at "
                    "N), for the fixed per-node batch (B = 32 N) too; core_hours = minutes / 60 x N x cores"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse would print its usage first)
        print(f"plan: {message}", file=sys.stderr)
        raise SystemExit(2)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=64, help="largest node count (1 to 4096)")
    p.add_argument("--cores-per-node", type=int, default=24, help="cores of a node (the paper's: 24)")
    p.add_argument("--network", default="ib100", choices=sorted(NETWORKS), help="the interconnect of the full tables")
    p.add_argument("--node", default=nm.NODE_FILE,
                   help="the train step timed on a many-core machine (step_time.json layout): the node model's anchor")
    p.add_argument("--threads", default=nm.THREADS_FILE,
                   help="the fixed cost at 1 and 2 threads (step_time.json layout): its serial fraction")
    p.add_argument("--beyond", default="plateau", choices=("plateau", "noise-model"),
                   help="updates above the largest batch that reached the score: no fewer than there (plateau), or "
                        "the batch-scaling study's noise-scale model (Pong)")
    p.add_argument("--step-time", default=STEP_TIME, help="benchmarks/step_time.py's JSON (a check of the model)")
    p.add_argument("--batch-scaling", default=BATCH_SCALING, help="the batch-scaling study's JSON (updates to Pong 18)")
    p.add_argument("--breakout", default=BREAKOUT,
                   help="time-to-score JSONs of Breakout 300 runs, comma list (each beside its -config.json)")
    p.add_argument("--shaped-links", default=nm.SHAPED_LINKS_FILE,
                   help="the shaped-link study's Horovod JSON (TCP's fraction of line rate)")
    p.add_argument("--exchange", default=EXCHANGE, help="the exchange study's JSON (a check of the exchange term)")
    p.add_argument("--scaling", default=nm.SCALING_FILE,
                   help="scaling.json: collection cost and Horovod's overhead; gains the envelope")
    p.add_argument("--floor-probe", default=FLOOR_PROBE,
                   help="benchmarks/floor_probe.py's JSON: a sharded optimizer's parts, modelled beside the envelope")
    p.add_argument("--fixed-cost", default=FIXED_COST,
                   help="the fixed-cost A/B at one thread, BEFORE,AFTER JSONs (the fused-Adam cut, a sensitivity row)")
    p.add_argument("--no-write-scaling", action="store_true", help="leave scaling.json unchanged")
    p.add_argument("--out", default=OUT, help="where plan.json and plan.png go")
    args = p.parse_args(argv)
    if not 1 <= args.nodes <= sm.MAX_GLOBAL_BATCH:
        p.error(f"--nodes {args.nodes}: must be from 1 to {sm.MAX_GLOBAL_BATCH} (at least one sample per node at "
                "the largest global batch)")
    if args.cores_per_node < 1:
        p.error(f"--cores-per-node {args.cores_per_node}: must be at least 1")
    for flag in ("batch_scaling", "node"):
        if not os.path.exists(getattr(args, flag)):
            p.error(f"--{flag.replace('_', '-')} {getattr(args, flag)}: no such file")
    return args


def load_games(args: argparse.Namespace) -> list[Game]:
    games = [breakout_game([x for x in args.breakout.split(",") if x]) if args.breakout else None,
             pong_game(load_json(args.batch_scaling) or {})]
    return [g for g in games if g is not None and g.measured]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    scaling = load_json(args.scaling)
    try:
        node = nm.load(scaling, args.node, args.threads)
        games = load_games(args)
    except LookupError as e:
        print(f"plan: {e}", file=sys.stderr)
        return 2
    if not games:
        print(f"plan: no run in --breakout or --batch-scaling {args.batch_scaling} reached its score; nothing to plan "
              "from", file=sys.stderr)
        return 2
    s = Settings(args.nodes, args.cores_per_node, args.network, os.path.relpath(args.node, harness.ROOT), args.beyond)
    nets = nm.networks(*nm.tcp_efficiency(load_json(args.shaped_links)))
    net = nets[args.network]
    threads = load_json(args.threads)
    report_inputs(node, nets, games, s.cores_per_node)
    full = {g.key: envelope(s, node, net, g) for g in games}
    for g in games:
        report(s, net, g, full[g.key])
    head = headline(s, node, nets, games)
    report_headline(games, nets, head)
    breakout = next((g for g in games if g.key == GOAL["game"]), None)
    goal = None
    if breakout and s.nodes >= GOAL["nodes"]:
        row = next(r for r in head[breakout.key][GOAL["network"]] if r.nodes == GOAL["nodes"])
        goal = goal_check(row, GOAL["minutes"])
    ab = [load_json(f) for f in args.fixed_cost.split(",")]
    cut = fixed_cost_cut(*ab) if len(ab) == 2 else None
    sens = sensitivity(s, node, nets, breakout or games[0], s.nodes, one_thread_fixed(threads), cut)
    report_goal(goal, sens)
    checks = model_check(load_json(args.step_time), load_json(args.node), node)
    xcheck = exchange_check(scaling, load_json(args.exchange))
    report_checks(checks, xcheck)
    pong = next((g for g in games if g.key == "pong"), None)
    sharding = sharding_from(load_json(args.floor_probe))
    sharded_rows = envelope(s, node, net, pong, sharding) if sharding and pong else []
    local = {h: envelope(s, node, net, pong, local_steps=h) for h in LOCAL_STEPS} if pong else {}
    if sharded_rows:
        report_sharding(sharding, full["pong"], sharded_rows)
    if local:
        report_local_steps(full["pong"], local)
    out = {"date": harness.now(), "settings": asdict(s), "modelled": True,
           "inputs": {"node_model": node.to_json(), "networks": {k: asdict(v) for k, v in nets.items()},
                      "games": {g.key: {"name": g.name, "runs": list(g.runs),
                                        "updates_measured": [asdict(u) for u in g.measured]} for g in games},
                      "files": {k: os.path.relpath(getattr(args, k), harness.ROOT) for k in
                                ("node", "threads", "step_time", "shaped_links", "exchange", "batch_scaling",
                                 "scaling", "floor_probe")} | {"breakout": args.breakout,
                                                               "fixed_cost": args.fixed_cost}},
           "envelope": {g.key: [r.to_json() for r in full[g.key]] for g in games},
           "time_to_score": {g: {k: [r.to_json() for r in rows] for k, rows in by.items()} for g, by in head.items()},
           "paper_minutes": PAPER_MINUTES, "goal": goal, "sensitivity": sens,
           "all_choices": {g.key: [c.to_json() for n in node_counts(s.nodes) for c in choices_for(n, s, node, net, g)]
                           for g in games},
           "model_check": checks, "exchange_check": xcheck,
           "sharded_optimizer": None if not sharded_rows else {
               "modelled": True, "in_trainer": False, "game": "pong", "parts": asdict(sharding),
               "envelope": [r.to_json() for r in sharded_rows]},
           "local_sgd": None if not local else {
               "modelled": True, "in_trainer": False, "game": "pong",
               "assumed": "updates to the score those of the same global batch",
               "by_local_steps": {str(h): [{**loc.to_json(), "break_even_updates_factor":
                                            sync.best.minutes / loc.best.minutes}
                                           for sync, loc in zip(full["pong"], local_rows)]
                                  for h, local_rows in local.items()}}}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "plan.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    try:
        plot(games, nets, head, s, os.path.join(args.out, "plan.png"))
    except ImportError as e:
        print(f"plan: no plot ({e})")
    if scaling is not None and not args.no_write_scaling:
        scaling["time_to_score_envelope"] = envelope_json(s, node, nets, games, head, goal, sens)
        with open(args.scaling, "w") as fh:
            json.dump(scaling, fh, indent=1)
        print(f"wrote {args.scaling} (time_to_score_envelope)")
    print(f"wrote {os.path.join(args.out, 'plan.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
