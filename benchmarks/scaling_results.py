"""The scaling benchmark's results: what was measured, and the analysis derived from it (never mixed).

`ScalingData` is what a run measures and saves after every step; `analyze()` derives a new
`Analysis` from it (efficiencies, the fitted allreduce model, the projection) without changing it;
`to_json()` writes both in the layout of benchmarks/results/scaling/scaling.json, and `ScalingData.from_json`
reads that layout back (also files written before these classes existed), for --analyze-only.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from benchmarks import scaling_model as sm


@dataclass(frozen=True)
class Measurement:
    """One trainer run (`mpirun -np ranks`) at one layout and exchange: its steady state, or an error."""
    ranks: int
    layout: str  # core | fat | node | independent (the no-exchange control)
    exchange: str  # sync | none (the control) | overlap (runs made before --exchange overlap was removed)
    threads_per_rank: int
    oversubscribed: bool = False
    command: str = ""
    rows: int = 0
    frames_per_s: float | None = None  # all ranks
    updates_per_s: float | None = None
    window_s: float | None = None
    ms_per_update_rank0: dict[str, float] = field(default_factory=dict)
    dist_backend: str | None = None
    startup_s: float | None = None  # launch to the first progress row of every run directory
    outcome: str | None = None
    error: str | None = None

    @property
    def measured(self) -> bool:
        return self.frames_per_s is not None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Measurement:
        known = {f.name for f in fields(cls)}
        return cls(**{"exchange": "sync", **{k: v for k, v in d.items() if k in known}})


@dataclass(frozen=True)
class AllreduceSweep:
    """benchmarks/allreduce_probe.py's output at one rank count (rows: backend, floats, bytes, seconds)."""
    ranks: int
    reps: int = 0
    rows: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    def samples(self, backend: str) -> list[sm.AllreduceSample]:
        return [sm.AllreduceSample(self.ranks, r["bytes"], r["seconds"]) for r in self.rows
                if r["backend"] == backend and not r.get("model_gradients")]

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> AllreduceSweep:
        return cls(d.get("ranks", 1), d.get("reps", 0), d.get("rows", []), d.get("error"))


@dataclass
class ScalingData:
    """What one invocation measured (or several merged, e.g. one per cluster job)."""
    machine: dict[str, Any]
    date: str
    config: dict[str, Any]
    measured: list[Measurement] = field(default_factory=list)
    allreduce: list[AllreduceSweep] = field(default_factory=list)
    models: dict[str, Any] | None = None  # train-step samples/s of each network, for the projection
    note: str | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ScalingData:
        return cls(d["machine"], d.get("date", ""), d.get("config", {}),
                   [Measurement.from_json(m) for m in d.get("measured", [])],
                   [AllreduceSweep.from_json(s) for s in d.get("allreduce", [])], d.get("models"), d.get("note"))

    def merged(self, other: ScalingData) -> ScalingData:
        return replace(self, measured=self.measured + other.measured, allreduce=self.allreduce + other.allreduce)

    def sorted(self) -> ScalingData:
        return replace(self, measured=sorted(self.measured, key=lambda m: (m.layout, m.ranks)))

    def base(self, layout: str) -> Measurement | None:
        """The 1-rank synchronous run of a layout: what efficiencies are measured against."""
        return next((m for m in self.measured if m.layout == layout and m.ranks == 1 and m.measured
                     and m.exchange == "sync"), None)


@dataclass(frozen=True)
class Scored:
    """A measurement with its efficiencies (None where there is nothing to compare with)."""
    m: Measurement
    efficiency: float | None = None  # over r x one rank's frames/s
    efficiency_vs_control: float | None = None  # over r exchange-free runs on the same cores


@dataclass(frozen=True)
class Analysis:
    scored: list[Scored]
    fits: dict[str, sm.AllreduceFit | None]
    t_compute_s: float | None = None
    box_prediction: list[dict[str, Any]] = field(default_factory=list)
    projection_node: dict[str, Any] | None = None
    projection: list[sm.ProjectionPoint] = field(default_factory=list)
    prediction_from: dict[str, Any] | None = None
    node_fit: sm.NodeFit | None = None
    time_to_score: dict[str, Any] | None = None


def score(data: ScalingData) -> list[Scored]:
    out = []
    for m in data.measured:
        base = data.base("core" if m.layout == "independent" else m.layout)
        eff = (sm.weak_scaling_efficiency(m.frames_per_s, m.ranks, base.frames_per_s, m.layout == "fat")
               if base and m.measured else None)
        ctrl = next((c for c in data.measured if c.layout == "independent" and c.ranks == m.ranks and c.measured), None)
        vs_ctrl = m.frames_per_s / ctrl.frames_per_s if ctrl and m.layout == "core" and m.measured else None
        out.append(Scored(m, eff, vs_ctrl))
    return out


