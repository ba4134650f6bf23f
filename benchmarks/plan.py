"""Which global batch and per-node batch reach Pong 18 soonest on N nodes: the planner (modelled).

    python -m benchmarks.plan [--nodes 64] [--cores-per-node 24] [--network ib100] [--node-model device16]

For each node count N (1, 2, 4, ... up to --nodes) and each global batch B (powers of two up to the
trainer's 4,096, at least N), with per-node batch b = B / N (`--train-batch b` on N ranks, one per node):

    minutes(N, B) = updates_to_score(B) x t_update(b, N) / 60
    t_update(b, N) = a + (c_train x T / cores + c_collect / cores) x b + exchange(N)

* updates_to_score(B): measured at the global batches the batch-scaling study ran to the score (frames
  to a mean-20 Pong return of 18 / (4 frames per agent step x B); read from its batch_scaling.json);
  between two of them interpolated in log-log (labelled fitted); below the smallest, the smallest's
  frames are assumed (more updates at a smaller batch); above the largest that reached 18 the
  updates are assumed no fewer than there (`--beyond plateau`: a larger batch saves no more updates),
  or taken from the study's noise-scale model (`--beyond noise-model`); both labelled assumed.
* a, c_train: the learner's fixed per-update cost and compute per sample at T TensorFlow threads.
  `--node-model device16` (default): fitted to train-step rates measured on a 16-core machine (the
  DEVICE16 numbers below; a proxy for a node). `here`: fitted by benchmarks/step_time.py on this
  machine at its largest thread count. Compute is scaled to the node's cores in proportion
  (assumed linear); the fixed cost is kept (assumed not to shrink with cores).
* c_collect: the simulators' and predictor's work per sample on one core, fitted as the whole 1-rank
  1-core trainer's time per agent step minus its train step's (the same scaling.json run), spread
  over the node's cores (assumed linear).
* exchange(N): Horovod's fixed cost per allreduce (fitted on this box) + the ring allreduce of the
  Nature CNN's 6.75 MB gradient, 2(N-1)/N x bytes / bandwidth + 2(N-1) x latency, exposed in full
  (the default synchronous exchange); bandwidth and latency per --network with their sources.

Prints the best (B, b) per node count, its minutes, its efficiency against linear (minutes at 1 node
/ (N x minutes at N)), what binds (the per-update floor a + exchange, or the updates), and beside it
the fixed per-node batch of 32 (the paper's layout, B = 32 N) under the same model; then how the
model's per-update time compares with the measured one (step_time.json); then two designs the trainer does
not have, modelled to judge whether to build them: a sharded optimizer and local SGD (weights averaged
every H updates, the exchange divided by H at the same updates). Writes OUT/plan.json and
OUT/plan.png, and the envelope into scaling.json (`time_to_score_envelope`). All of it modelled.
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

from benchmarks import harness, scaling_model as sm

FRAMES_PER_STEP = 4  # frameskip: one agent step (one sample) is 4 emulator frames
GRADIENT_BYTES = sm.BYTES_PER_FLOAT * sm.MODEL_FLOATS  # the Nature CNN's gradient, float32
PAPER_MINUTES = 21.0  # arXiv 1801.02852: 21 minutes on 64 nodes (their games and thresholds, not Pong 18)
TARGETS = {32: 0.5, 64: 0.35}  # issue 44: time to Pong 18 against linear
LOCAL_STEPS = (2, 4, 8)  # local SGD's averaging periods (updates between weight averages) modelled beside the envelope
STEP_TIME = os.path.join(harness.RESULTS, "step_time", "step_time.json")
FLOOR_PROBE = os.path.join(harness.RESULTS, "step_time", "floor_probe.json")
# the learner's fixed-cost A/B at one thread (Keras 3's Adam and three read backs, then the fused Adam and one)
FIXED_COST = tuple(os.path.join(harness.RESULTS, "step_time", f"fixed_cost-{w}.json") for w in ("before", "after"))
SCALING = os.path.join(harness.RESULTS, "scaling", "scaling.json")
BATCH_SCALING = os.path.join(harness.ROOT, "studies", "batch_scaling", "results", "batch_scaling.json")
SHAPED_LINKS = os.path.join(harness.ROOT, "studies", "shaped_links", "results", "shaped_links-horovod.json")
EXCHANGE = os.path.join(harness.ROOT, "studies", "exchange", "results", "exchange.json")
OUT = os.path.join(harness.RESULTS, "plan")

# Measured by an earlier session of this project on a lent 16-core Xeon machine (November 2026): the
# Nature CNN's train step alone (Keras 3, TF 2.21, Adam, no simulators, one rank), 16 TensorFlow threads,
# 3,050 / 7,292 / 12,800 train samples/s at batch 32 / 128 / 512. Copied here as the node proxy;
# a 16-core run of benchmarks/step_time.py replaces it.
DEVICE16_THREADS = 16
DEVICE16_SAMPLES_PER_S = {32: 3050.0, 128: 7292.0, 512: 12800.0}
DEVICE16_ONE_THREAD_B32_S = 0.0244  # the same machine, 1 thread, batch 32: 24.4 ms per step (no exchange)
DEVICE16_SOURCE = ("16-core Xeon, Nature CNN train step alone, 1 rank x 16 TF threads, 3,050 / 7,292 / 12,800 "
                   "samples/s at batch 32 / 128 / 512 (measured November 2026 by an earlier session)")


@dataclass(frozen=True)
class Network:
    """An interconnect: usable bandwidth and one-way latency per hop, each with where it comes from."""
    name: str
    bandwidth_bytes_per_s: float
    latency_s: float
    bandwidth_label: str  # measured | fitted | assumed
    latency_label: str
    source: str


# Shaped-link study (studies/shaped_links): over TCP, Horovod's defaults moved the ring's bytes at 0.43 of
# line rate (fitted to its link-bound points, 2-8 ranks; read from its JSON where present); latencies are the
# published figures it quotes. InfiniBand was not measured: 0.8 of line rate and 2 us are nominal (the
# scaling model's convention).
TCP_EFFICIENCY = 0.43


def networks(tcp_efficiency: float = TCP_EFFICIENCY, tcp_label: str = "fitted") -> dict[str, Network]:
    tcp = (f"{tcp_efficiency:.2f} of line rate, fitted over shaped TCP links (Horovod defaults, studies/shaped_links)"
           if tcp_label == "fitted" else f"{tcp_efficiency:.2f} of line rate ({tcp_label})")
    return {
        "ib100": Network("100 Gb/s InfiniBand", 0.8 * 100e9 / 8, 2e-6, "assumed", "assumed",
                         "nominal: 0.8 of line rate, 2 us (not measured)"),
        "25gbe": Network("25 GbE (TCP)", tcp_efficiency * 25e9 / 8, 20e-6, tcp_label, "assumed",
                         f"{tcp}; 10 GbE's published 20 us"),
        "10gbe": Network("10 GbE (TCP)", tcp_efficiency * 10e9 / 8, 20e-6, tcp_label, "assumed",
                         f"{tcp}; 20 us published (Hurwitz and Feng, Hot Interconnects 11, 2003)"),
        "1gbe": Network("1 GbE (TCP)", tcp_efficiency * 1e9 / 8, 35e-6, tcp_label, "assumed",
                        f"{tcp}; 35 us published (Open MPI over TCP, nw-grid.ac.uk LivMPI tests)"),
    }


NETWORKS = networks()


def tcp_efficiency(shaped: dict[str, Any] | None) -> tuple[float, str]:
    """Horovod's default allreduce over shaped TCP links, as a share of line rate (fitted there), else the
    constant above (assumed)."""
    fit = (((shaped or {}).get("analysis") or {}).get("fits") or {}).get("horovod/default") or {}
    if fit.get("efficiency"):
        return float(fit["efficiency"]), "fitted"
    return TCP_EFFICIENCY, "assumed (the shaped-link study's fit, copied)"


def exchange_s(nodes: int, net: Network, overhead_s: float, nbytes: float = GRADIENT_BYTES) -> float:
    """The synchronous allreduce's time on `nodes` nodes (0 on one: the trainer skips it)."""
    return sm.t_allreduce(nodes, nbytes, sm.AllreduceFit(overhead_s, net.bandwidth_bytes_per_s, net.latency_s))


