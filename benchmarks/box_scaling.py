"""Emulated weak scaling of the full trainer on the cluster in the box, beside the scaling model.

    sudo python -m benchmarks.box_scaling [--nodes 2,4] [--cpus-per-node 0.5[,...]] [--rate-gbit 1] [--seconds 30]
            [--warmup 15] [--repeats 1] [--straggler-at 4] [--out DIR] [-- TRAINER FLAGS]

For each node count N (benchmarks/box_cluster.py: N network-namespace nodes, each capped at --cpus-per-node
CPUs with a --rate-gbit link), two jobs of N ranks, one per node, launched with `mpirun --hostfile`:
* `exchange`: one run, gradients averaged over the nodes' links (`--dist mpi`);
* `control`: the same N processes on the same nodes, each its own single-rank run (`--dist none`), so what
  they lose is the box's, not the exchange's.
At the node counts in --straggler-at, the same two again with the last node at half its CPU share
(`straggler_exchange`, `straggler_control`).
With --repeats K each runs K times, in the order exchange, control, control, exchange, exchange, ..., and each
job's repeats are pooled: the box's load changes from minute to minute, and both then see it alike.
Each trains for --warmup + --seconds (`--max-minutes`); frames/s is taken from progress.csv rows inside the last
--seconds, and every rank records when each update ends (benchmarks/update_times.py), which gives its
per-update times over the last --seconds. Efficiency = the exchange run's frames/s over the control's (summed
over its ranks).

The model (benchmarks/scaling_model.py, labelled modelled): a synchronous update on N ranks takes
E[max over the N ranks of one per-update time] + t_allreduce(N) (scaling_model.sync_update_s): the expected
largest of N draws, one from each control rank's measured per-update times (each rank waits for the slowest),
plus the allreduce of the model's gradient over the emulated link (box_cluster.emulated_link). The control ran
on the same nodes with the same CPU caps, so each node's CPU share is in its times. Modelled efficiency =
(N / that update time) / (sum over the control's ranks of 1 / their mean update time). Its error:
(modelled - measured) / measured; the model without the waiting term (the mean rank's time + t_allreduce) is
kept beside it. The straggler: measured update time with the last node slowed, beside the same model with that
node's control times doubled (nominal) and with the slowed control's measured times.
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

import numpy as np

from benchmarks import box_cluster, scaling_model as sm
from measure import harness

RESULTS = os.path.join(harness.ROOT, "benchmarks", "results", "box_scaling")
STATS_INTERVAL = 5  # --stats-interval-updates: a sync point (two small collectives) every this many updates
TRAINER = ["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "20",
           "--intra-op-threads", "1", "--inter-op-threads", "1", "--stats-interval-updates", str(STATS_INTERVAL),
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


def update_intervals(times_npy: str, seconds: float) -> list[float]:
    """Per-update seconds over the last `seconds` of a rank's run: differences between the ends of its updates
    (benchmarks/update_times.py) inside that window."""
    ends = np.load(times_npy)
    ends = ends[ends >= ends[-1] - seconds] if len(ends) else ends
    return np.diff(ends).tolist()


def time_summary(intervals: list[float]) -> dict[str, float]:
    """Mean and quantiles of per-update seconds, in ms."""
    a = 1e3 * np.asarray(intervals)
    return {"updates": len(a), "mean_ms": float(a.mean()), "median_ms": float(np.median(a)),
            "p90_ms": float(np.quantile(a, 0.9)), "p99_ms": float(np.quantile(a, 0.99)), "max_ms": float(a.max())}


def run_job(box: box_cluster.BoxCluster, work: str, name: str, flags: list[str], control: bool,
            timeout_s: float) -> tuple[int | None, str]:
    """One job of every node's rank, each recording its update times into WORK/NAME-times/rank<R>.npy."""
    run, times = os.path.join(work, name), os.path.join(work, f"{name}-times")
    os.makedirs(times, exist_ok=True)
    rank = "$OMPI_COMM_WORLD_RANK"
    # control: each rank its own run directory, no exchange
    tail = f" --dist none --run-dir {run}/rank{rank}" if control else f" --dist mpi --run-dir {run}"
    program = ["sh", "-c", f'py="$1"; shift; exec "$py" -m benchmarks.update_times {times}/rank{rank}.npy "$@"{tail}',
               "sh", sys.executable]
    job = box.start(flags, os.path.join(work, f"{name}.log"), program=program)
    return job.wait(timeout_s), job.output()


