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

from benchmarks import node_model as nm, scaling_model as sm


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
    node_model: nm.NodeModel | None = None
    projection: list[nm.ProjectionPoint] = field(default_factory=list)
    prediction_from: dict[str, Any] | None = None
    networks: dict[str, nm.Network] = field(default_factory=dict)


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


PROJECTED_NETWORKS = ("ib100", "10gbe", "10gbe-nominal")  # the networks the weak-scaling projection covers


def model_inputs(data: ScalingData, fits: dict[str, sm.AllreduceFit | None]) -> dict[str, Any]:
    """What the node model reads from a scaling.json, made from this analysis (the same numbers the planner reads
    from the file it is written to)."""
    return {"machine": data.machine, "date": data.date, "measured": [m.to_json() for m in data.measured],
            "models": data.models, "fit": {"allreduce": {b: f.to_json() if f else None for b, f in fits.items()}}}


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
            fit_from_path: str = "", exposed: dict[str, float] | None = None, node_path: str = nm.NODE_FILE,
            threads_path: str = nm.THREADS_FILE, shaped_links: dict[str, Any] | None = None) -> Analysis:
    """Efficiencies, the fitted allreduce model and the projection, from the measured points (modelled parts say so).

    The projection to N nodes of `node_cores` cores is benchmarks/node_model.py's (the planner's too), its node
    inputs from `node_path`, `threads_path` and this analysis, its networks' TCP fraction from `shaped_links`.
    """
    scored = score(data)
    fits = {b: sm.fit_allreduce(s for sweep in data.allreduce for s in sweep.samples(b)) for b in ("horovod", "mpi")}
    base, hfit = data.base("core"), fits["horovod"] or fits["mpi"]
    extra: dict[str, Any] = {}
    if base and hfit:
        tc = 1.0 / base.updates_per_s
        ranks = sorted({m.ranks for m in data.measured} | {16})
        extra = {"t_compute_s": tc,
                 "box_prediction": [{"ranks": r, "efficiency": sm.predict_efficiency(r, tc, hfit), "modelled": True}
                                    for r in ranks]}
        if os.path.exists(node_path):
            node = nm.load(model_inputs(data, fits), node_path, threads_path)
            nets = nm.networks(*nm.tcp_efficiency(shaped_links))
            nets = {k: nets[k] for k in PROJECTED_NETWORKS}
            extra.update(node_model=node, networks=nets,
                         projection=nm.project(node, nets, node_cores, exposed=exposed))
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
        out["box_prediction"] = a.box_prediction
    if a.node_model is not None:
        out.update(node_model=a.node_model.to_json(), networks={k: asdict(v) for k, v in a.networks.items()},
                   projection=[asdict(p) for p in a.projection])
    if a.prediction_from is not None:
        out["prediction_from"] = a.prediction_from
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
    if term:  # used only where no measurement answers (plan.updates_at, noise-model); contradicted batches left out
        for batch, frames in term["frames"].items():
            if batch not in term.get("contradicted", {}):
                out.append(sm.FramesToScore(int(batch), float(frames), f"noise scale along {model['source_point']}, "
                                            f"{model['projection_term']}", modelled=True))
    return out