@dataclass(frozen=True)
class NodeModel:
    """A learner update on one node: t(b) = overhead + (per_sample x threads / cores + collect / cores) x b."""
    name: str
    overhead_s: float
    per_sample_s: float  # at `threads` TensorFlow threads
    threads: int
    collect_s_per_sample_core: float  # simulators + predictor, seconds per sample on one core
    overhead_label: str
    compute_label: str
    collect_label: str
    source: str
    fitted_batches: tuple[int, ...] = ()

    def compute_s(self, batch: int, cores: int) -> float:
        return self.per_sample_s * self.threads / cores * batch

    def collect_s(self, batch: int, cores: int) -> float:
        return self.collect_s_per_sample_core / cores * batch

    def step_s(self, batch: int, cores: int) -> float:
        return self.overhead_s + self.compute_s(batch, cores) + self.collect_s(batch, cores)


def device16_fit() -> sm.StepFit:
    pts = [(b, b / r) for b, r in sorted(DEVICE16_SAMPLES_PER_S.items())]
    fit = sm.fit_step_time(pts)
    assert fit is not None
    return fit


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
    per_node_batch_label: str  # fitted (inside the measured batches) | extrapolated

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
    node_model: str
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


def choice(nodes: int, batch: int, upd: Updates, node: NodeModel, cores: int, exch: float,
           overhead_cut_s: float = 0.0) -> Choice:
    b = batch // nodes
    inside = (not node.fitted_batches) or min(node.fitted_batches) <= b <= max(node.fitted_batches)
    return Choice(nodes, batch, b, upd.updates, upd.label, upd.source, node.overhead_s - overhead_cut_s,
                  node.compute_s(b, cores), node.collect_s(b, cores), exch,
                  "fitted" if inside else "extrapolated (outside the fitted batches)")