# Measured on a lent 16-core Xeon (2026-11; docs/results/scaling.md, 'A node's cores'): the Nature CNN train step alone
# (no simulators) at batch 32 ran 1,187 samples/s on one TF thread and 3,050 on 16. Until a 16-core
# run of the whole trainer exists this is the only many-core point; labelled as a proxy.
DEVICE_SPEEDUPS = (sm.SpeedupPoint(16, 3050.0 / 1187.0, "lent machine, 2026-11: train step alone (proxy for the "
                                                         "pipeline), batch 32, 16 vs 1 TF threads, 16-core Xeon"),)


def node_speedups(data: ScalingData) -> list[sm.SpeedupPoint]:
    """The pipeline's measured speedups on this machine (1-rank fat layout over 1 core), then the device's."""
    fat, base = data.base("fat"), data.base("core")
    here = []
    if fat and base and fat.threads_per_rank > 1:
        here.append(sm.SpeedupPoint(fat.threads_per_rank, fat.frames_per_s / base.frames_per_s,
                                    f"this machine: whole trainer, 1 rank, {fat.threads_per_rank} vs 1 threads "
                                    f"({data.machine.get('cpu')}, {data.date})"))
    return here + list(DEVICE_SPEEDUPS)


def _projection_node(data: ScalingData, node_cores: int, fit: sm.NodeFit) -> tuple[dict[str, Any], float]:
    base = data.base("core")
    per_core_steps = base.frames_per_s / 4
    node = {"cores": node_cores, "per_core_agent_steps_per_s": per_core_steps,
            "source": f"measured: 1-rank core layout (1 thread) on {data.machine.get('cpu')}",
            "node_fit": fit.to_json(),
            "networks": {k: asdict(v) for k, v in sm.NETWORKS.items()},
            "assumptions": "network bandwidth and latency are nominal figures (sm.NETWORKS), not measured; "
                           "Horovod software overhead per allreduce as fitted on this machine; "
                           "projection rows say which node model they use (linear: the old assumption)"}
    return node, per_core_steps


def time_to_score(projection: list[sm.ProjectionPoint], measured: list[sm.FramesToScore], network: str,
                  node_model: str, per_rank_batch: int = 32) -> dict[str, Any]:
    """Minutes to the score against nodes for the Nature CNN, per exchange mode (all modelled)."""
    out: dict[str, Any] = {"network": network, "model": "nature", "node_model": node_model,
                           "per_node_batch": per_rank_batch, "modelled": True,
                           "frames_measured": [asdict(m) for m in measured], "by_exchange": {}}
    for exchange in sorted({p.exchange for p in projection}):
        rows = [p for p in projection if p.network == network and p.model == "nature" and p.exchange == exchange
                and p.per_rank_batch == per_rank_batch and p.node_model == node_model]
        out["by_exchange"][exchange] = [asdict(t) for t in sm.project_time_to_score(rows, measured)]
    return out


def _prediction_from(data: ScalingData, scored: list[Scored], path: str,
                     other: dict[str, Any]) -> dict[str, Any] | None:
    """The other machine's fitted exchange cost against this machine's measured compute time."""
    ofit = sm.AllreduceFit.from_json((other.get("fit", {}).get("allreduce") or {}).get("horovod"))
    base = data.base("core")
    if not (base and ofit and ScalingData.from_json(other).base("core")):
        return None
    tc = 1.0 / base.updates_per_s
    pts = []
    for s in scored:
        if s.m.layout == "core" and s.efficiency is not None and s.m.exchange == "sync":
            pred = sm.predict_efficiency(s.m.ranks, tc, ofit)
            pts.append({"ranks": s.m.ranks, "measured": s.efficiency, "predicted": pred, "error": pred - s.efficiency})
    return {"file": os.path.basename(path), "machine": other.get("machine"), "fit": ofit.to_json(), "points": pts,
            "modelled": True}