def measure_jobs(box: box_cluster.BoxCluster, work: str, point: dict[str, Any], nodes: int, flags: list[str],
                 args: argparse.Namespace, jobs: tuple[tuple[str, bool], ...]) -> dict[str, list[list[float]]]:
    """The named jobs (name, is the control) on `box`, into `point`; returns each job's per-rank per-update
    seconds (the exchange run's from each rank too: they step together)."""
    intervals: dict[str, list[list[float]]] = {}
    for name, control in jobs:
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
        per_rank = [update_intervals(os.path.join(work, f"{name}-times", f"rank{i}.npy"), args.seconds)
                    for i in range(nodes)]
        if any(r is None for r in rates) or any(len(t) < 2 for t in per_rank):
            point[name] = {"error": "too few progress rows or updates in the window"}
            continue
        intervals[name] = per_rank
        point[name] = {"frames_per_s": sum(r["frames_per_s"] for r in rates),
                       "s_per_update": sum(r["s_per_update"] for r in rates) / len(rates),
                       "per_rank": rates, "update_times": [time_summary(t) for t in per_rank]}
    return intervals


def probe_exchange(box: box_cluster.BoxCluster, work: str, name: str, floats: int, reps: int = 200) -> dict[str, Any]:
    """The trainer's own gradient exchange alone (benchmarks/exchange_probe.py: `MpiDist.average_flat`
    of `floats` float32s, each repetition after a barrier, its time the slowest rank's) on `box`'s nodes as they
    are set now: what one exchange costs over these links with these CPU shares, no rank waiting on another's
    compute."""
    out = os.path.join(work, f"{name}.json")
    job = box.start([out, "--floats", str(floats), "--reps", str(reps), "--warmup", "20"],
                    os.path.join(work, f"{name}.log"),
                    program=[sys.executable, "-m", "benchmarks.exchange_probe"])
    rc = job.wait(300)
    if rc != 0 or not os.path.exists(out):
        return {"error": f"exit {rc}: {job.output()[-1500:]}"}
    with open(out) as fh:
        d = json.load(fh)
    t = np.asarray(d["backends"]["mpi"]["seconds"])
    return {"reps": len(t), "mean_s": float(t.mean()), "median_s": float(np.median(t)),
            "p90_s": float(np.quantile(t, 0.9)), "ping_pong_one_way_s": d["latency_s"]}


# Collectives per update of the exchange run: the gradient's allreduce, and at every sync point (each
# --stats-interval-updates updates, 5 in TRAINER) a gather of statistics and the stop vote (ba3c/runner.py _sync)
SYNC_COLLECTIVES = 2


def exchange_per_update_s(probe: dict[str, Any], stats_interval: int) -> float | None:
    """Modelled exchange seconds per update: the probe's mean exchange for each collective the trainer makes per
    update (the sync point's are small messages; on this box a collective's time is the nodes' scheduling, not
    its bytes, so each is taken at the gradient's measured cost)."""
    if "mean_s" not in probe:
        return None
    return probe["mean_s"] * (1 + SYNC_COLLECTIVES / stats_interval)