def update_floor(nodes: int, net: Network, exchange_overhead_s: float,
                 sharding: Sharding | None, local_steps: int = 1) -> tuple[float, float]:
    """(the exchange, the cut in the fixed cost) per update on `nodes` nodes: with a sharded optimizer the ring's
    bytes are the same (a reduce-scatter and an allgather are an allreduce's two halves), each extra collective
    costs Horovod's fixed cost once more, and the fixed cost falls by the optimizer work shared. With local steps
    (local SGD; not in the trainer, modelled) each rank applies its own gradient for `local_steps` updates and the
    ranks then average their weights: one allreduce of the same 6.75 MB per `local_steps` updates."""
    exch = exchange_s(nodes, net, exchange_overhead_s) / local_steps
    if sharding is None or nodes <= 1:
        return exch, 0.0
    return exch + sharding.extra_collectives * (exchange_overhead_s + 2 * net.latency_s), sharding.saving_s(nodes)


def choices_for(nodes: int, s: Settings, node: NodeModel, net: Network, exchange_overhead_s: float,
                measured: Sequence[Updates], modelled: Sequence[sm.FramesToScore] = (),
                sharding: Sharding | None = None, local_steps: int = 1) -> list[Choice]:
    exch, cut = update_floor(nodes, net, exchange_overhead_s, sharding, local_steps)
    return [choice(nodes, gb, updates_at(gb, measured, s.beyond, modelled), node, s.cores_per_node, exch, cut)
            for gb in global_batches(nodes, s.max_global_batch)]


def best(choices: Sequence[Choice]) -> Choice:
    return min(choices, key=lambda c: (c.minutes, c.global_batch))


def efficiency(one_node_minutes: float, nodes: int, minutes: float) -> float:
    """Against linear scaling: minutes at 1 node / (N x minutes at N)."""
    return one_node_minutes / (nodes * minutes)