def analyze(data: ScalingData, node_cores: int, fit_from: dict[str, Any] | None = None,
            fit_from_path: str = "", frames_to_score: list[sm.FramesToScore] | None = None,
            exposed: dict[str, float] | None = None) -> Analysis:
    """Efficiencies, the fitted model and the projection, from the measured points (modelled parts say so).

    The projection is made twice: with a node's cores scaling linearly (the old assumption) and with
    the node fit; `frames_to_score` (from the batch-scaling benchmark) adds minutes to the score.
    """
    scored = score(data)
    fits = {b: sm.fit_allreduce(s for sweep in data.allreduce for s in sweep.samples(b)) for b in ("horovod", "mpi")}
    base, hfit = data.base("core"), fits["horovod"] or fits["mpi"]
    extra: dict[str, Any] = {}
    if base and hfit:
        tc = 1.0 / base.updates_per_s
        ranks = sorted({m.ranks for m in data.measured} | {16})
        node_fit = sm.fit_node(node_speedups(data)) or sm.LINEAR_NODE
        node, per_core_steps = _projection_node(data, node_cores, node_fit)
        projection = [p for fit in (sm.LINEAR_NODE, node_fit)
                      for p in sm.project(sm.net_models(per_core_steps, node_cores, data.models, fit),
                                          hfit.overhead_s, [32, 64], exposed=exposed)]
        extra = {"t_compute_s": tc, "projection_node": node, "node_fit": node_fit,
                 "box_prediction": [{"ranks": r, "efficiency": sm.predict_efficiency(r, tc, hfit), "modelled": True}
                                    for r in ranks],
                 "projection": projection}
        if frames_to_score:
            extra["time_to_score"] = time_to_score(projection, frames_to_score, "100Gb/s InfiniBand", node_fit.label)
    if fit_from is not None:
        extra["prediction_from"] = _prediction_from(data, scored, fit_from_path, fit_from)
    return Analysis(scored, fits, **extra)


def to_json(data: ScalingData, a: Analysis | None) -> dict[str, Any]:
    """The layout of benchmarks/results/scaling/scaling.json (numbers unrounded)."""
    out: dict[str, Any] = {"machine": data.machine, "date": data.date, "config": data.config}
    scored = a.scored if a else [Scored(m) for m in data.measured]
    out["measured"] = [{**s.m.to_json(), **({"efficiency": s.efficiency} if s.efficiency is not None else {}),
                        **({"efficiency_vs_control": s.efficiency_vs_control}
                           if s.efficiency_vs_control is not None else {})} for s in scored]
    out["allreduce"] = [s.to_json() for s in data.allreduce]
    if data.models is not None:
        out["models"] = data.models
    if data.note:
        out["note"] = data.note
    if a is None:
        return out
    out["fit"] = {"allreduce": {b: f.to_json() if f else None for b, f in a.fits.items()}, "modelled": True}
    if a.t_compute_s is not None:
        out["fit"]["t_compute_s_per_update_1core"] = a.t_compute_s
        out.update(box_prediction=a.box_prediction, projection_node=a.projection_node,
                   projection=[asdict(p) for p in a.projection])
    if a.prediction_from is not None:
        out["prediction_from"] = a.prediction_from
    if a.time_to_score is not None:
        out["time_to_score_projection"] = a.time_to_score
    return out


def reached_at(p: Mapping[str, Any]) -> tuple[int, str] | None:
    """A batch-scaling point's frames to the target (a batch_scaling.json point or a PointResult's fields): its
    evaluation's where it has one there (the policy at that frame), else its training return's (which lags by a
    game on every emulator), with which of the two it is."""
    if p.get("frames_to_target_eval"):
        return int(p["frames_to_target_eval"]), "evaluation"
    if p.get("frames_to_target"):
        return int(p["frames_to_target"]), "training return"
    return None


def frames_from_batch_scaling(d: dict[str, Any]) -> list[sm.FramesToScore]:
    """Per global batch in a batch_scaling.json: the fewest frames to the target over the points that
    reached it; None where every finished point failed (frame cap, abandoned); unfinished points
    (partial) are not a measurement and are left out unless their periodic evaluation reached the
    target. Then the noise-scale model's frames per batch (its projection term; `modelled`), where the
    JSON has one. A point's frames are its evaluation's where it has one at the target (the policy at that
    frame), else its training return's (which lags by a game on every emulator); the source says which."""
    def frames(p: dict[str, Any]) -> tuple[float, str] | None:
        reached = reached_at(p)
        return (float(reached[0]), f"{p['point']} ({reached[1]})") if reached else None

    by: dict[int, list[dict[str, Any]]] = {}
    for p in d.get("points", []):
        if p.get("state") != "partial" or p.get("frames_to_target_eval"):
            by.setdefault(int(p["global_batch"]), []).append(p)
    out = []
    for batch, pts in sorted(by.items()):
        reached = [f for f in map(frames, pts) if f]
        best = min(reached) if reached else None
        out.append(sm.FramesToScore(batch, best[0] if best else None,
                                    best[1] if best else ", ".join(f"{p['point']}: {p['state']}" for p in pts)))
    model = d.get("noise_model") or {}
    term = model.get("terms", {}).get(model.get("projection_term", ""))
    if term:  # used only where no measurement answers (scaling_model.frames_at_batch); contradicted batches left out
        for batch, frames in term["frames"].items():
            if batch not in term.get("contradicted", {}):
                out.append(sm.FramesToScore(int(batch), float(frames), f"noise scale along {model['source_point']}, "
                                            f"{model['projection_term']}", modelled=True))
    return out
