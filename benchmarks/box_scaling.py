"""Emulated weak scaling of the full trainer on the cluster in the box, beside the scaling model.

    sudo python -m benchmarks.box_scaling [--nodes 2,4] [--cpus-per-node 0.5] [--rate-gbit 1] [--seconds 30]
            [--warmup 15] [--out DIR] [-- TRAINER FLAGS]

For each node count N (benchmarks/box_cluster.py: N network-namespace nodes, each capped at --cpus-per-node
CPUs with a --rate-gbit link), two jobs of N ranks, one per node, launched with `mpirun --hostfile`:
* `exchange`: one run, gradients averaged over the nodes' links (`--dist mpi`);
* `control`: the same N processes on the same nodes, each its own single-rank run (`--dist none`), so what
  they lose is the box's, not the exchange's.
Each trains for --warmup + --seconds (`--max-minutes`); frames/s is taken from progress.csv rows inside the
last --seconds. Efficiency = the exchange run's frames/s over the control's (summed over its ranks).

The model (benchmarks/scaling_model.py, labelled modelled): efficiency = t_compute / (t_compute +
t_allreduce(N)), with t_compute the control's seconds per update (mean over its ranks) and the allreduce of the
model's gradient over the emulated link (box_cluster.emulated_link). Its error: (modelled - measured) / measured.
All of it is emulated: the nodes share this machine's cores and kernel.
Writes DIR/box_scaling.json and DIR/box_scaling.png (DIR: benchmarks/results/box_scaling).
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import signal
import sys
import tempfile
from typing import Any

from benchmarks import box_cluster, harness, scaling_model as sm

RESULTS = os.path.join(harness.ROOT, "benchmarks", "results", "box_scaling")
TRAINER = ["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "20",
           "--intra-op-threads", "1", "--inter-op-threads", "1", "--stats-interval-updates", "5",
           "--log-interval-s", "1", "--checkpoint-interval-min", "1000", "--lr-scaling", "none"]


def window_rate(progress_csv: str, t_from: float) -> dict[str, float] | None:
    """Frames/s and seconds per update between the first and last progress.csv rows at or after `t_from`."""
    with open(progress_csv) as fh:
        rows = [(float(r["time_s"]), int(r["frames"]), int(r["updates"])) for r in csv.DictReader(fh)]
    inside = [r for r in rows if r[0] >= t_from]
    if len(inside) < 2 or inside[-1][2] == inside[0][2]:
        return None
    dt = inside[-1][0] - inside[0][0]
    return {"frames_per_s": (inside[-1][1] - inside[0][1]) / dt, "s_per_update": dt / (inside[-1][2] - inside[0][2]),
            "window_s": dt}


def run_job(box: box_cluster.BoxCluster, work: str, name: str, flags: list[str], control: bool,
            timeout_s: float) -> tuple[int | None, str]:
    run = os.path.join(work, name)
    if control:  # each rank its own run directory, no exchange
        program = ["sh", "-c", f'exec "$@" --dist none --run-dir {run}/rank$OMPI_COMM_WORLD_RANK', "sh",
                   sys.executable, "-m", "ba3c.train"]
        job = box.start(flags, os.path.join(work, f"{name}.log"), program=program)
    else:
        job = box.start([*flags, "--dist", "mpi", "--run-dir", run], os.path.join(work, f"{name}.log"))
    return job.wait(timeout_s), job.output()


def measure_jobs(box: box_cluster.BoxCluster, work: str, point: dict[str, Any], nodes: int, flags: list[str],
                 args: argparse.Namespace) -> None:
    """The exchange run and the control on `box`, into `point`."""
    for name, control in (("exchange", False), ("control", True)):
        print(f"box_scaling: {nodes} nodes, {name} ...", flush=True)
        rc, out = run_job(box, work, name, flags, control, args.warmup + args.seconds + 300)
        if rc != 0:
            point[name] = {"error": f"exit {rc}: {out[-1500:]}"}
            print(point[name]["error"], flush=True)
            continue
        m = re.search(r"model=\S+ \(([\d,]+) params\)", out)
        point["params"] = int(m.group(1).replace(",", "")) if m else None
        dirs = ([os.path.join(work, name, f"rank{i}") for i in range(nodes)] if control
                else [os.path.join(work, name)])
        rates = [window_rate(os.path.join(d, "progress.csv"), args.warmup) for d in dirs]
        if any(r is None for r in rates):
            point[name] = {"error": "too few progress rows in the window"}
            continue
        point[name] = {"frames_per_s": sum(r["frames_per_s"] for r in rates),
                       "s_per_update": sum(r["s_per_update"] for r in rates) / len(rates),
                       "per_rank": rates}


def measure_point(nodes: int, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    flags = [*TRAINER, *extra, "--total-frames", "50000000", "--max-minutes", str((args.warmup + args.seconds) / 60)]
    point: dict[str, Any] = {"nodes": nodes, "cpus_per_node": args.cpus_per_node, "rate_bps": args.rate_gbit * 1e9}
    with box_cluster.BoxCluster(nodes, args.rate_gbit * 1e9, args.cpus_per_node) as box:
        point["cpu_control"] = None if box.cpu is None else f"cgroup v{box.cpu.version}"
        work = tempfile.mkdtemp(prefix=f"{box.topo.tag}-scaling-")
        try:
            measure_jobs(box, work, point, nodes, flags, args)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    ex, co = point.get("exchange", {}), point.get("control", {})
    if "frames_per_s" in ex and "frames_per_s" in co and point.get("params"):
        point["efficiency"] = ex["frames_per_s"] / co["frames_per_s"]
        t_c = co["s_per_update"]
        t_ex = sm.t_allreduce(nodes, sm.BYTES_PER_FLOAT * point["params"], box_cluster.emulated_link(point["rate_bps"]))
        point["modelled"] = {"efficiency": t_c / (t_c + t_ex), "t_compute_s": t_c, "t_allreduce_s": t_ex}
        point["model_error"] = sm.relative_error(point["modelled"]["efficiency"], point["efficiency"])
    return point


def report(points: list[dict[str, Any]]) -> None:
    print(f"\n{'nodes':>5} {'exchange fps':>12} {'control fps':>11} {'efficiency':>10} {'modelled':>8} {'error':>7} "
          f"{'ms/update exch':>14} {'ms/update ctrl':>14}   (emulated: namespace nodes on one machine)")
    for p in points:
        ex, co = p.get("exchange", {}), p.get("control", {})
        if "efficiency" not in p:
            print(f"{p['nodes']:>5}  failed: {ex.get('error') or co.get('error')}")
            continue
        print(f"{p['nodes']:>5} {ex['frames_per_s']:>12,.0f} {co['frames_per_s']:>11,.0f} {p['efficiency']:>10.3f} "
              f"{p['modelled']['efficiency']:>8.3f} {p['model_error']:>+7.1%} {1e3 * ex['s_per_update']:>14.1f} "
              f"{1e3 * co['s_per_update']:>14.1f}")


def plot(points: list[dict[str, Any]], path: str, title: str) -> None:
    plt = harness.pyplot()
    ok = [p for p in points if "efficiency" in p]
    fig, ax = plt.subplots(figsize=(6, 4))
    ns = [p["nodes"] for p in ok]
    ax.plot(ns, [p["efficiency"] for p in ok], "o-", label="measured (emulated): exchange / no-exchange control")
    ax.plot(ns, [p["modelled"]["efficiency"] for p in ok], "s--", label="modelled: t_c / (t_c + t_allreduce)")
    ax.set_xlabel("emulated nodes (one rank each)")
    ax.set_ylabel("weak-scaling efficiency")
    ax.set_xticks(ns)
    ax.set_ylim(0, 1.2)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=60)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", default="2,4", help="comma list of emulated node counts")
    p.add_argument("--cpus-per-node", type=float, default=0.5, help="each node's CPU cap (a cgroup quota)")
    p.add_argument("--rate-gbit", type=float, default=1.0, help="each node's link rate (tc tbf), Gbit/s")
    p.add_argument("--seconds", type=float, default=30.0, help="the measured window")
    p.add_argument("--warmup", type=float, default=15.0, help="training seconds before the window")
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    why = box_cluster.preflight()
    if why:
        print(f"box_scaling: {why}", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGHUP):  # unwind like Ctrl-C: the cluster's cleanup runs
        signal.signal(sig, lambda n, _f: sys.exit(128 + n))
    os.makedirs(args.out, exist_ok=True)
    data: dict[str, Any] = {
        "machine": harness.machine(), "date": harness.now(), "emulated": True,
        "modelled_by": "benchmarks/scaling_model.py sync update: t_compute + t_allreduce over the emulated link",
        "config": {k: v for k, v in vars(args).items() if k != "out"}, "trainer": [*TRAINER, *extra], "points": []}
    path = os.path.join(args.out, "box_scaling.json")
    for n in (int(x) for x in args.nodes.split(",")):
        data["points"].append(measure_point(n, args, extra))
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1)
    report(data["points"])
    try:
        plot(data["points"], os.path.join(args.out, "box_scaling.png"),
             f"Emulated weak scaling, {args.cpus_per_node:g} CPU and {args.rate_gbit:g} Gbit/s per node, "
             f"{data['machine']['cores']} cores, {data['date']}")
    except ImportError as e:
        print(f"box_scaling: no plot ({e})")
    print(f"wrote {path}")
    return 0 if all("efficiency" in p for p in data["points"]) else 1


if __name__ == "__main__":
    sys.exit(main())
