"""The communication model checked over a real network stack: a cluster of network namespaces in this box.

    sudo python -m studies.shaped_links [--ranks 2,4,8] [--rates-gbit 0.1,1,10] [--reps 10]
            [--transports default,eager,ring,ring+eager] [--backends mpi,horovod] [--quick] [--out DIR]

Needs root, iproute2 (`ip`, `tc`) and `unshare`. No training: ranks that only exchange the Nature CNN's
gradient (benchmarks/exchange_probe.py, the trainer's own calls) over Open MPI's TCP
transport.

The cluster (benchmarks/netns.py, which builds and removes it). Each rank is a "node": a network
namespace with its own host name (UTS namespace), joined by one veth pair to a hub namespace whose Linux
bridge is the switch. Both ends of every veth carry a tbf qdisc at the link rate (the node's end shapes
what it sends, the hub's end what it receives): a full-duplex NIC of that rate on a non-blocking switch.
mpirun runs in the hub; PRRTE starts one daemon per node through `ip netns exec` (its ssh agent, a
script in a temporary directory), each rank talks PMIx to its own node's daemon over that node's
loopback, and ranks exchange with `--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include <cluster
subnet>`, so no shared memory and no loopback can carry the gradient. Recorded per run, as evidence: the
bytes each tbf qdisc passed against its interface's, tbf overlimits and drops, and per rank the bytes
its interface and its loopback carried during the timed exchanges; and each rank's host name. There is
no added latency (netem is not available); the model takes published latencies.

Points. For each rank count, each transport variant (Open MPI's defaults, and variants that
isolate why they differ from the model: see `transport_mca`): one run with no qdisc (what the
CPUs and the kernel's TCP stack alone allow: on 2 cores, 8 ranks are CPU-bound) and one per link
rate. A point is judged link-bound when the unshaped exchange took at most
LINK_BOUND_MAX_CPU_SHARE of the shaped one; the model is judged only there, and the other points
are reported as CPU-bound.

The model (benchmarks/scaling_model.py, labelled modelled): the communication term
2(r-1)/r x bytes / bandwidth + 2(r-1) x latency, with
* `projected`: bandwidth 0.8 x line rate, the scaling model's convention for its networks, and
  the latency published for that interconnect (PUBLISHED_LATENCY);
* `framing`: bandwidth = TCP payload rate after the headers tbf counts (1448 of 1514 bytes);
* `fitted`: a + x / efficiency fitted to the link-bound points (labelled fitted).
Its error per point is (predicted - measured) / measured, against the median of --reps exchanges.

Cleanup: every namespace (and with it every veth, bridge and qdisc) is removed, and every process
in them ended, on success, on error, on Ctrl-C, SIGTERM and SIGHUP; names carry this process's id
(`ba3c-sl<pid>-...`), so a concurrent run is left alone, and namespaces left by a run that was
SIGKILLed (its pid gone) are removed at the next start.
Writes DIR/shaped_links.json and DIR/shaped_links.png (DIR: studies/shaped_links/results).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks import scaling_model as sm
from benchmarks.netns import AGENT, MTU, NAME_PREFIX, SUBNET, Cluster, Topology, delta, remove_stale, tbf_sizes
from measure import harness

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
LINK_BOUND_MAX_CPU_SHARE = 0.2  # unshaped / shaped median at most this: the link, not the CPUs, bounds the point
TARGET_ERROR = 0.10
# the scaling model's convention for a network's usable bandwidth: its 10GbE entry over 10 Gbit/s
MODEL_LINK_EFFICIENCY = sm.NETWORKS["10GbE"].bandwidth_bytes_per_s / (10e9 / 8)
# One-way latency of MPI over TCP on each projected interconnect (published; this box's links add none)
PUBLISHED_LATENCY: dict[float, tuple[float, str]] = {
    10e9: (20e-6, "10GbE: 20 us application-to-application over TCP (Hurwitz and Feng, 'Initial end-to-end "
                  "performance evaluation of 10-Gigabit Ethernet', Hot Interconnects 11, 2003)"),
    1e9: (35e-6, "1GbE: 35 us, Open MPI over TCP, Broadcom NICs with default interrupt coalescence "
                 "(nw-grid.ac.uk/LivMPI, 'Gigabit Ethernet MPI Performance Tests')"),
}
def published_latency(rate_bps: float) -> tuple[float, str]:
    """The published figure of the nearest interconnect at or above `rate_bps` (labelled with its source)."""
    for rate in sorted(PUBLISHED_LATENCY):
        if rate_bps <= rate:
            lat, src = PUBLISHED_LATENCY[rate]
            return lat, src if rate == rate_bps else f"none found for {rate_bps / 1e9:g} Gbit/s; used {src}"
    return PUBLISHED_LATENCY[max(PUBLISHED_LATENCY)]


# ---------------------------------------------------------------- one run: mpirun of the exchange probe

@dataclass(frozen=True)
class Settings:
    reps: int
    warmup: int
    backends: tuple[str, ...]
    floats: int
    timeout_s: float


TRANSPORT_PARTS = ("default", "eager", "ring")


def transport_mca(transport: str, nbytes: int) -> list[str]:
    """Open MPI settings of a transport variant, parts joined by '+' (on top of pml ob1 + btl tcp,self).

    default: Open MPI's own choices (what the trainer gets). eager: the TCP BTL's eager limit (and
    fragment size) above the message, so a large message goes at once instead of by rendezvous, whose
    acknowledgement can wait behind the opposite direction's data on the pair's single TCP connection.
    ring: the ring allreduce (coll tuned algorithm 4), the algorithm the model describes, instead of
    Open MPI's default choice for this size.
    """
    mca: list[str] = []
    for part in transport.split("+"):
        if part == "eager":
            limit = str(1 << (int(nbytes) + 65536 - 1).bit_length())  # a power of two above message + headers
            mca += ["--mca", "btl_tcp_eager_limit", limit, "--mca", "btl_tcp_rndv_eager_limit", limit,
                    "--mca", "btl_tcp_max_send_size", limit]
        elif part == "ring":
            mca += ["--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_allreduce_algorithm", "4"]
        elif part != "default":
            raise ValueError(f"unknown transport '{transport}' (parts: {', '.join(TRANSPORT_PARTS)}, joined by +)")
    return mca


def message_bytes(s: Settings) -> int:
    """The largest message any backend sends (horovod always sends the CNN's gradient)."""
    return 4 * max(s.floats, sm.MODEL_FLOATS if "horovod" in s.backends else 0)


def mpirun_command(topo: Topology, agent: str, hostfile: str, out: str, s: Settings,
                   transport: str = "default") -> list[str]:
    subnet = f"{SUBNET}.0/24"
    nbytes = message_bytes(s)
    mpirun = ["mpirun", "--hostfile", hostfile, "-np", str(topo.ranks), "--map-by", "node", "--bind-to", "none",
              "--prtemca", "plm_ssh_agent", agent, "--prtemca", "oob_tcp_if_include", subnet,
              "--mca", "pml", "ob1", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", subnet,
              *transport_mca(transport, nbytes), sys.executable, "-m", "benchmarks.exchange_probe", out,
              "--backends", ",".join(s.backends),
              "--floats", str(s.floats), "--reps", str(s.reps), "--warmup", str(s.warmup), "--tag", topo.tag]
    # mpirun in the hub namespace, named after it (the nodes' names differ from it and from each other)
    return ["ip", "netns", "exec", topo.hub, "unshare", "--uts", "sh", "-c", 'hostname "$0"; exec "$@"', topo.hub,
            *mpirun]


def run_exchange(cluster: Cluster, workdir: str, s: Settings, transport: str) -> dict[str, Any]:
    """One mpirun of the exchange probe on the cluster as it is shaped now; the probe's JSON plus the evidence."""
    topo = cluster.topo
    out = os.path.join(workdir, f"probe-{topo.ranks}-{cluster.rate_bps}-{transport}.json")
    hostfile = os.path.join(workdir, "hosts")
    with open(hostfile, "w") as fh:
        fh.writelines(f"{n} slots=1\n" for n in topo.nodes)
    cmd = mpirun_command(topo, os.path.join(workdir, "agent.sh"), hostfile, out, s, transport)
    before, t0 = cluster.counters(), time.time()
    proc = subprocess.Popen(cmd, cwd=harness.ROOT, env=harness.child_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=s.timeout_s)
    finally:
        if proc.poll() is None:  # a timeout, an error or a signal: end mpirun's group (the cluster ends the rest)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    res: dict[str, Any] = {"ranks": topo.ranks, "rate_bps": cluster.rate_bps, "transport": transport,
                           "mca": transport_mca(transport, message_bytes(s)),
                           "tbf": (None if cluster.rate_bps is None
                                   else dict(zip(("burst", "limit"), tbf_sizes(cluster.rate_bps)))),
                           "returncode": proc.returncode,
                           "wall_s": time.time() - t0, "command": " ".join(cmd)}
    if proc.returncode != 0 or not os.path.exists(out):
        return {**res, "error": log[-3000:]}
    with open(out) as fh:
        res.update(json.load(fh))
    res["links"] = delta(before, cluster.counters())
    return res


