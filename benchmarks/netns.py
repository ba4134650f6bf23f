"""A cluster in this box: one network namespace per node, veth links to a bridge, tc tbf shaping.

Each "node" is a network namespace with its own host name (set by the PRRTE agent, `AGENT`), joined
by one veth pair to a hub namespace whose Linux bridge is the switch. `Cluster.shape(rate)` puts a
tbf qdisc at the link rate on both ends of every veth (what a node sends, what it receives): a
full-duplex NIC of that rate on a non-blocking switch. mpirun runs in the hub and starts one PRRTE
daemon per node through `ip netns exec` (write `AGENT` to an executable file and pass it as
`--prtemca plm_ssh_agent`), so ranks on different nodes talk over the veths only.

Cleanup: every namespace (and with it every veth, bridge and qdisc) is removed, and every process in
them ended, when the `Cluster` context exits (success, error, Ctrl-C; SIGTERM and SIGHUP too where
the caller turns them into SystemExit). Names carry the builder's process id (`ba3c-sl<pid>-...`), so
a concurrent run is left alone, and `remove_stale()` removes what a SIGKILLed run (its pid gone) left.

Needs root, iproute2 (`ip`, `tc`) and `unshare`. Used by studies/shaped_links (the communication model
over real TCP links); kept here, outside the study, so that tests and benchmarks can build the same
cluster. No TensorFlow, no MPI imported.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

NAME_PREFIX = "ba3c-sl"  # namespaces: ba3c-sl<pid>-hub, ba3c-sl<pid>-n<i>
SUBNET = "10.213.0"  # private to the namespaces: concurrent runs do not see each other's
HUB_IP = f"{SUBNET}.254"
MTU = 1500
AGENT = """#!/bin/sh
# PRRTE's ssh agent for the in-box cluster: the host name is a network namespace; give the daemon
# that namespace's network and the namespace's name as its host name (its own UTS namespace).
ns="$1"; shift
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
"""

def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


def our_namespaces(prefix: str) -> list[str]:
    """Network namespaces whose name starts with `prefix`."""
    out = sh("ip", "netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.split() and line.split()[0].startswith(prefix)]


def end_processes_in(namespaces: Sequence[str], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL, every process inside these namespaces (only ours live there)."""
    def pids() -> list[int]:
        return [int(p) for ns in namespaces for p in sh("ip", "netns", "pids", ns, check=False).stdout.split()]

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + grace_s
        while pids() and time.time() < deadline:
            time.sleep(0.1)


def remove_namespaces(names: Sequence[str]) -> list[str]:
    """End the processes inside, delete the namespaces (their veths, bridge and qdiscs go with them).
    Returns the names that could not be deleted."""
    end_processes_in(names)
    for ns in names:
        sh("ip", "netns", "del", ns, check=False)
    left = set(our_namespaces(NAME_PREFIX))
    return [ns for ns in names if ns in left]


def _dead_run(name: str) -> bool:
    """`name` belongs to a run (ba3c-sl<pid>-...) whose process no longer exists."""
    m = re.match(rf"{NAME_PREFIX}(\d+)-", name)
    return bool(m) and not os.path.exists(f"/proc/{m.group(1)}")


def remove_stale() -> list[str]:
    """Namespaces and temporary directories of earlier runs whose process is gone (e.g. SIGKILLed):
    removed; returned."""
    stale = [ns for ns in our_namespaces(NAME_PREFIX) if _dead_run(ns)]
    if stale:
        remove_namespaces(stale)
    tmp = tempfile.gettempdir()
    for d in (d for d in os.listdir(tmp) if _dead_run(d) and os.path.isdir(os.path.join(tmp, d))):
        shutil.rmtree(os.path.join(tmp, d), ignore_errors=True)
        stale.append(os.path.join(tmp, d))
    return stale


@dataclass(frozen=True)
class Topology:
    """Names and addresses of an r-node cluster; `tag` is unique to the process that builds it."""
    tag: str  # ba3c-sl<pid>
    ranks: int

    @property
    def hub(self) -> str:
        return f"{self.tag}-hub"

    def node(self, i: int) -> str:
        return f"{self.tag}-n{i}"

    @property
    def nodes(self) -> list[str]:
        return [self.node(i) for i in range(self.ranks)]

    @property
    def namespaces(self) -> list[str]:
        return [self.hub, *self.nodes]

    @staticmethod
    def node_if(i: int) -> str:
        return f"eth{i}"  # inside node i's namespace

    @staticmethod
    def hub_if(i: int) -> str:
        return f"port{i}"  # inside the hub's namespace

    @staticmethod
    def ip(i: int) -> str:
        return f"{SUBNET}.{i + 1}"

    def shaped(self) -> list[tuple[str, str, str]]:
        """(namespace, interface, name) of every qdisc: n<i>:up shapes what node i sends, n<i>:down what it receives."""
        return ([(self.node(i), self.node_if(i), f"n{i}:up") for i in range(self.ranks)]
                + [(self.hub, self.hub_if(i), f"n{i}:down") for i in range(self.ranks)])