@dataclass(frozen=True)
class EnvelopeRow:
    nodes: int
    best: Choice
    efficiency_vs_linear: float
    binds: str
    fixed: Choice | None  # the fixed per-node batch (B = 32 N) under the same model
    fixed_efficiency_vs_linear: float | None
    target: float | None = None
    needed_step_s: float | None = None  # the time per update the target allows at the best choice's updates
    # the most this choice's B could give against linear with no per-update floor at all (no fixed cost, no exchange,
    # on one node too): the fewest samples to the score at any batch / the samples at B
    sample_bound: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {"nodes": self.nodes, "global_batch": self.best.global_batch,
                "per_node_batch": self.best.per_node_batch, "minutes": self.best.minutes,
                "efficiency_vs_linear": self.efficiency_vs_linear, "binds": self.binds, "target": self.target,
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


def envelope(s: Settings, node: NodeModel, net: Network, exchange_overhead_s: float, measured: Sequence[Updates],
             modelled: Sequence[sm.FramesToScore] = (), sharding: Sharding | None = None,
             local_steps: int = 1) -> list[EnvelopeRow]:
    """Per node count: the best (B, b), its efficiency against linear, what binds, and the fixed per-node
    batch beside it (all under one model). With `local_steps` > 1 the updates to the score are taken as those of
    the same global batch (local SGD's first-order equivalence; assumed, never measured here)."""
    rows: list[EnvelopeRow] = []
    one = one_fixed = None
    fewest_samples = min(u.updates * u.global_batch for u in measured)
    for n in node_counts(s.nodes):
        cs = choices_for(n, s, node, net, exchange_overhead_s, measured, modelled, sharding, local_steps)
        top = best(cs)
        fixed_gb = s.fixed_per_node_batch * n
        fixed = next((c for c in cs if c.global_batch == fixed_gb), None)
        if fixed is None and fixed_gb <= s.max_global_batch:
            exch, cut = update_floor(n, net, exchange_overhead_s, sharding, local_steps)
            upd = updates_at(fixed_gb, measured, s.beyond, modelled)
            fixed = choice(n, fixed_gb, upd, node, s.cores_per_node, exch, cut)
        if n == 1:
            one, one_fixed = top.minutes, (fixed.minutes if fixed else None)
        eff = efficiency(one, n, top.minutes)
        target = TARGETS.get(n)
        needed = one * 60.0 / (target * n) / top.updates if target else None
        rows.append(EnvelopeRow(n, top, eff, binds(top, eff, needed), fixed,
                                efficiency(one_fixed, n, fixed.minutes) if fixed and one_fixed else None, target,
                                needed, fewest_samples / (top.updates * top.global_batch)))
    return rows


# ---------------------------------------------------------------- inputs from the results files

def load_json(path: str) -> dict[str, Any] | None:
    if not path or not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def collect_cost(scaling: dict[str, Any] | None) -> tuple[float, str, str]:
    """Simulators + predictor per sample on one core: the 1-rank 1-core trainer's seconds per agent step
    minus its train step's per sample (both in the same scaling.json run). (seconds, label, source)."""
    try:
        base = next(m for m in scaling["measured"] if m["ranks"] == 1 and m["layout"] == "core"
                    and m.get("frames_per_s"))
        pipeline = FRAMES_PER_STEP / base["frames_per_s"]
        train = 1.0 / scaling["models"]["nature"]["train_samples_per_s_1thread"]
    except (TypeError, KeyError, StopIteration):
        return 0.0, "assumed", "no scaling.json with a 1-core trainer run: collection not charged"
    return max(pipeline - train, 0.0), "fitted", (
        f"1-rank 1-core trainer {1e3 * pipeline:.2f} ms per agent step minus its train step {1e3 * train:.2f} ms per "
        f"sample (scaling.json, {scaling.get('date', '')}); spread over the node's cores (assumed linear)")


def exchange_overhead(scaling: dict[str, Any] | None) -> tuple[float, str, str]:
    fit = ((scaling or {}).get("fit") or {}).get("allreduce", {}).get("horovod")
    if not fit:
        return 0.0, "assumed", "no fitted Horovod overhead: 0"
    return fit["overhead_s"], "fitted", "Horovod's fixed cost per allreduce, fitted on this box (scaling.json)"


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


def here_fit(step_time: dict[str, Any] | None, threads: int) -> tuple[dict[str, Any], tuple[int, ...]]:
    """step_time.json's fit at `threads` nearest to a dedicated node: to the CPU time per call (1 thread), else
    to the least-disturbed rounds; and the batches it was fitted to."""
    s = ((step_time or {}).get("summary") or {}).get(str(threads)) or {}
    fits = s.get("fits") or {}
    fit = fits.get("cpu") or fits.get("least_disturbed")
    if not fit:
        raise LookupError(f"no fit at {threads} thread(s) in step_time.json: run `python -m benchmarks.step_time`")
    return fit, tuple(sorted(int(b) for b in s["batches"] if int(b) != s.get("tiny_batch")))


def node_model(name: str, step_time: dict[str, Any] | None, collect: tuple[float, str, str],
               here_threads: int = 1) -> NodeModel:
    c_s, c_label, c_src = collect
    if name == "device16":
        f = device16_fit()
        return NodeModel("device16", f.overhead_s, f.per_sample_s, DEVICE16_THREADS, c_s,
                         "fitted (16-core proxy)", "fitted (16-core proxy), scaled by cores (assumed linear)", c_label,
                         f"{DEVICE16_SOURCE}; collection: {c_src}", tuple(sorted(DEVICE16_SAMPLES_PER_S)))
    f, batches = here_fit(step_time, here_threads)
    return NodeModel("here", f["overhead_s"], f["per_sample_s"], here_threads, c_s,
                     f"fitted on this machine ({here_threads} thread(s), CPU time per call or least-disturbed rounds)",
                     f"fitted on this machine ({here_threads} thread(s)), scaled by cores (assumed linear)", c_label,
                     f"benchmarks/step_time.py, {step_time.get('date', '')}, {step_time['machine'].get('cpu')}; "
                     f"collection: {c_src}", batches)


def model_check(step_time: dict[str, Any] | None, here_threads: int = 1) -> list[dict[str, Any]]:
    """The planner's per-update time (learner alone: one rank, no collection) against measured ones:
    (1) each thread count's fits against what they were fitted to (median fit against the medians, fastest
    fit against the fastest rounds), at every measured batch; (2) the `here` model's fit scaled by cores
    (its assumption) against the other thread counts measured here and against the 16-core proxy's
    measurements; (3) the 16-core proxy's fit against its own three points."""
    out: list[dict[str, Any]] = []
    summary = (step_time or {}).get("summary") or {}

    def add(check: str, threads: int, batch: int, measured: float, model: float) -> None:
        out.append({"check": check, "threads": threads, "batch": batch, "measured_s": measured, "model_s": model,
                    "error": sm.relative_error(model, measured)})

    for t, v in sorted(summary.items(), key=lambda kv: int(kv[0])):
        for b, m in v["batches"].items():
            for name, key in (("median", "median_s"), ("least_disturbed", "min_s"), ("cpu", "cpu_s_per_call")):
                if name in m and int(b) != v.get("tiny_batch"):
                    add(f"fit to the {name.replace('_', '-')} times", int(t), int(b), m[key], m[name]["model_s"])
    try:
        f, _ = here_fit(step_time, here_threads)
    except LookupError:
        f = None
    if f:
        scaled = lambda threads, b: f["overhead_s"] + f["per_sample_s"] * here_threads / threads * b  # noqa: E731
        for t, v in sorted(summary.items(), key=lambda kv: int(kv[0])):
            if int(t) != here_threads:
                for b, m in v["batches"].items():
                    if int(b) != v.get("tiny_batch"):
                        add(f"{here_threads}-thread fit scaled by cores, vs this machine's fastest rounds",
                            int(t), int(b), m["min_s"], scaled(int(t), int(b)))
        add(f"{here_threads}-thread fit scaled by cores, vs the 16-core machine", 1, 32, DEVICE16_ONE_THREAD_B32_S,
            scaled(1, 32))
        for b, r in sorted(DEVICE16_SAMPLES_PER_S.items()):
            add(f"{here_threads}-thread fit scaled by cores, vs the 16-core machine", DEVICE16_THREADS, b, b / r,
                scaled(DEVICE16_THREADS, b))
    d = device16_fit()
    for b, r in sorted(DEVICE16_SAMPLES_PER_S.items()):
        add("16-core proxy fit vs its own points", DEVICE16_THREADS, b, b / r, d.seconds(b))
    return out


def exchange_check(scaling: dict[str, Any] | None, exchange: dict[str, Any] | None) -> dict[str, Any] | None:
    """The exchange term at 2 ranks with this box's own allreduce fit (overhead, bandwidth, latency from the
    scaling benchmark's sweep) against the exposed exchange the exchange study measured in the learner's step
    (2 ranks x 1 core, grouped, the default)."""
    fit = sm.AllreduceFit.from_json((((scaling or {}).get("fit") or {}).get("allreduce") or {}).get("horovod"))
    measured = ((exchange or {}).get("projection_input") or {}).get("exposed_ms_grouped")
    if fit is None or not measured:
        return None
    model = sm.t_allreduce(2, GRADIENT_BYTES, fit)
    return {"ranks": 2, "model_s": model, "measured_exposed_s": measured / 1e3,
            "error": sm.relative_error(model, measured / 1e3)}


# ---------------------------------------------------------------- report, plot, files

def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def report(s: Settings, node: NodeModel, net: Network, exch_label: tuple[float, str, str], rows: Sequence[EnvelopeRow],
           measured: Sequence[Updates], checks: Sequence[dict[str, Any]], other: dict[int, float]) -> None:
    print(f"PLANNER (modelled): time to a Pong mean-20 return of 18 on N nodes x {s.cores_per_node} cores, "
          f"{net.name}, node model {node.name}, beyond the largest measured batch: {s.beyond}")
    print("inputs:")
    for u in measured:
        print(f"  updates to 18 at global batch {u.global_batch}: {u.updates:,.0f} (measured: {u.source})")
    print(f"  fixed cost per update a = {1e3 * node.overhead_s:.2f} ms ({node.overhead_label})")
    print(f"  train compute {1e3 * node.per_sample_s:.3f} ms/sample at {node.threads} threads -> "
          f"{1e3 * node.per_sample_s * node.threads / s.cores_per_node:.4f} ms on {s.cores_per_node} cores "
          f"({node.compute_label})")
    print(f"  collection (simulators + predictor) {1e3 * node.collect_s_per_sample_core:.2f} ms/sample on one core -> "
          f"{1e3 * node.collect_s_per_sample_core / s.cores_per_node:.4f} ms on {s.cores_per_node} "
          f"({node.collect_label})")
    print(f"  exchange: Horovod fixed {1e3 * exch_label[0]:.2f} ms ({exch_label[1]}); bandwidth "
          f"{net.bandwidth_bytes_per_s / 1e9:.2f} GB/s ({net.bandwidth_label}), latency {1e6 * net.latency_s:.0f} us "
          f"({net.latency_label}): {net.source}")
    print(f"  source of the node model: {node.source}")
    print(f"\n{'nodes':>5} {'B':>5} {'B/N':>5} {'updates':>8} {'upd. from':>9} {'a ms':>6} {'comp ms':>7} "
          f"{'exch ms':>7} {'minutes':>8} {'eff':>5}  | fixed B/N=32: {'min':>6} {'eff':>5} | binds")
    for r in rows:
        c, f = r.best, r.fixed
        fixed = f"{f.minutes:>6.2f} {_pct(r.fixed_efficiency_vs_linear):>5}" if f else f"{'-':>6} {'-':>5}"
        target = (f" (target {r.target}: needs {1e3 * r.needed_step_s:.2f} ms per update at these updates, i.e. a "
                  f"floor of {1e3 * (r.needed_step_s - c.compute_s - c.collect_s):.2f} ms against "
                  f"{1e3 * c.floor_s:.2f}; with no floor at all, here or on one node, B = {c.global_batch} gives at "
                  f"most {r.sample_bound:.2f}: the samples it needs to the score against the fewest)"
                  if r.target and r.binds != "target met" else "")
        print(f"{r.nodes:>5} {c.global_batch:>5} {c.per_node_batch:>5} {c.updates:>8,.0f} {c.updates_label:>9} "
              f"{1e3 * c.overhead_s:>6.2f} {1e3 * (c.compute_s + c.collect_s):>7.2f} {1e3 * c.exchange_s:>7.2f} "
              f"{c.minutes:>8.2f} {r.efficiency_vs_linear:>5.2f}  | {fixed:>26} | {r.binds}{target}")
    print("eff: minutes at 1 node / (N x minutes at N); comp: train compute + collection; upd. from: measured, "
          "fitted (interpolated) or assumed")
    if other:
        print("the other node model's envelope efficiency: "
              + ", ".join(f"{n} nodes {e:.2f}" for n, e in other.items()))
    print("\nThe planner's per-update time (learner alone, one rank) against measured ones "
          "(benchmarks/step_time.py; target: within 15%):")
    for kind in dict.fromkeys(c["check"] for c in checks):
        mine = [c for c in checks if c["check"] == kind]
        worst = max(abs(c["error"]) for c in mine)
        print(f"  {kind}: largest |error| {worst:.0%} ({'within' if worst <= 0.15 else 'NOT within'} 15%): "
              + ", ".join(f"{c['threads']}t b{c['batch']} {c['error']:+.0%}" for c in mine))


def report_sharding(sharding: Sharding, rows: Sequence[EnvelopeRow], sharded: Sequence[EnvelopeRow]) -> None:
    print("\nA sharded optimizer (ZeRO-1; not in the trainer; modelled): the fixed cost per update falls by the "
          "optimizer work shared, the exchange gains two collectives")
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
    print("\nLocal SGD (weights averaged every H updates; not in the trainer; modelled): the exchange per update "
          "falls to 1/H; updates to 18 assumed those of the same global batch (never measured here)")
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


def plot(rows: Sequence[EnvelopeRow], today: Sequence[dict[str, Any]], s: Settings, net: Network, node: NodeModel,
         path: str) -> None:
    plt = harness.pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    ns = [r.nodes for r in rows]
    ax1.plot(ns, [r.best.minutes for r in rows], "o-", label="envelope: best global batch B and B/N (modelled)")
    for r in rows:
        ax1.annotate(f"B={r.best.global_batch}", (r.nodes, r.best.minutes), fontsize=6, xytext=(3, 3),
                     textcoords="offset points")
    fx = [r for r in rows if r.fixed]
    ax1.plot([r.nodes for r in fx], [r.fixed.minutes for r in fx], "s--", label="fixed per-node batch 32 (same model)")
    ax1.plot(ns, [rows[0].best.minutes / n for n in ns], "k:", label="linear from the envelope's 1 node")
    if today:
        ax1.plot([p["nodes"] for p in today if p.get("minutes")], [p["minutes"] for p in today if p.get("minutes")],
                 "x:", color="grey", label="scaling.json projection before (per-node batch 32, pipeline node model)")
    ax1.plot([64], [PAPER_MINUTES], "r*", ms=12, label="paper: 21 min on 64 nodes (their games, not Pong 18)")
    ax1.set_yscale("log")
    ax1.set_ylabel("minutes to Pong 18 (modelled)")
    ax2.plot(ns, [r.efficiency_vs_linear for r in rows], "o-", label="envelope")
    ax2.plot([r.nodes for r in fx], [r.fixed_efficiency_vs_linear for r in fx], "s--", label="fixed per-node batch 32")
    ax2.plot([r.nodes for r in fx], [efficiency(rows[0].best.minutes, r.nodes, r.fixed.minutes) for r in fx], "s:",
             ms=4, label="fixed per-node batch 32, against the envelope's 1 node")
    if today:
        pts = [p for p in today if p.get("minutes")]
        ax2.plot([p["nodes"] for p in pts], [pts[0]["minutes"] / (p["nodes"] * p["minutes"]) for p in pts], "x:",
                 color="grey", label="scaling.json projection before")
    ax2.plot(list(TARGETS), list(TARGETS.values()), "r_", ms=20, mew=2, label="issue 44 targets")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("efficiency vs linear")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nodes")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"planner (MODELLED): {s.cores_per_node} cores per node, {net.name}, node model {node.name}",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def envelope_json(s: Settings, node: NodeModel, net: Network, rows: Sequence[EnvelopeRow],
                  measured: Sequence[Updates]) -> dict[str, Any]:
    """The block scaling.json holds as `time_to_score_envelope`."""
    return {"written_by": "benchmarks/plan.py", "modelled": True, "settings": asdict(s),
            "network": asdict(net), "node_model": asdict(node),
            "updates_measured": [asdict(u) for u in measured],
            "rows": [r.to_json() for r in rows],
            "note": "time to Pong 18 = updates to 18 at global batch B x the modelled time per update at per-node "
                    "batch B/N; efficiency_vs_linear = minutes at 1 node / (N x minutes at N); fixed_per_node_batch: "
                    "B = 32 N under the same model (the paper's layout)"}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse would print its usage first)
        print(f"plan: {message}", file=sys.stderr)
        raise SystemExit(2)


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = _Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=64, help="largest node count (1 to 4096)")
    p.add_argument("--cores-per-node", type=int, default=24, help="cores of a node (the paper's: 24)")
    p.add_argument("--network", default="ib100", choices=sorted(NETWORKS), help="the interconnect")
    p.add_argument("--node-model", default="device16", choices=("device16", "here"),
                   help="device16: the 16-core proxy; here: benchmarks/step_time.py's fit on this machine")
    p.add_argument("--here-threads", type=int, default=1,
                   help="--node-model here: the thread count whose fit is scaled to the node (1: on a shared 2-core "
                        "machine the only count that gets its cores)")
    p.add_argument("--beyond", default="plateau", choices=("plateau", "noise-model"),
                   help="updates above the largest batch that reached 18: no fewer than there (plateau), or the "
                        "batch-scaling study's noise-scale model")
    p.add_argument("--step-time", default=STEP_TIME, help="benchmarks/step_time.py's JSON")
    p.add_argument("--batch-scaling", default=BATCH_SCALING, help="the batch-scaling study's JSON (updates to 18)")
    p.add_argument("--shaped-links", default=SHAPED_LINKS, help="the shaped-link study's Horovod JSON (TCP efficiency)")
    p.add_argument("--exchange", default=EXCHANGE, help="the exchange study's JSON (a check of the exchange term)")
    p.add_argument("--scaling", default=SCALING,
                   help="scaling.json: collection cost, Horovod's overhead, the earlier projection; gains the envelope")
    p.add_argument("--floor-probe", default=FLOOR_PROBE,
                   help="benchmarks/floor_probe.py's JSON: a sharded optimizer's parts, modelled beside the envelope")
    p.add_argument("--no-write-scaling", action="store_true", help="leave scaling.json unchanged")
    p.add_argument("--out", default=OUT)
    args = p.parse_args(argv)
    if not 1 <= args.nodes <= sm.MAX_GLOBAL_BATCH:
        p.error(f"--nodes {args.nodes}: must be from 1 to {sm.MAX_GLOBAL_BATCH} (at least one sample per node at "
                "the largest global batch)")
    if args.cores_per_node < 1:
        p.error(f"--cores-per-node {args.cores_per_node}: must be at least 1")
    if not os.path.exists(args.batch_scaling):
        p.error(f"--batch-scaling {args.batch_scaling}: no such file (the batch-scaling study's batch_scaling.json)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from benchmarks.scaling_results import frames_from_batch_scaling

    frames = frames_from_batch_scaling(load_json(args.batch_scaling))
    measured = measured_updates(frames)
    if not measured:
        print(f"plan: {args.batch_scaling}: no global batch reached the score; nothing to plan from", file=sys.stderr)
        return 2
    scaling, step_time = load_json(args.scaling), load_json(args.step_time)
    if args.node_model == "here" and not step_time:
        print(f"plan: --node-model here needs {args.step_time} (python -m benchmarks.step_time)", file=sys.stderr)
        return 2
    s = Settings(args.nodes, args.cores_per_node, args.network, args.node_model, args.beyond)
    eff, eff_label = tcp_efficiency(load_json(args.shaped_links))
    net, collect, exch = networks(eff, eff_label)[args.network], collect_cost(scaling), exchange_overhead(scaling)
    modelled = [f for f in frames if f.modelled]
    try:
        node = node_model(args.node_model, step_time, collect, args.here_threads)
    except LookupError as e:
        print(f"plan: {e}", file=sys.stderr)
        return 2
    rows = envelope(s, node, net, exch[0], measured, modelled)
    other: dict[int, float] = {}
    other_name = "here" if args.node_model == "device16" else "device16"
    try:
        other_rows = envelope(s, node_model(other_name, step_time, collect, args.here_threads), net, exch[0],
                              measured, modelled)
        other = {r.nodes: r.efficiency_vs_linear for r in other_rows if r.nodes in TARGETS or r.nodes == args.nodes}
    except LookupError:
        pass
    sharding = sharding_from(load_json(args.floor_probe))
    sharded_rows = envelope(s, node, net, exch[0], measured, modelled, sharding) if sharding else []
    local = {h: envelope(s, node, net, exch[0], measured, modelled, local_steps=h) for h in LOCAL_STEPS}
    checks = model_check(step_time, args.here_threads)
    xcheck = exchange_check(scaling, load_json(args.exchange))
    report(s, node, net, exch, rows, measured, checks, other)
    cut = fixed_cost_cut(*(load_json(f) for f in FIXED_COST)) if node.name == "device16" else None
    cut_rows = envelope(s, dataclasses.replace(node, overhead_s=node.overhead_s - cut), net, exch[0], measured,
                        modelled) if cut else []
    if cut_rows:
        print(f"the 16-core proxy less the fixed cost cut measured at one thread ({1e3 * cut:.2f} ms: the fused Adam, "
              "one read back; assumed to carry to 16 threads, which no run has measured): "
              + ", ".join(f"{r.nodes} nodes {r.best.minutes:.2f} min, eff {r.efficiency_vs_linear:.2f}"
                          for r in cut_rows if r.nodes in TARGETS or r.nodes in (1, args.nodes)))
    if sharded_rows:
        report_sharding(sharding, rows, sharded_rows)
    if xcheck:
        print(f"  the exchange term at 2 ranks with this box's fitted allreduce: {1e3 * xcheck['model_s']:.1f} ms, "
              "against "
              f"{1e3 * xcheck['measured_exposed_s']:.1f} ms exposed in the learner's step (exchange study, grouped): "
              f"{xcheck['error']:+.0%}")
    report_local_steps(rows, local)
    today = (((scaling or {}).get("time_to_score_projection") or {}).get("by_exchange") or {}).get("sync", [])
    out = {"date": harness.now(), "settings": asdict(s), "modelled": True,
           "inputs": {"updates_measured": [asdict(u) for u in measured], "node_model": asdict(node),
                      "network": asdict(net),
                      "exchange_overhead": {"seconds": exch[0], "label": exch[1], "source": exch[2]},
                      "files": {"step_time": os.path.relpath(args.step_time, harness.ROOT),
                                "shaped_links": os.path.relpath(args.shaped_links, harness.ROOT),
                                "exchange": os.path.relpath(args.exchange, harness.ROOT),
                                "batch_scaling": os.path.relpath(args.batch_scaling, harness.ROOT),
                                "scaling": os.path.relpath(args.scaling, harness.ROOT)}},
           "envelope": [r.to_json() for r in rows],
           "other_node_model": {"name": other_name, "efficiency_vs_linear": {str(k): v for k, v in other.items()}},
           "all_choices": [c.to_json() for n in node_counts(s.nodes)
                           for c in choices_for(n, s, node, net, exch[0], measured, modelled)],
           "model_check": checks, "exchange_check": xcheck,
           "proxy_less_fixed_cost_cut": None if not cut_rows else {
               "assumed": "the one-thread cut carries to the 16-core proxy", "cut_s": cut,
               "envelope": [r.to_json() for r in cut_rows]},
           "sharded_optimizer": None if not sharding else {
               "modelled": True, "in_trainer": False, "parts": asdict(sharding),
               "envelope": [r.to_json() for r in sharded_rows]},
           "local_sgd": {"modelled": True, "in_trainer": False,
                         "assumed": "updates to the score those of the same global batch",
                         "by_local_steps": {str(h): [{**loc.to_json(), "break_even_updates_factor":
                                                      sync.best.minutes / loc.best.minutes}
                                                     for sync, loc in zip(rows, local_rows)]
                                            for h, local_rows in local.items()}}}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "plan.json"), "w") as fh:
        json.dump(out, fh, indent=1)
    try:
        plot(rows, today, s, net, node, os.path.join(args.out, "plan.png"))
    except ImportError as e:
        print(f"plan: no plot ({e})")
    if scaling is not None and not args.no_write_scaling:
        scaling["time_to_score_envelope"] = envelope_json(s, node, net, rows, measured)
        with open(args.scaling, "w") as fh:
            json.dump(scaling, fh, indent=1)
        print(f"wrote {args.scaling} (time_to_score_envelope)")
    print(f"wrote {os.path.join(args.out, 'plan.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