def model_point(point: dict[str, Any], intervals: dict[str, list[list[float]]], slowdown: float,
                stats_interval: int) -> None:
    """The modelled update times and efficiencies beside the measured ones, into `point` (see the docstring)."""
    nodes, ex, co = point["nodes"], point.get("exchange", {}), point.get("control", {})
    if "frames_per_s" not in ex or "frames_per_s" not in co or not point.get("params"):
        return
    t_link = sm.t_allreduce(nodes, sm.BYTES_PER_FLOAT * point["params"], box_cluster.emulated_link(point["rate_bps"]))
    t_ex = exchange_per_update_s(point.get("exchange_probe", {}), stats_interval)
    control = intervals["control"]
    means = [float(np.mean(t)) for t in control]
    t_max = sm.expected_max_s(control)
    t_sync = sm.sync_update_s(control, t_link if t_ex is None else t_ex)
    measured_s = float(np.mean(intervals["exchange"][0]))  # rank 0's; every rank steps together
    point["efficiency"] = ex["frames_per_s"] / co["frames_per_s"]
    # frames/s = frames per update x ranks / update time; the control's is the sum of its ranks' own rates
    point["modelled"] = {"efficiency": nodes / t_sync / sum(1 / m for m in means), "t_update_s": t_sync,
                         "t_expected_max_s": t_max, "t_mean_s": float(np.mean(means)),
                         "t_exchange_s": t_link if t_ex is None else t_ex,
                         "exchange_from": "link model (no probe)" if t_ex is None else "exchange probe on the nodes",
                         "t_allreduce_link_model_s": t_link}
    point["model_error"] = sm.relative_error(point["modelled"]["efficiency"], point["efficiency"])
    point["measured_update_s"] = measured_s
    point["update_time_error"] = sm.relative_error(t_sync, measured_s)
    t_c = co["s_per_update"]  # the model before the waiting term: the mean rank's compute + the link's allreduce
    point["modelled_without_waiting"] = {"efficiency": t_c / (t_c + t_link), "t_compute_s": t_c,
                                         "model_error": sm.relative_error(t_c / (t_c + t_link), point["efficiency"])}
    if "straggler_exchange" not in intervals:
        return
    t_ex_slow = exchange_per_update_s(point.get("straggler_probe", {}), stats_interval)
    t_ex_slow = t_link if t_ex_slow is None else t_ex_slow
    nominal = [*control[:-1], [slowdown * t for t in control[-1]]]
    slow_s = float(np.mean(intervals["straggler_exchange"][0]))
    point["straggler"] = {
        "slowdown": slowdown, "measured_update_s": slow_s, "equal_shares_update_s": measured_s,
        "t_exchange_s": t_ex_slow, "modelled_nominal_s": sm.sync_update_s(nominal, t_ex_slow),
        "modelled_from_slowed_control_s": (sm.sync_update_s(intervals["straggler_control"], t_ex_slow)
                                           if "straggler_control" in intervals else None)}
    st = point["straggler"]
    for key in ("nominal", "from_slowed_control"):
        pred = st[f"modelled_{key}_s"]
        st[f"error_{key}"] = None if pred is None else sm.relative_error(pred, slow_s)


def pool(point: dict[str, Any], intervals: dict[str, list[list[float]]], name: str, repeats: int) -> None:
    """Repeats NAME0 .. NAME<k-1> of one job pooled into NAME: frames/s and seconds per update averaged over the
    repeats, each rank's update times put together (the model then sees the load every repeat saw)."""
    parts = [point.pop(f"{name}{k}", {"error": "not run"}) for k in range(repeats)]
    times = [intervals.pop(f"{name}{k}", None) for k in range(repeats)]
    if any("error" in p for p in parts) or any(t is None for t in times):
        point[name] = {"error": "; ".join(f"repeat {k}: {p['error']}" for k, p in enumerate(parts) if "error" in p)}
        return
    per_rank = [[x for t in times for x in t[i]] for i in range(len(times[0]))]
    intervals[name] = per_rank
    point[name] = {"frames_per_s": float(np.mean([p["frames_per_s"] for p in parts])),
                   "s_per_update": float(np.mean([p["s_per_update"] for p in parts])),
                   "update_times": [time_summary(t) for t in per_rank], "repeats": parts}