# ---------------------------------------------------------------- analysis (modelled vs measured)

def exchange_rows(runs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (ranks, rate, transport, backend) that ran: measured times, bytes, traffic evidence."""
    rows = []
    for run in runs:
        if run.get("error"):
            continue
        shaped = [v for v in run["links"].values() if "qdisc_bytes" in v]
        for backend, b in run["backends"].items():
            t, per_rank = np.array(b["seconds"]), b["per_rank"]
            reps = len(t)
            ring = sm.ring_bytes_per_rank(run["ranks"], b["bytes"])
            rows.append({
                "ranks": run["ranks"], "rate_bps": run["rate_bps"], "transport": run.get("transport", "default"),
                "backend": backend, "bytes": b["bytes"], "reps": reps,
                "median_s": float(np.median(t)), "min_s": float(t.min()), "max_s": float(t.max()),
                "q25_s": float(np.quantile(t, 0.25)), "q75_s": float(np.quantile(t, 0.75)),
                # bytes per exchange and rank as the interface counts them (a GSO packet's headers once)
                "sent_bytes_per_rank": float(np.mean([r["tx_bytes"] for r in per_rank])) / reps,
                "received_bytes_per_rank": float(np.mean([r["rx_bytes"] for r in per_rank])) / reps,
                "ring_bytes_per_rank": ring,
                "loopback_bytes_per_rank": float(np.mean([r["lo_tx_bytes"] for r in per_rank])) / reps,
                "cpu_s_per_rank": float(np.mean([r["cpu_s"] for r in per_rank])) / reps,
                "through_tbf": (sum(v["qdisc_bytes"] for v in shaped) / max(sum(v["tx_bytes"] for v in shaped), 1)
                                if shaped else None),
                "tbf_overlimits": sum(v["qdisc_overlimits"] for v in shaped) if shaped else None,
                "tbf_drops": sum(v["qdisc_drops"] for v in shaped) if shaped else None,
                "tbf_burst_share": None if not run.get("tbf") else run["tbf"]["burst"] / ring,
                "distinct_hosts": len(set(run["hosts"])),
            })
    return rows


def predictions(ranks: int, nbytes: float, rate_bps: float) -> dict[str, float]:
    """Modelled seconds of one allreduce on a link of `rate_bps` (see the module docstring)."""
    line = rate_bps / 8
    lat, _ = published_latency(rate_bps)
    return {
        "projected": sm.t_allreduce(ranks, nbytes, sm.AllreduceFit(0.0, MODEL_LINK_EFFICIENCY * line, lat)),
        "framing": sm.t_allreduce(ranks, nbytes, sm.AllreduceFit(0.0, sm.tcp_payload_bandwidth(line, MTU), lat)),
        "line_rate": sm.t_allreduce(ranks, nbytes, sm.AllreduceFit(0.0, line, 0.0)),
    }


def _group(r: dict[str, Any]) -> str:
    return f"{r['backend']}/{r['transport']}"


def analyze(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per point: the model's predictions and errors, and whether the link (not the CPUs) bounds it;
    per backend/transport: a fitted model and the largest error at the link-bound points."""
    rows = exchange_rows(runs)
    unshaped = {(r["ranks"], _group(r)): r["median_s"] for r in rows if r["rate_bps"] is None}
    for r in rows:
        if r["rate_bps"] is None:
            continue
        base = unshaped.get((r["ranks"], _group(r)))
        r["cpu_share"] = None if base is None else base / r["median_s"]
        r["link_bound"] = r["cpu_share"] is not None and r["cpu_share"] <= LINK_BOUND_MAX_CPU_SHARE
        r["predicted_s"] = predictions(r["ranks"], r["bytes"], r["rate_bps"])
        r["error"] = {k: sm.relative_error(v, r["median_s"]) for k, v in r["predicted_s"].items()}
    fits, summary = {}, {}
    for group in sorted({_group(r) for r in rows}):
        shaped = [r for r in rows if _group(r) == group and r["rate_bps"] is not None]
        bound = [r for r in shaped if r["link_bound"]]
        fit = sm.fit_link_efficiency([(r["predicted_s"]["line_rate"], r["median_s"]) for r in bound])
        if fit is not None:
            a, eff = fit
            fits[group] = {"overhead_s": a, "efficiency": eff, "points": len(bound), "fitted": True}
            for r in shaped:
                r["predicted_s"]["fitted"] = a + r["predicted_s"]["line_rate"] / eff
                r["error"]["fitted"] = sm.relative_error(r["predicted_s"]["fitted"], r["median_s"])
        worst = {k: max(abs(r["error"][k]) for r in bound) for k in (bound[0]["error"] if bound else {})}
        summary[group] = {
            "link_bound_points": [[r["ranks"], r["rate_bps"]] for r in bound],
            "cpu_bound_points": [[r["ranks"], r["rate_bps"]] for r in shaped if not r["link_bound"]],
            "ranks_judged": sorted({r["ranks"] for r in bound}),
            "max_abs_error": worst,
            "target_met": {k: v <= TARGET_ERROR for k, v in worst.items()},
        }
    return {"rows": rows, "fits": fits, "summary": summary, "modelled": True,
            "link_bound_max_cpu_share": LINK_BOUND_MAX_CPU_SHARE, "target_error": TARGET_ERROR,
            "model_link_efficiency": MODEL_LINK_EFFICIENCY,
            "framing_efficiency": sm.tcp_payload_bandwidth(1.0, MTU),
            "published_latency": {f"{k / 1e9:g} Gbit/s": {"seconds": v[0], "source": v[1]}
                                  for k, v in PUBLISHED_LATENCY.items()}}


# ---------------------------------------------------------------- report and plot

def _rate(rate_bps: float | None) -> str:
    return "unshaped" if rate_bps is None else f"{rate_bps / 1e9:g} Gbit/s"


def _pct(d: dict[str, float], k: str) -> str:
    return format(d[k], "+.1%") if k in d else ""


def report(a: dict[str, Any]) -> None:
    print(f"\n{'backend/transport':>17} {'ranks':>5} {'link':>12} {'median ms':>9} {'min-max ms':>15} {'sent/ring':>9} "
          f"{'cpu share':>9} {'bound':>5} {'model ms':>8} {'error':>7} {'framing':>7} {'fitted':>7}")
    for r in a["rows"]:
        pred, err = r.get("predicted_s", {}), r.get("error", {})
        share = r.get("cpu_share")
        bound = "" if r["rate_bps"] is None else ("link" if r["link_bound"] else "CPU")
        spread = f"{1e3 * r['min_s']:.1f}-{1e3 * r['max_s']:.1f}"
        print(f"{_group(r):>17} {r['ranks']:>5} {_rate(r['rate_bps']):>12} {1e3 * r['median_s']:>9.1f} "
              f"{spread:>15} {r['sent_bytes_per_rank'] / r['ring_bytes_per_rank']:>9.3f} "
              f"{'' if share is None else format(share, '.2f'):>9} {bound:>5} "
              f"{'' if not pred else format(1e3 * pred['projected'], '.1f'):>8} "
              f"{_pct(err, 'projected'):>7} {_pct(err, 'framing'):>7} {_pct(err, 'fitted'):>7}")
    print("sent/ring: bytes a rank's interface sent per exchange over the ring allreduce's 2(r-1)/r x message; "
          f"cpu share: unshaped / shaped median (link-bound if <= {a['link_bound_max_cpu_share']}); "
          "model (modelled): 2(r-1)/r x bytes / (0.8 x line) + 2(r-1) x published latency; "
          "error = (model - measured) / measured")
    for group, f in a["fits"].items():
        print(f"fitted ({group}, {f['points']} link-bound points): t = {1e3 * f['overhead_s']:.2f} ms + "
              f"2(r-1)/r x bytes / ({f['efficiency']:.3f} x line rate)")
    for group, s in a["summary"].items():
        print(f"{group}: judged at ranks {s['ranks_judged']} ({len(s['link_bound_points'])} link-bound points, "
              f"{len(s['cpu_bound_points'])} CPU-bound); max |error| "
              + ", ".join(f"{k} {v:.1%} ({'met' if s['target_met'][k] else 'NOT met'})"
                          for k, v in s["max_abs_error"].items()))


def plot(a: dict[str, Any], path: str, title: str) -> None:
    plt = harness.pyplot()
    groups = sorted({_group(r) for r in a["rows"]})
    fig, axes = plt.subplots(len(groups), 2, figsize=(12, 4.2 * len(groups)), squeeze=False)
    rates = sorted({r["rate_bps"] for r in a["rows"] if r["rate_bps"] is not None})
    colors = dict(zip(rates, plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    all_ranks = sorted({r["ranks"] for r in a["rows"]})
    for (ax1, ax2), group in zip(axes, groups):
        rows = [r for r in a["rows"] if _group(r) == group]
        base = sorted((r for r in rows if r["rate_bps"] is None), key=lambda r: r["ranks"])
        if base:
            ax1.plot([r["ranks"] for r in base], [1e3 * r["median_s"] for r in base], "s-", color="grey",
                     label="measured, unshaped (CPUs and TCP stack only)")
        for rate in rates:
            pts = sorted((r for r in rows if r["rate_bps"] == rate), key=lambda r: r["ranks"])
            if not pts:
                continue
            rs, c = [r["ranks"] for r in pts], colors[rate]
            med = np.array([1e3 * r["median_s"] for r in pts])
            spread = [med - [1e3 * r["min_s"] for r in pts], [1e3 * r["max_s"] for r in pts] - med]
            ax1.errorbar(rs, med, yerr=spread, fmt="o", color=c, capsize=3,
                         label=f"measured, {_rate(rate)} (median, min-max)")
            ax1.plot(rs, [1e3 * r["predicted_s"]["projected"] for r in pts], "--", color=c,
                     label=f"modelled, {_rate(rate)} (dotted: framing-corrected)")
            ax1.plot(rs, [1e3 * r["predicted_s"]["framing"] for r in pts], ":", color=c)
            for r in pts:
                fill = "full" if r["link_bound"] else "none"
                ax2.plot(r["ranks"], 100 * r["error"]["projected"], "o", color=c, fillstyle=fill, ms=8)
                ax2.plot(r["ranks"], 100 * r["error"]["framing"], "^", color=c, fillstyle=fill, ms=7)
            ax2.plot([], [], "s", color=c, label=_rate(rate))
        ax2.plot([], [], "ko", label="model as projected (0.8 x line rate)")
        ax2.plot([], [], "k^", label="framing-corrected (1448/1514 of line)")
        ax2.plot([], [], "ko", fillstyle="none", label="hollow: CPU-bound here, not judged")
        ax2.axhspan(-100 * TARGET_ERROR, 100 * TARGET_ERROR, color="green", alpha=0.1, label="target +-10%")
        ax2.axhline(0, color="k", lw=0.5)
        for ax, ylabel in ((ax1, "ms per allreduce"), (ax2, "model error, % of measured median")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(all_ranks, labels=[str(r) for r in all_ranks])
            ax.set_xlabel("ranks (one per namespace 'node')")
            ax.set_ylabel(ylabel)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        ax1.set_yscale("log")
        ax1.set_title(f"{group}: measured vs modelled", fontsize=9)
        ax2.set_title(f"{group}: model error (filled: link-bound, judged)", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.985))
    fig.savefig(path, dpi=55)
    plt.close(fig)


# ---------------------------------------------------------------- main

def preflight() -> str | None:
    """Why this cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs and tc qdiscs)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2 / util-linux)"
    if shutil.which("mpirun", path=harness.child_env()["PATH"]) is None:
        return "needs Open MPI's mpirun"
    return None


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ranks", default="2,4,8")
    p.add_argument("--rates-gbit", default="0.1,1,10", help="link rates (Gbit/s); an unshaped run is always added")
    p.add_argument("--transports", default="default,eager,ring,ring+eager",
                   help="Open MPI variants, parts joined by +: default (Open MPI's own), eager (TCP eager limit above "
                        "the message: no rendezvous), ring (the ring allreduce the model describes)")
    p.add_argument("--reps", type=int, default=10, help="timed exchanges per backend and point (after --warmup)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--backends", default="mpi", help="comma list: mpi (mpi4py Allreduce), horovod (grouped_allreduce)")
    p.add_argument("--floats", type=int, default=sm.MODEL_FLOATS, help="the mpi backend's message (float32s)")
    p.add_argument("--timeout", type=float, default=900.0, help="cap on one mpirun (start-up included), seconds")
    p.add_argument("--quick", action="store_true",
                   help="2 ranks, 100,000 floats, 1 Gbit/s, default transport, mpi only, 3 reps (smoke test)")
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--name", default="shaped_links")
    p.add_argument("--analyze-only", default="", help="re-analyse and re-plot a saved JSON instead of measuring")
    p.add_argument("--fail-after-runs", type=int, default=-1, help=argparse.SUPPRESS)  # tests: a failure mid-run
    args = p.parse_args(argv)
    if args.quick:
        args.ranks, args.rates_gbit, args.transports, args.backends = "2", "1", "default", "mpi"
        args.floats, args.reps, args.warmup = 100_000, 3, 1
    return args


def measure(args: argparse.Namespace, data: dict[str, Any], save: Callable[[], None]) -> None:
    """Every (ranks, rate, transport) run; `save()` after each, so an interrupted run keeps what it measured."""
    s = Settings(args.reps, args.warmup, tuple(args.backends.split(",")), args.floats, args.timeout)
    rates: list[float | None] = [None, *(1e9 * float(g) for g in args.rates_gbit.split(",") if g)]
    workdir = tempfile.mkdtemp(prefix=f"{data['tag']}-")
    try:
        with open(os.path.join(workdir, "agent.sh"), "w") as fh:
            fh.write(AGENT)
        os.chmod(os.path.join(workdir, "agent.sh"), 0o755)
        for ranks in (int(x) for x in args.ranks.split(",")):
            with Cluster(Topology(data["tag"], ranks)) as cluster:
                for rate in rates:
                    cluster.shape(rate)
                    for transport in args.transports.split(","):
                        if args.fail_after_runs == len(data["runs"]):
                            raise RuntimeError("--fail-after-runs: failing on purpose (cleanup test)")
                        print(f"shaped_links: {ranks} ranks, {_rate(rate)}, {transport} transport ...", flush=True)
                        run = run_exchange(cluster, workdir, s, transport)
                        data.setdefault("command_example", run.pop("command"))  # the others differ in -np and mca
                        run.pop("command", None)
                        data["runs"].append(run)
                        save()
                        if run.get("error"):
                            print(f"    error (exit {run['returncode']}):\n{run['error'][-1500:]}", flush=True)
                        else:
                            print("    " + ", ".join(f"{b} median {1e3 * float(np.median(v['seconds'])):.1f} ms"
                                                      for b, v in run["backends"].items()), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # unwind like Ctrl-C: every `finally` (the cleanup) runs
        signal.signal(sig, lambda n, _f: sys.exit(128 + n))
    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, f"{args.name}.json")
    if args.analyze_only:
        with open(args.analyze_only) as fh:
            data = json.load(fh)
    else:
        why = preflight()
        if why:
            print(f"shaped_links: {why}", file=sys.stderr)
            return 2
        stale = remove_stale()
        if stale:
            print(f"shaped_links: removed namespaces left by dead runs: {stale}")
        data = {"machine": harness.machine(), "date": harness.now(), "tag": f"{NAME_PREFIX}{os.getpid()}",
                "config": {k: v for k, v in vars(args).items() if k not in ("out", "fail_after_runs", "analyze_only")},
                "mtu": MTU, "runs": []}

    def save() -> None:
        with open(json_path, "w") as fh:
            json.dump(data, fh, indent=1)

    if not args.analyze_only:
        measure(args, data, save)
        data["machine_after"] = harness.machine()
    data["analysis"] = analyze(data["runs"])
    save()
    try:
        plot(data["analysis"], os.path.join(args.out, f"{args.name}.png"),
             f"Allreduce over tbf-shaped veth links (Open MPI TCP), {data['machine']['cores']} cores "
             f"({data['machine']['cpu']}), {data['date']}; dashed/dotted = modelled")
    except ImportError as e:
        print(f"shaped_links: no plot ({e})")
    report(data["analysis"])
    print(f"wrote {json_path}")
    return 1 if any(r.get("error") for r in data["runs"]) else 0


if __name__ == "__main__":
    sys.exit(main())
