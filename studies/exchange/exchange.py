"""The gradient exchange on two ranks, one core each: which way to exchange, which knobs, what the trainer gains.

    python -m studies.exchange [--quick] [--parts paths,knobs,timeline,trainer] [--rounds 3] [--out DIR]

* paths: studies/exchange/exchange_step.py under `mpirun -np 2` (one core, one TensorFlow compute thread
  per rank; Nature CNN, batch 32 per rank), the variants of one backend per launch, alternated
  in rounds: none (the control: the same two processes, no exchange), Horovod grouped and
  per-tensor, mpi4py flat buffer and per-tensor, each in float32 and fp16; with 1 and with 2
  TensorFlow inter-op threads (the pool that launches the per-tensor ops).
* knobs: the same step (none, grouped, per-tensor) once per setting of HOROVOD_CYCLE_TIME,
  HOROVOD_FUSION_THRESHOLD, HOROVOD_CACHE_CAPACITY and Open MPI's yield_when_idle and allreduce
  algorithm; each setting against its own launch's control.
* timeline: a Horovod timeline (HOROVOD_TIMELINE) of a few grouped and per-tensor updates; the
  excerpt says, per gradient, when rank 0 had it ready and when its allreduce ran.
* trainer: the full 2-rank Pong trainer (benchmarks.scaling's core layout and settings) with each
  exchange, against the no-exchange control (scaling's `independent` layout: the same two
  processes as separate single-rank runs), alternated, --rounds times.

Every ratio compares runs made in one invocation, alternating; medians with their range over
rounds. Writes exchange.json (per part, the raw per-round numbers and their summary, plus
`projection_input`: the measured exposed share of the exchange) and exchange.png.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from measure import harness

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")  # this study's committed results

# Two launches per setting: Horovod's background thread shares MPI with mpi4py's calls, so the mpi4py
# variants run where Horovod is not initialised (as `--dist mpi` does); each launch has its own control.
HOROVOD_VARIANTS = "none,grouped,per-tensor,grouped-fp16,per-tensor-fp16"
MPI_VARIANTS = "none,mpi,mpi-per-tensor,mpi-fp16,mpi-per-tensor-fp16"
PATH_VARIANTS = ",".join(dict.fromkeys((HOROVOD_VARIANTS + "," + MPI_VARIANTS).split(",")))
KNOB_VARIANTS = "none,grouped,per-tensor"


@dataclass(frozen=True)
class Knob:
    name: str
    env: dict[str, str]
    what: str  # what the setting does to an update


KNOBS = [
    Knob("default", {}, "Horovod 0.28 defaults: cycle 1 ms, fusion buffer 128 MB, response cache on; "
                        "Open MPI yield_when_idle 1 (the Makefile's), its own allreduce choice"),
    Knob("cycle 0.2 ms", {"HOROVOD_CYCLE_TIME": "0.2"},
         "Horovod's background thread looks for ready tensors every 0.2 ms"),
    Knob("cycle 5 ms", {"HOROVOD_CYCLE_TIME": "5"}, "every 5 ms: fewer wake-ups, up to 5 ms later start"),
    Knob("fusion off", {"HOROVOD_FUSION_THRESHOLD": "0"},
         "one MPI allreduce per tensor, no copies into a fusion buffer"),
    Knob("fusion 1 MB", {"HOROVOD_FUSION_THRESHOLD": str(1 << 20)},
         "small gradients ready in one cycle are fused; the 6.4 MB dense one goes alone"),
    Knob("response cache off", {"HOROVOD_CACHE_CAPACITY": "0"},
         "every tensor negotiated through rank 0 each update instead of a cached bit-vector allreduce"),
    Knob("busy polling", {"OMPI_MCA_mpi_yield_when_idle": "0"}, "a waiting rank spins instead of yielding its core"),
    Knob("ring allreduce",
         {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_allreduce_algorithm": "4"},
         "Open MPI's tuned allreduce forced to the ring algorithm"),
    Knob("recursive doubling",
         {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1", "OMPI_MCA_coll_tuned_allreduce_algorithm": "3"},
         "forced to recursive doubling"),
]


# ---------------------------------------------------------------- the learner-step launches

def run_steps(variants: str, rounds: int, steps: int, inter_op: int, env: dict[str, str],
              timeout_s: float = 1800) -> dict[str, Any]:
    """One `mpirun -np 2` of studies.exchange.exchange_step; its JSON, or {"error": ...}."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    pre, _ = harness.mpirun_prefix(2, 1, "core")
    export = [a for k in env for a in ("-x", k)]  # local ranks inherit the environment; -x also reaches remote ones
    cmd = pre + export + [sys.executable, "-m", "studies.exchange.exchange_step", path, "--variants", variants,
                          "--rounds", str(rounds), "--steps", str(steps), "--inter-op", str(inter_op)]
    child = {**harness.child_env(), **env}
    load = os.getloadavg()[0]
    p = subprocess.run(cmd, cwd=harness.ROOT, env=child, capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        return {"error": (p.stdout + p.stderr)[-2000:], "env": env, "inter_op": inter_op}
    with open(path) as fh:
        out = json.load(fh)
    os.unlink(path)
    out["load_avg_1min_at_start"] = load
    return out


def spread(values: list[float]) -> dict[str, Any]:
    """Median with its range over rounds (what every table prints)."""
    v = [x for x in values if x is not None and np.isfinite(x)]
    if not v:
        return {"n": 0}
    return {"median": float(np.median(v)), "min": float(min(v)), "max": float(max(v)), "n": len(v)}


def summarize_steps(launches: list[dict[str, Any]]) -> dict[str, Any]:
    """Per variant, over every round of the given launches: update time against the control's in the
    same round (none / variant: 1 = no cost), and the exposed exchange (ms)."""
    ratio: dict[str, list[float]] = collections.defaultdict(list)
    step: dict[str, list[float]] = collections.defaultdict(list)
    exposed: dict[str, list[float]] = collections.defaultdict(list)
    exposed_min: dict[str, list[float]] = collections.defaultdict(list)
    for launch in launches:
        v = launch.get("variants", {})
        if "none" not in v:
            continue
        for k, rounds in v.items():
            for i, r in enumerate(rounds):
                ms = float(np.mean(r["step_ms"]))
                step[k].append(ms)
                ratio[k].append(float(np.mean(v["none"][i]["step_ms"])) / ms)
                exposed[k].append(float(np.max(r["exposed_ms"])))
                exposed_min[k].append(r["exposed_min_ms"])
    return {k: {"vs_control": spread(ratio[k]), "step_ms": spread(step[k]),
                "exposed_ms_slowest_wait": spread(exposed[k]), "exposed_ms": spread(exposed_min[k])}
            for k in step}


# ---------------------------------------------------------------- the timeline

def read_timeline(path: str) -> list[dict[str, Any]]:
    """Horovod's Chrome-trace JSON (rank 0 writes it; an unfinished file lacks its closing bracket)."""
    with open(path) as fh:
        text = fh.read().rstrip().rstrip(",")
    return json.loads(text if text.endswith("]") else text + "]")


def timeline_excerpt(events: list[dict[str, Any]], last_steps: int = 4) -> dict[str, Any]:
    """Per op kind (grouped, per-tensor) and for its last `last_steps` updates: for each gradient, when
    rank 0 had it ready (NEGOTIATE begins), when both had (NEGOTIATE ends), and its ALLREDUCE span, in
    ms from the update's first ready gradient; and whether the dense layer's allreduce began before
    rank 0's last gradient was ready (i.e. during backprop)."""
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name" and "name" in e.get("args", {})}
    open_spans: dict[int, list[tuple[str, float]]] = collections.defaultdict(list)
    spans: dict[tuple[str, str], list[tuple[float, float]]] = collections.defaultdict(list)
    for e in sorted((e for e in events if e.get("ph") in ("B", "E") and e.get("pid") in names), key=lambda e: e["ts"]):
        if e["ph"] == "B":
            open_spans[e["pid"]].append((e["name"], e["ts"]))
        elif open_spans[e["pid"]]:
            kind, t0 = open_spans[e["pid"]].pop()
            spans[names[e["pid"]], kind].append((t0, e["ts"]))
    out: dict[str, Any] = {}
    for kind, prefix in (("grouped", "HorovodGroupedAllreduce"), ("per-tensor", "HorovodAllreduce")):
        tensors = sorted({t for t, k in spans if t.startswith(prefix + "_") and k.startswith("NEGOTIATE")})
        if not tensors:
            continue
        n = min(len(spans[t, _negotiate(spans, t)]) for t in tensors)
        updates = []
        for i in range(max(0, n - last_steps), n):
            rows = []
            for t in tensors:
                neg = spans[t, _negotiate(spans, t)][i]
                ar = spans[t, "ALLREDUCE"][i] if i < len(spans[t, "ALLREDUCE"]) else (float("nan"),) * 2
                rows.append({"tensor": _short(t, prefix), "rank0_ready": neg[0], "both_ready": neg[1],
                             "allreduce_start": ar[0], "allreduce_end": ar[1]})
            t0 = min(r["rank0_ready"] for r in rows)
            for r in rows:
                for k in ("rank0_ready", "both_ready", "allreduce_start", "allreduce_end"):
                    r[k] = (r[k] - t0) / 1e3
            rows.sort(key=lambda r: r["rank0_ready"])
            backprop_end = max(r["rank0_ready"] for r in rows)
            dense = [r for r in rows if "dense" in r["tensor"] and "MatMul" in r["tensor"]]
            upd = {"tensors": rows, "rank0_last_gradient_ready_ms": backprop_end,
                   "last_allreduce_end_ms": max(r["allreduce_end"] for r in rows)}
            if dense:
                upd["dense_kernel_allreduce_start_ms"] = dense[0]["allreduce_start"]
                upd["dense_allreduce_began_during_backprop"] = bool(dense[0]["allreduce_start"] < backprop_end)
            updates.append(upd)
        out[kind] = updates
    return out


def _negotiate(spans: dict[tuple[str, str], Any], tensor: str) -> str:
    return next(k for t, k in spans if t == tensor and k.startswith("NEGOTIATE"))


def _short(name: str, prefix: str) -> str:
    """A gradient's op name without Horovod's prefix; a grouped op's members are named after the
    group's first and last ops plus `_KofN`, so only the member number says anything."""
    short = name[len(prefix) + 1:].replace("gradient_tape_", "")
    return "member " + short.rsplit("_", 1)[-1] if prefix == "HorovodGroupedAllreduce" else short


def run_timeline(steps: int) -> dict[str, Any]:
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    launch = run_steps("grouped,per-tensor", 1, steps, 2, {"HOROVOD_TIMELINE": path})
    if "error" in launch:
        return launch
    excerpt = timeline_excerpt(read_timeline(path))
    os.unlink(path)
    return {"launch": launch, "excerpt": excerpt}


# ---------------------------------------------------------------- the full trainer

TRAINER_VARIANTS = {  # name -> extra trainer flags (every run, the control included, gets --inter-op-threads 2)
    "grouped": ("--allreduce", "grouped"),
    "per-tensor": ("--allreduce", "per-tensor"),
    "grouped-fp16": ("--allreduce", "grouped", "--compression", "fp16"),
    "per-tensor-fp16": ("--allreduce", "per-tensor", "--compression", "fp16"),
}


def run_trainer(rounds: int, seconds: float, warmup: float, variants: list[str]) -> list[dict[str, Any]]:
    """Rounds of: control, variant 1, control, variant 2, ..., control (each variant between two controls,
    so a drift in the machine's speed during a round hits both sides of its ratio); frames/s of all
    ranks and rank 0's stage split per run, in the order run (`seq`)."""
    from benchmarks.scaling import RunSpec, Settings, run_point

    out: list[dict[str, Any]] = []
    for rnd in range(rounds):
        order = [name for v in variants for name in ("control", v)] + ["control"]
        for name in order:
            extra = ("--inter-op-threads", "2", *TRAINER_VARIANTS.get(name, ()))
            s = Settings("pong", 16, 8, 32, "auto", extra, seconds, warmup, 600.0)
            spec = RunSpec(2, 1, "independent" if name == "control" else "core", "sync")
            print(f"exchange: trainer round {rnd + 1}/{rounds}, {name} ...", flush=True)
            load = os.getloadavg()[0]
            m = run_point(spec, s)
            out.append({"seq": len(out), "round": rnd, "variant": name, "load_avg_1min_at_start": load, **m.to_json()})
            print(f"    frames/s {m.frames_per_s or float('nan'):.0f}"
                  + (f"  error: {m.error[:300]}" if m.error else ""),
                  flush=True)
    return out


def summarize_trainer(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per variant: frames/s over the mean of the controls run just before and just after it (the one
    there is, at an end), median and range over rounds; rank 0's ms per update per stage."""
    seq = sorted(runs, key=lambda r: r.get("seq", 0))
    ratios: dict[str, list[float]] = collections.defaultdict(list)
    fps: dict[str, list[float]] = collections.defaultdict(list)
    split: dict[str, dict[str, list[float]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    for i, r in enumerate(seq):
        if not r.get("frames_per_s"):
            continue
        name = r["variant"]
        fps[name].append(r["frames_per_s"])
        for k, ms in r.get("ms_per_update_rank0", {}).items():
            split[name][k].append(ms)
        if name == "control":
            continue
        controls = [c["frames_per_s"] for c in (seq[i - 1] if i > 0 else None, seq[i + 1] if i + 1 < len(seq) else None)
                    if c is not None and c["variant"] == "control" and c.get("frames_per_s")]
        if controls:
            ratios[name].append(r["frames_per_s"] / float(np.mean(controls)))
    return {name: {"vs_control": spread(ratios[name]) if name != "control" else spread([1.0] * len(fps[name])),
                   "frames_per_s": spread(fps[name]),
                   "ms_per_update_rank0": {k: spread(v) for k, v in split[name].items()}} for name in fps}


# ---------------------------------------------------------------- analysis, plot, report

# The Nature CNN's gradient (Pong's 6 actions) by what backprop produces before the convolutions'
# gradients (heads and the 3136x512 dense layer) and after (the three convolutions): float32 counts.
NATURE_FLOATS_BEFORE_CONVS = (512 * 6 + 6) + (512 + 1) + (3136 * 512 + 512)
NATURE_FLOATS_CONVS = (8 * 8 * 4 * 32 + 32) + (4 * 4 * 32 * 64 + 64) + (3 * 3 * 64 * 64 + 64)


def projection_input(res: dict[str, Any]) -> dict[str, Any]:
    """What the scaling projection needs from here: how much of the exchange an update still waits for,
    and the parts a model of it needs (bytes that can overlap, the backprop they can overlap with)."""
    s = res.get("paths_summary", {}).get("2", {})
    g, p = s.get("grouped", {}).get("exposed_ms", {}), s.get("per-tensor", {}).get("exposed_ms", {})
    if not g.get("n") or not p.get("n") or g["median"] <= 0:
        return {}
    out: dict[str, Any] = {
        "exposed_ms_grouped": g["median"], "exposed_ms_per_tensor": p["median"],
        "exposed_fraction_per_tensor": p["median"] / g["median"],
        "step_ms_no_exchange": s.get("none", {}).get("step_ms", {}).get("median"),
        "gradient_floats": NATURE_FLOATS_BEFORE_CONVS + NATURE_FLOATS_CONVS,
        "overlappable_share_of_bytes": NATURE_FLOATS_BEFORE_CONVS / (NATURE_FLOATS_BEFORE_CONVS + NATURE_FLOATS_CONVS)}
    # Each Horovod variant's exposed exchange over float32 grouped's, as benchmarks/scaling.py --exposed takes it
    # (a share above 1, an exchange that exposes more than grouped, is passed as 1: no better than sync)
    fractions = {v: s[v]["exposed_ms"]["median"] / g["median"]
                 for v in ("per-tensor", "grouped-fp16", "per-tensor-fp16")
                 if s.get(v, {}).get("exposed_ms", {}).get("n")}
    out["exposed_fraction_vs_grouped"] = fractions
    out["scaling_exposed_arg"] = ",".join(f"{v}={min(f, 1.0):.2f}" for v, f in fractions.items())
    windows = [u["rank0_last_gradient_ready_ms"] - next(t["rank0_ready"] for t in u["tensors"]
                                                         if "dense" in t["tensor"] and "MatMul" in t["tensor"])
               for u in res.get("timeline", {}).get("excerpt", {}).get("per-tensor", [])]
    if windows:
        out["backprop_after_dense_gradient_ms"] = spread(windows)
    out["note"] = (
        "2 ranks on one 2-core box, one core each, 2 TensorFlow inter-op threads, Nature CNN, batch 32 per rank. "
        "exposed = the later rank's wait for averaged gradients after its own last local gradient (median over "
        "updates and rounds); grouped exposes the whole allreduce, so exposed_fraction_per_tensor is the share of "
        "the exchange an update still waits for with per-tensor ops, here, where the exchange's copies and sums "
        "share the rank's only core with backprop. A model of it: t_update = t_compute + max(t_allreduce(tail "
        "bytes), t_allreduce(all bytes) - backprop_after_dense_gradient), tail = the convolutions' "
        "(1 - overlappable_share_of_bytes); backprop_after_dense_gradient_ms is from the Horovod timeline (rank 0, "
        "quantised by the 1 ms cycle) on one core and shrinks with a node's cores like the compute does.")
    return out


def reanalyze(res: dict[str, Any]) -> None:
    """Everything derived from the raw launches and runs, again (after a change to the analysis)."""
    if "paths" in res:
        res["paths_summary"] = {k: summarize_steps(v) for k, v in res["paths"].items()}
    for k in res.get("knobs", []):
        k["summary"] = summarize_steps([k["launch"]])
    if "trainer" in res:
        res["trainer_summary"] = summarize_trainer(res["trainer"])
    res["projection_input"] = projection_input(res)


def plot(res: dict[str, Any], path: str) -> None:
    plt = harness.pyplot()
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.8))
    ax = axes[0]
    for j, (io, colour) in enumerate((("1", "tab:grey"), ("2", "tab:blue"))):
        s = res.get("paths_summary", {}).get(io, {})
        names = [n for n in PATH_VARIANTS.split(",") if n in s]
        x = np.arange(len(names)) + (j - 0.5) * 0.38
        _bars(ax, x, [s[n]["vs_control"] for n in names], colour, f"{io} inter-op thread(s)")
        ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.set_title("learner step, 2 ranks: control / variant time", fontsize=9)
    ax.set_ylabel("update rate vs no exchange (1 = free)")
    ax = axes[1]
    s = res.get("paths_summary", {}).get("2", {})
    names = [n for n in PATH_VARIANTS.split(",") if n in s and n != "none"]
    _bars(ax, np.arange(len(names)), [s[n]["exposed_ms"] for n in names], "tab:orange", "exposed exchange")
    ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_title("exposed exchange per update (later rank), 2 inter-op threads", fontsize=9)
    ax.set_ylabel("ms")
    ax = axes[2]
    knobs = res.get("knobs", [])
    for j, (v, colour) in enumerate((("grouped", "tab:grey"), ("per-tensor", "tab:blue"))):
        x = np.arange(len(knobs)) + (j - 0.5) * 0.38
        _bars(ax, x, [k.get("summary", {}).get(v, {}).get("exposed_ms", {"n": 0}) for k in knobs], colour, v)
    ax.set_xticks(np.arange(len(knobs)), [k["name"] for k in knobs], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("ms")
    ax.set_title("knobs (learner step, 2 ranks): exposed exchange per update", fontsize=9)
    ax = axes[3]
    t = res.get("trainer_summary", {})
    names = [n for n in TRAINER_VARIANTS if n in t]
    _bars(ax, np.arange(len(names)), [t[n]["vs_control"] for n in names], "tab:green", "trainer")
    ax.set_xticks(np.arange(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(0.95, color="r", lw=0.8, ls="--", label="target 0.95")
    ax.set_title("full trainer, 2 ranks x 1 core: frames/s vs no-exchange control", fontsize=9)
    for a in axes:
        a.grid(alpha=0.3, axis="y")
        a.legend(fontsize=7)
    fig.suptitle(f"ba3c gradient exchange on {res['machine']['cores']} cores ({res['machine']['cpu']}); "
                 f"bars: median over rounds, whiskers: range; {_load_line(res)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def _bars(ax, x, stats: list[dict[str, Any]], colour: str, label: str) -> None:
    med = np.array([s.get("median", np.nan) for s in stats])
    lo = med - np.array([s.get("min", np.nan) for s in stats])
    hi = np.array([s.get("max", np.nan) for s in stats]) - med
    ax.bar(x, med, width=0.38, color=colour, label=label, yerr=[lo, hi], capsize=3)


def _fmt(s: dict[str, Any], f: str = ".2f") -> str:
    return f"{s['median']:{f}} ({s['min']:{f}}-{s['max']:{f}})" if s.get("n") else "-"


def _load_line(res: dict[str, Any]) -> str:
    """The 1-minute load average when each part began (this benchmark's own processes included)."""
    loads = res.get("load_avg_1min_at_part_start", {})
    return "load average at start: " + (", ".join(f"{k} {v:.1f}" for k, v in loads.items()) or "not recorded")


def report(res: dict[str, Any]) -> None:
    print(f"\n{_load_line(res)} (the machine's {res.get('machine', {}).get('cores', '?')} cores)")
    for io, s in sorted(res.get("paths_summary", {}).items()):
        print(f"\nlearner step, 2 ranks, {io} inter-op thread(s): median (range) over rounds")
        print(f"{'variant':>16} {'vs control':>20} {'ms/update':>20} {'exposed ms':>20}")
        for n, v in s.items():
            print(f"{n:>16} {_fmt(v['vs_control']):>20} {_fmt(v['step_ms'], '.1f'):>20} "
                  f"{_fmt(v['exposed_ms'], '.1f'):>20}")
    if res.get("knobs"):
        print(f"\nknobs (learner step, 2 ranks): {'setting':>20} {'grouped vs control':>20} {'exposed ms':>18} "
              f"{'per-tensor vs control':>22} {'exposed ms':>18}")
        for k in res["knobs"]:
            s = k.get("summary", {})
            print(f"{'':>30} {k['name']:>20} " + " ".join(
                f"{_fmt(s.get(v, {}).get('vs_control', {})):>{w}} {_fmt(s.get(v, {}).get('exposed_ms', {}), '.1f'):>18}"
                for v, w in (("grouped", 20), ("per-tensor", 22))))
    for kind, updates in res.get("timeline", {}).get("excerpt", {}).items():
        for u in updates:
            print(f"\ntimeline {kind}: rank 0's last gradient ready at {u['rank0_last_gradient_ready_ms']:.1f} ms, "
                  f"dense allreduce began at {u.get('dense_kernel_allreduce_start_ms', float('nan')):.1f} ms, "
                  f"last allreduce ended at {u['last_allreduce_end_ms']:.1f} ms")
    if res.get("trainer_summary"):
        print(f"\ntrainer, 2 ranks x 1 core: {'variant':>16} {'frames/s vs control':>22} {'exposed allreduce ms':>22}")
        for n, v in res["trainer_summary"].items():
            print(f"{'':>27}{n:>16} {_fmt(v['vs_control']):>22} "
                  f"{_fmt(v['ms_per_update_rank0'].get('allreduce', {}), '.1f'):>22}")
    if res.get("projection_input"):
        p = res["projection_input"]
        print(f"\nprojection input: exposed exchange grouped {p['exposed_ms_grouped']:.1f} ms, per-tensor "
              f"{p['exposed_ms_per_tensor']:.1f} ms: fraction {p['exposed_fraction_per_tensor']:.2f}")
        if p.get("scaling_exposed_arg"):
            print("for the projection: python -m benchmarks.scaling --analyze-only "
                  f"benchmarks/results/scaling/scaling.json "
                  f"--exposed {p['scaling_exposed_arg']}")


@dataclass
class Plan:
    parts: list[str]
    rounds: int
    steps: int
    launches: int
    trainer_rounds: int
    trainer_seconds: float
    trainer_warmup: float
    knobs: list[Knob] = field(default_factory=lambda: list(KNOBS))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="a smoke test: paths with 3 variants at 2 inter-op threads, 1 short round, the timeline")
    p.add_argument("--parts", default="trainer,paths,timeline,knobs", help="what to measure, in this order")
    p.add_argument("--rounds", type=int, default=9,
                   help="rounds per launch (learner step): every variant once per round")
    p.add_argument("--steps", type=int, default=10,
                   help="updates per variant per round (learner step); short blocks, so the machine's load drifts "
                        "little between a variant and its control")
    p.add_argument("--trainer-rounds", type=int, default=3,
                   help="trainer rounds: the control and every variant once each")
    p.add_argument("--trainer-variants", default=",".join(TRAINER_VARIANTS),
                   help="the exchanges the trainer part runs, each between two controls (comma list of "
                        + ", ".join(TRAINER_VARIANTS) + ")")
    p.add_argument("--launches", type=int, default=1,
                   help="launches per inter-op setting in the paths part, alternated")
    p.add_argument("--seconds", type=float, default=30.0, help="trainer measurement window after warm-up")
    p.add_argument("--warmup", type=float, default=10.0, help="trainer warm-up seconds")
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--name", default="exchange", help="output file stem")
    p.add_argument("--analyze-only", default="",
                   help="re-derive summaries, projection input and plot from saved JSON (a comma list: the later "
                        "files' parts replace the earlier's, e.g. a trainer part measured again)")
    args = p.parse_args(argv)
    harness.exit_on_sigterm()
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, f"{args.name}.json")
    trainer_variants = [v for v in args.trainer_variants.split(",") if v]
    unknown = [v for v in trainer_variants if v not in TRAINER_VARIANTS]
    if unknown or not trainer_variants:
        p.error(f"--trainer-variants: unknown {unknown or 'empty list'}; choose from {', '.join(TRAINER_VARIANTS)}")
    if args.analyze_only:
        res: dict[str, Any] = {}
        for path in args.analyze_only.split(","):  # several: each later file's parts replace the earlier's
            with open(path) as fh:
                more = json.load(fh)
            if not res:
                res = more
            else:
                for part in more.get("parts", []):
                    if part in more:
                        res[part] = more[part]
            for part in more.get("parts", []):
                res.setdefault("measured_in", {})[part] = {"file": os.path.basename(path), "date": more.get("date"),
                                                           "machine": more.get("machine")}
        reanalyze(res)
        with open(json_path, "w") as fh:
            json.dump(res, fh, indent=1)
        finish(res, args.out, args.name)
        print(f"wrote {json_path}")
        return 0
    if args.quick:
        plan = Plan(["paths", "timeline"], 1, 4, 1, 0, args.seconds, args.warmup)
        variants = ["none,grouped,per-tensor", "none,mpi,mpi-per-tensor"]
    else:
        plan = Plan(args.parts.split(","), args.rounds, args.steps, args.launches, args.trainer_rounds, args.seconds,
                    args.warmup)
        variants = [HOROVOD_VARIANTS, MPI_VARIANTS]
    res: dict[str, Any] = {"machine": harness.machine(), "date": harness.now(), "parts": plan.parts,
                           "rounds": plan.rounds, "steps": plan.steps}

    def save() -> None:
        with open(json_path, "w") as fh:
            json.dump(res, fh, indent=1)

    for part in plan.parts:  # in the order given: the one that matters most first, while the machine is quiet
        print(f"exchange: {part} (load average {os.getloadavg()[0]:.1f}) ...", flush=True)
        res.setdefault("load_avg_1min_at_part_start", {})[part] = os.getloadavg()[0]
        if part == "paths":
            # the quick smoke run measures 2 inter-op threads only (the count the projection reads)
            ios = ("2",) if args.quick else ("1", "2")
            launches: dict[str, list[dict[str, Any]]] = {io: [] for io in ios}
            for i in range(plan.launches):
                for io in ios if i % 2 == 0 else ios[::-1]:
                    for group in variants:
                        print(f"exchange: paths, launch {i + 1}/{plan.launches}, {io} inter-op thread(s), {group} ...",
                              flush=True)
                        launches[io].append(run_steps(group, plan.rounds, plan.steps, int(io), {}))
                        res["paths"] = launches
                        res["paths_summary"] = {k: summarize_steps(v) for k, v in launches.items()}
                        save()
        elif part == "knobs":
            res["knobs"] = []
            for k in plan.knobs:
                print(f"exchange: knob '{k.name}' ...", flush=True)
                launch = run_steps(KNOB_VARIANTS, plan.rounds, plan.steps, 2, k.env)
                res["knobs"].append({"name": k.name, "env": k.env, "what": k.what, "launch": launch,
                                     "summary": summarize_steps([launch])})
                save()
        elif part == "timeline":
            res["timeline"] = run_timeline(max(plan.steps, 4))
            save()
        elif part == "trainer":
            res["trainer"] = run_trainer(plan.trainer_rounds, plan.trainer_seconds, plan.trainer_warmup,
                                         trainer_variants)
            res["trainer_summary"] = summarize_trainer(res["trainer"])
            save()
        else:
            raise SystemExit(f"exchange: unknown part '{part}' (paths, knobs, timeline, trainer)")
    res["machine_after"] = harness.machine()
    res["projection_input"] = projection_input(res)
    save()
    finish(res, args.out, args.name)
    print(f"wrote {json_path}")
    return 0


def finish(res: dict[str, Any], out: str, name: str) -> None:
    try:
        plot(res, os.path.join(out, f"{name}.png"))
    except ImportError as e:
        print(f"exchange: no plot ({e})")
    report(res)


if __name__ == "__main__":
    sys.exit(main())