class Cluster:
    """The namespaces, veths and bridge of `topo`, removed with everything in them on any way out.

    Use as a context manager. SIGINT, SIGTERM and SIGHUP are blocked while it is torn down, so a
    second signal cannot interrupt the cleanup (it is delivered afterwards)."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        self.rate_bps: float | None = None

    def __enter__(self) -> Cluster:
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _build(self) -> None:
        t = self.topo
        if our_namespaces(t.tag + "-"):
            remove_namespaces(our_namespaces(t.tag + "-"))  # ours by name: this pid's earlier cluster
        for ns in t.namespaces:
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "-n", t.hub, "link", "add", "switch", "type", "bridge")
        sh("ip", "-n", t.hub, "addr", "add", f"{HUB_IP}/24", "dev", "switch")
        sh("ip", "-n", t.hub, "link", "set", "switch", "up")
        for i in range(t.ranks):  # created inside the namespaces: nothing appears in this one
            sh("ip", "link", "add", "name", t.node_if(i), "netns", t.node(i), "mtu", str(MTU), "type", "veth",
               "peer", "name", t.hub_if(i), "netns", t.hub, "mtu", str(MTU))
            sh("ip", "-n", t.node(i), "addr", "add", f"{t.ip(i)}/24", "dev", t.node_if(i))
            sh("ip", "-n", t.node(i), "link", "set", t.node_if(i), "up")
            sh("ip", "-n", t.hub, "link", "set", t.hub_if(i), "master", "switch")
            sh("ip", "-n", t.hub, "link", "set", t.hub_if(i), "up")

    def shape(self, rate_bps: float | None) -> None:
        """tbf at `rate_bps` on every veth end (both directions of every node's link); None: no qdisc."""
        for ns, dev, _ in self.topo.shaped():
            if rate_bps is None:
                sh("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
            else:
                burst, limit = tbf_sizes(rate_bps)
                sh("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{int(rate_bps)}bit",
                   "burst", str(burst), "limit", str(limit))
        self.rate_bps = rate_bps

    def counters(self) -> dict[str, dict[str, int]]:
        """Per shaped interface: its tx bytes, and its qdisc's bytes, drops and overlimits."""
        out = {}
        for ns, dev, name in self.topo.shaped():
            link = json.loads(sh("ip", "-n", ns, "-s", "-j", "link", "show", "dev", dev).stdout)[0]
            c = {"tx_bytes": int(link["stats64"]["tx"]["bytes"])}
            for q in json.loads(sh("tc", "-n", ns, "-s", "-j", "qdisc", "show", "dev", dev).stdout):
                if q.get("kind") == "tbf":
                    c.update(qdisc_bytes=int(q["bytes"]), qdisc_drops=int(q["drops"]),
                             qdisc_overlimits=int(q["overlimits"]))
            out[name] = c
        return out

    def close(self) -> None:
        blocked = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
        old = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        try:
            left = remove_namespaces(our_namespaces(self.topo.tag + "-"))
            if left:
                print(f"netns: could not remove namespaces {left}", file=sys.stderr)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, old)


TBF_BURST = 128 * 1024


def tbf_sizes(rate_bps: float) -> tuple[int, int]:
    """tbf burst and queue limit in bytes.

    Burst: TBF_BURST at every rate. A token bucket passes at most burst + rate x T bytes in any
    interval T, so an exchange can beat the line rate by at most burst / bytes sent (recorded per
    point; 1.9% for the CNN's gradient at 2 ranks). tbf refills from a timer whose softirq runs late
    on this loaded 2-core VM: a 16 KiB bucket throttled TCP to 30% of 1 Gbit/s (measured), so the
    bucket must cover that delay (128 KiB: 10 ms at 0.1 Gbit/s, 1 ms at 1 Gbit/s).
    Limit: 50 ms at the rate, at least 256 KiB (no drops seen)."""
    return TBF_BURST, max(int(rate_bps / 8 * 0.05), 256 * 1024)


def delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    return {k: {f: v - before.get(k, {}).get(f, 0) for f, v in after[k].items()} for k in after}