def measure_pairs(box: box_cluster.BoxCluster, work: str, point: dict[str, Any], nodes: int, flags: list[str],
                  args: argparse.Namespace, prefix: str = "") -> dict[str, list[list[float]]]:
    """The exchange run and the control, --repeats times each in the order exchange, control, control, exchange,
    exchange, ... (a load that drifts steadily weighs on both alike), each pooled (`pool`) into
    point[PREFIX + exchange] and point[PREFIX + control]."""
    pair = (("exchange", False), ("control", True))
    jobs = tuple((f"{prefix}{name}{k}", control) for k in range(args.repeats)
                 for name, control in (pair if k % 2 == 0 else pair[::-1]))
    intervals = measure_jobs(box, work, point, nodes, flags, args, jobs)
    for name in ("exchange", "control"):
        pool(point, intervals, prefix + name, args.repeats)
    return intervals


def measure_point(nodes: int, cpus: float, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    flags = [*TRAINER, *extra, "--total-frames", "50000000", "--max-minutes", str((args.warmup + args.seconds) / 60)]
    point: dict[str, Any] = {"nodes": nodes, "cpus_per_node": cpus, "rate_bps": args.rate_gbit * 1e9}
    slowdown = 2.0
    with box_cluster.BoxCluster(nodes, args.rate_gbit * 1e9, cpus) as box:
        point["cpu_control"] = None if box.cpu is None else f"cgroup v{box.cpu.version}"
        work = tempfile.mkdtemp(prefix=f"{box.topo.tag}-scaling-")
        try:
            intervals = measure_pairs(box, work, point, nodes, flags, args)
            if point.get("params"):
                print(f"box_scaling: {nodes} nodes, exchange probe ...", flush=True)
                point["exchange_probe"] = probe_exchange(box, work, "exchange_probe", point["params"])
            if nodes in args.straggler_at and box.cpu is not None:
                box.set_cpu_share(nodes - 1, cpus / slowdown)  # the last node: half its share
                intervals.update(measure_pairs(box, work, point, nodes, flags, args, "straggler_"))
                if point.get("params"):
                    point["straggler_probe"] = probe_exchange(box, work, "straggler_probe", point["params"])
        finally:
            shutil.rmtree(work, ignore_errors=True)
    model_point(point, intervals, slowdown, STATS_INTERVAL)
    return point


def report(points: list[dict[str, Any]]) -> None:
    print(f"\n{'nodes':>5} {'exchange fps':>12} {'control fps':>11} {'efficiency':>10} {'modelled':>8} {'error':>7} "
          f"{'no-wait model':>13} {'ms/update exch':>14} {'modelled':>8} {'ctrl mean':>9} {'E[max]':>7}"
          f"   (emulated: namespace nodes on one machine)")
    for p in points:
        ex, co = p.get("exchange", {}), p.get("control", {})
        if "efficiency" not in p:
            print(f"{p['nodes']:>5}  failed: {ex.get('error') or co.get('error')}")
            continue
        m = p["modelled"]
        print(f"{p['nodes']:>5} {ex['frames_per_s']:>12,.0f} {co['frames_per_s']:>11,.0f} {p['efficiency']:>10.3f} "
              f"{m['efficiency']:>8.3f} {p['model_error']:>+7.1%} {p['modelled_without_waiting']['efficiency']:>13.3f} "
              f"{1e3 * p['measured_update_s']:>14.1f} {1e3 * m['t_update_s']:>8.1f} {1e3 * m['t_mean_s']:>9.1f} "
              f"{1e3 * m['t_expected_max_s']:>7.1f} {1e3 * m['t_exchange_s']:>5.1f}")
    for p in points:
        st = p.get("straggler")
        if st:
            slowed = ("" if st["modelled_from_slowed_control_s"] is None else
                      f", from the slowed control {1e3 * st['modelled_from_slowed_control_s']:.1f} ms "
                      f"({st['error_from_slowed_control']:+.0%})")
            print(f"straggler, {p['nodes']} nodes, the last at 1/{st['slowdown']:g} of its share: measured "
                  f"{1e3 * st['measured_update_s']:.1f} ms per update ({1e3 * st['equal_shares_update_s']:.1f} with "
                  f"equal shares); modelled: nominal {1e3 * st['modelled_nominal_s']:.1f} ms "
                  f"({st['error_nominal']:+.0%}){slowed}")


def plot(points: list[dict[str, Any]], path: str, title: str) -> None:
    plt = harness.pyplot()
    ok = [p for p in points if "efficiency" in p]
    fig, ax = plt.subplots(figsize=(6, 4))
    ns = [p["nodes"] for p in ok]
    ax.plot(ns, [p["efficiency"] for p in ok], "o-", label="measured (emulated): exchange / no-exchange control")
    ax.plot(ns, [p["modelled"]["efficiency"] for p in ok], "s--",
            label="modelled: with rank waiting, E[max of N control update times] + measured exchange")
    ax.plot(ns, [p["modelled_without_waiting"]["efficiency"] for p in ok], "^:", color="grey",
            label="modelled without waiting: t_c / (t_c + t_allreduce)")
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
    p.add_argument("--cpus-per-node", default="0.5",
                   help="each node's CPU cap (a cgroup quota): one number, or a comma list, one per --nodes entry")
    p.add_argument("--rate-gbit", type=float, default=1.0, help="each node's link rate (tc tbf), Gbit/s")
    p.add_argument("--seconds", type=float, default=30.0, help="the measured window")
    p.add_argument("--warmup", type=float, default=15.0, help="training seconds before the window")
    p.add_argument("--repeats", type=int, default=1,
                   help="exchange run and control alternated this many times per point, pooled")
    p.add_argument("--straggler-at", default="4",
                   help="comma list of node counts at which the last node is also run at half its CPU share ('': none)")
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    try:
        nodes = [int(x) for x in args.nodes.split(",")]
        cpus = [float(x) for x in args.cpus_per_node.split(",")]
        args.straggler_at = [int(x) for x in args.straggler_at.split(",") if x]
    except ValueError as e:
        print(f"box_scaling: --nodes, --cpus-per-node and --straggler-at are comma lists of numbers ({e})",
              file=sys.stderr)
        return 2
    if args.repeats < 1:
        print(f"box_scaling: --repeats {args.repeats}: at least 1", file=sys.stderr)
        return 2
    if len(cpus) not in (1, len(nodes)) or min(nodes) < 2 or min(cpus) <= 0:
        print(f"box_scaling: --cpus-per-node needs one value or one per --nodes entry ({len(nodes)}), each > 0, "
              f"and --nodes at least 2 each (got --nodes {args.nodes} --cpus-per-node {args.cpus_per_node})",
              file=sys.stderr)
        return 2
    cpus = cpus * len(nodes) if len(cpus) == 1 else cpus
    why = box_cluster.preflight()
    if why:
        print(f"box_scaling: {why}", file=sys.stderr)
        return 2
    for sig in (signal.SIGTERM, signal.SIGHUP):  # unwind like Ctrl-C: the cluster's cleanup runs
        signal.signal(sig, lambda n, _f: sys.exit(128 + n))
    os.makedirs(args.out, exist_ok=True)
    data: dict[str, Any] = {
        "machine": harness.machine(), "date": harness.now(), "emulated": True,
        "modelled_by": ("benchmarks/scaling_model.py sync update with rank waiting: E[max over the nodes of a "
                        "per-update time of the no-exchange control] + t_allreduce over the emulated link"),
        "config": {k: v for k, v in vars(args).items() if k != "out"}, "trainer": [*TRAINER, *extra], "points": []}
    path = os.path.join(args.out, "box_scaling.json")
    for n, c in zip(nodes, cpus):
        data["points"].append(measure_point(n, c, args, extra))
        with open(path, "w") as fh:
            json.dump(data, fh, indent=1)
    report(data["points"])
    try:
        plot(data["points"], os.path.join(args.out, "box_scaling.png"),
             f"Emulated weak scaling, {args.cpus_per_node} CPU and {args.rate_gbit:g} Gbit/s per node, "
             f"{data['machine']['cores']} cores, {data['date']}")
    except ImportError as e:
        print(f"box_scaling: no plot ({e})")
    print(f"wrote {path}")
    return 0 if all("efficiency" in p for p in data["points"]) else 1


if __name__ == "__main__":
    sys.exit(main())
