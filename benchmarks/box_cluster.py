"""The real trainer on a cluster in this box: one rank per network-namespace "node", launched as a user without
SLURM would (`mpirun --hostfile`), each node with its own CPU share and link rate.

The namespaces, veths, bridge and tbf shaping are benchmarks/netns.py's (the same cluster as
studies/shaped_links). Added here:

* **CPU share**: one cgroup per node with a CPU quota (cgroup v2 `cpu.max`, or v1 `cpu.cfs_quota_us` where
  the v1 cpu controller is mounted, as on this machine), changeable while the job runs (`set_cpu_share`: a
  straggler). PRRTE's ssh agent moves itself into its node's group before it starts the node's daemon, so
  the daemon and its ranks are in it. Without a usable cpu controller the shares are not set
  (`cpu_control` is None and says so).
* **Launch**: mpirun runs in the hub namespace with a hostfile naming the nodes (one slot each), starts one
  PRRTE daemon per node through the agent (`ip netns exec NODE`), and the ranks exchange over Open MPI's TCP
  transport on the cluster's subnet only (`--mca btl tcp,self`, no shared memory), as on hosts that share
  nothing but a file system (the run directory is on this box's disk, as a cluster's shared file system).
* **Failures**: `rank_pids(node)` (to signal or kill one node's rank), `cut(node)` (its link down: the
  node is cut from the network), `set_cpu_share(node, cpus)`.

Cleanup: every namespace, process in them, cgroup and the temporary directory are removed when the
`BoxCluster` context exits, however it exits; names carry the builder's process id (`ba3c-sl<pid>-...`), and
`remove_stale()` removes what a SIGKILLed run left (called at every start). Needs root, iproute2 and
`unshare`. No TensorFlow, no MPI imported.
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass

from benchmarks import netns, scaling_model as sm
from measure import harness

# PRRTE's keepalive on the connections between mpirun and each node's daemon: a node cut from the network is
# declared lost after 10 + 3 x 2 s of silence, and mpirun then ends the job. With PRRTE's defaults (300 s + 9 x
# 20 s) that takes 8 minutes, and once the ranks left alive have exited (the watchdog), mpirun's order to the
# lost daemon waits on TCP's retransmissions instead (about 15 minutes): the job hangs that long (seen here).
KEEPALIVE = ["--prtemca", "oob_tcp_keepalive_time", "10", "--prtemca", "oob_tcp_keepalive_intvl", "2",
             "--prtemca", "oob_tcp_keepalive_probes", "3"]
PERIOD_US = 100_000  # the cgroup's CPU period; the quota is cpus x this


@dataclass(frozen=True)
class CpuControl:
    """Where node cgroups are made and which interface sets their quota."""
    root: str
    version: int  # 2: cpu.max; 1: cpu.cfs_quota_us / cpu.cfs_period_us

    def group(self, node: str) -> str:
        return os.path.join(self.root, node)

    def set_share(self, node: str, cpus: float | None) -> None:
        """Cap `node`'s processes at `cpus` CPUs (None: no cap)."""
        g = self.group(node)
        if self.version == 2:
            _write(os.path.join(g, "cpu.max"), "max" if cpus is None else f"{int(cpus * PERIOD_US)} {PERIOD_US}")
        else:
            _write(os.path.join(g, "cpu.cfs_period_us"), str(PERIOD_US))
            _write(os.path.join(g, "cpu.cfs_quota_us"), "-1" if cpus is None else str(int(cpus * PERIOD_US)))


def _write(path: str, text: str) -> None:
    with open(path, "w") as fh:
        fh.write(text)


def cpu_control() -> CpuControl | None:
    """The cgroup interface for CPU quotas on this machine, or None (then node shares cannot be set)."""
    v2 = "/sys/fs/cgroup"
    try:
        with open(os.path.join(v2, "cgroup.controllers")) as fh:
            if "cpu" in fh.read().split():
                # children get the cpu controller only when it is enabled below the root
                _write(os.path.join(v2, "cgroup.subtree_control"), "+cpu")
                return CpuControl(v2, 2)
    except OSError:
        pass
    v1 = "/sys/fs/cgroup/cpu"
    if os.access(os.path.join(v1, "cpu.cfs_quota_us"), os.W_OK):
        return CpuControl(v1, 1)
    return None


def _remove_group(path: str) -> None:
    """End what is left in a node's cgroup, then remove it."""
    for _ in range(50):
        try:
            with open(os.path.join(path, "cgroup.procs")) as fh:
                pids = [int(p) for p in fh.read().split()]
        except OSError:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(path)
            return
        except OSError:
            time.sleep(0.1)
    print(f"box_cluster: could not remove cgroup {path}", file=sys.stderr)


def remove_stale() -> list[str]:
    """Namespaces, temporary directories and cgroups of earlier runs whose process is gone: removed, returned."""
    stale = netns.remove_stale()
    ctl = cpu_control()
    if ctl is not None:
        for d in os.listdir(ctl.root):
            if d.startswith(netns.NAME_PREFIX) and netns._dead_run(d):
                _remove_group(ctl.group(d))
                stale.append(ctl.group(d))
    return stale


# The agent PRRTE starts each node's daemon with: into the node's cgroup (when there is one), then into its
# network namespace with the node's name as host name (netns.AGENT, plus the cgroup). mpirun runs under
# `ip netns exec`, which gives it a fresh /sys without the cgroup mounts, so the agent reaches the groups
# through the builder's root ({cgroot}: /proc/<builder pid>/root/sys/fs/cgroup/...).
AGENT = """#!/bin/sh
ns="$1"; shift
if [ -n "{cgroot}" ] && [ -d "{cgroot}/$ns" ]; then echo $$ > "{cgroot}/$ns/cgroup.procs"; fi
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
"""


class Job:
    """One mpirun of the trainer; its output (every rank's, and mpirun's) goes to `log`."""

    def __init__(self, cmd: list[str], log: str) -> None:
        self.cmd, self.log = cmd, log
        with open(log, "w") as fh:
            self.proc = subprocess.Popen(cmd, cwd=harness.ROOT, env=harness.child_env(), stdout=fh,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.t0 = time.monotonic()

    def output(self) -> str:
        with open(self.log, errors="replace") as fh:
            return fh.read()

    def wait(self, timeout_s: float) -> int | None:
        """The exit status, or None when mpirun was still running after `timeout_s` (it is then killed)."""
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            return None

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def wait_for(self, text: str, timeout_s: float) -> bool:
        """True once `text` is in the output; False when mpirun ended or `timeout_s` passed first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if text in self.output():
                return True
            if self.proc.poll() is not None:
                return text in self.output()
            time.sleep(0.2)
        return False


class BoxCluster:
    """`nodes` namespace nodes, each link at `rate_bps` (None: unshaped) and each node capped at
    `cpus_per_node` CPUs (None: uncapped). A context manager; see the module docstring."""

    def __init__(self, nodes: int, rate_bps: float | None = 1e9, cpus_per_node: float | None = None) -> None:
        self.topo = netns.Topology(f"{netns.NAME_PREFIX}{os.getpid()}", nodes)
        self.rate_bps, self.cpus_per_node = rate_bps, cpus_per_node
        self.cpu = cpu_control() if cpus_per_node is not None else None
        self.net = netns.Cluster(self.topo)
        self.workdir = ""
        self.jobs: list[Job] = []

    def __enter__(self) -> BoxCluster:
        remove_stale()
        try:
            self.net.__enter__()
            self.net.shape(self.rate_bps)
            self.workdir = tempfile.mkdtemp(prefix=f"{self.topo.tag}-")
            for node in self.topo.nodes:
                if self.cpu is not None:
                    os.makedirs(self.cpu.group(node), exist_ok=True)
                    self.cpu.set_share(node, self.cpus_per_node)
            with open(self.agent, "w") as fh:
                fh.write(AGENT.replace("{cgroot}", f"/proc/{os.getpid()}/root{self.cpu.root}" if self.cpu else ""))
            os.chmod(self.agent, 0o755)
            with open(self.hostfile, "w") as fh:
                fh.writelines(f"{n} slots=1\n" for n in self.topo.nodes)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for job in self.jobs:
            job.kill()
        self.net.close()  # ends every process in the namespaces
        if self.cpu is not None:
            for node in self.topo.nodes:
                _remove_group(self.cpu.group(node))
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    @property
    def agent(self) -> str:
        return os.path.join(self.workdir, "agent.sh")

    @property
    def hostfile(self) -> str:
        return os.path.join(self.workdir, "hosts")

    @property
    def nodes(self) -> list[str]:
        return self.topo.nodes

    def mpirun_command(self, args: Sequence[str], ranks: int | None = None,
                       program: Sequence[str] | None = None) -> list[str]:
        """`mpirun --hostfile` of `python -m ba3c.train ARGS` (or of `program ARGS`), one rank per node, run in
        the hub namespace."""
        subnet = f"{netns.SUBNET}.0/24"
        mpirun = ["mpirun", "--hostfile", self.hostfile, "-np", str(ranks or self.topo.ranks), "--map-by", "node",
                  "--bind-to", "none", "--prtemca", "plm_ssh_agent", self.agent,
                  "--prtemca", "oob_tcp_if_include", subnet, *KEEPALIVE, "--mca", "pml", "ob1",
                  "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", subnet,
                  *(program or [sys.executable, "-m", "ba3c.train"]), *args]
        return ["ip", "netns", "exec", self.topo.hub, "unshare", "--uts", "sh", "-c", 'hostname "$0"; exec "$@"',
                self.topo.hub, *mpirun]

    def start(self, args: Sequence[str], log: str, ranks: int | None = None,
              program: Sequence[str] | None = None) -> Job:
        job = Job(self.mpirun_command(args, ranks, program), log)
        self.jobs.append(job)
        return job

    def rank_pids(self, node: int) -> list[int]:
        """The trainer processes running on node `node` (one per rank there)."""
        out = []
        for pid in netns.sh("ip", "netns", "pids", self.topo.node(node), check=False).stdout.split():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    if b"ba3c.train" in fh.read():
                        out.append(int(pid))
            except OSError:
                pass
        return out

    def cut(self, node: int) -> None:
        """Node `node` loses the network: its link goes down (its end of the veth)."""
        netns.sh("ip", "-n", self.topo.node(node), "link", "set", self.topo.node_if(node), "down")

    def reconnect(self, node: int) -> None:
        """Node `node`'s link up again."""
        netns.sh("ip", "-n", self.topo.node(node), "link", "set", self.topo.node_if(node), "up")

    def cpu_seconds(self, node: int) -> float:
        """CPU seconds used so far by the processes now in node `node`'s cgroup (its daemon and ranks)."""
        if self.cpu is None:
            raise RuntimeError("no cgroup cpu controller here: no node cgroups")
        with open(os.path.join(self.cpu.group(self.topo.node(node)), "cgroup.procs")) as fh:
            pids = fh.read().split()
        seconds = [harness.proc_cpu_seconds(int(pid)) for pid in pids]
        return sum(s for s in seconds if not math.isnan(s))  # nan: ended meanwhile

    def set_cpu_share(self, node: int, cpus: float | None) -> None:
        if self.cpu is None:
            raise RuntimeError("no cgroup cpu controller here: node CPU shares cannot be set")
        self.cpu.set_share(self.topo.node(node), cpus)


def emulated_link(rate_bps: float) -> sm.AllreduceFit:
    """The scaling model's view of a node link of `rate_bps`: its usable share of the line rate (its 10GbE
    entry's convention) and its Ethernet latency (nothing is added to this box's links)."""
    ref = sm.NETWORKS["10GbE"]
    return sm.AllreduceFit(0.0, ref.bandwidth_bytes_per_s / 1.25e9 * rate_bps / 8, ref.latency_s)


def straggler_update_s(equal_s: float, ranks: int, nbytes: float, rate_bps: float, slowdown: float) -> float:
    """Modelled seconds per update when one node computes `slowdown` times slower than the others.

    The scaling model's synchronous update is t = t_compute + t_allreduce(r), and every rank waits in the
    exchange for the slowest: t_compute of the slow node. t_compute is taken from the measured update time
    with equal shares (`equal_s`) less the modelled exchange."""
    t_ex = sm.t_allreduce(ranks, nbytes, emulated_link(rate_bps))
    return slowdown * max(equal_s - t_ex, 0.0) + t_ex


def straggler_report(equal_s: float | None, slow_s: float | None, ranks: int, nbytes: float, rate_bps: float,
                     nominal_slowdown: float, cpus_equal: Sequence[float], cpus_slow: Sequence[float]) -> str:
    """The measured update time, equal shares and the last node slowed, beside the modelled one: for the nominal
    slowdown (its cap divided by it) and for the CPU the node actually lost (on a loaded machine a node may use
    less than its cap before the change). Also the CPUs each node used in each phase."""
    use = (f"CPUs used per node: equal shares {', '.join(f'{c:.2f}' for c in cpus_equal)}; "
           f"last slowed {', '.join(f'{c:.2f}' for c in cpus_slow)}")
    if equal_s is None or slow_s is None:
        return f"straggler: too few progress rows to measure (equal {equal_s}, slowed {slow_s}); {use}"
    lost = cpus_equal[-1] / cpus_slow[-1] if cpus_slow[-1] > 0 else float("inf")
    parts = []
    for name, slowdown in ((f"nominal {nominal_slowdown:g}x", nominal_slowdown), (f"as used {lost:.2f}x", lost)):
        pred = straggler_update_s(equal_s, ranks, nbytes, rate_bps, slowdown)
        parts.append(f"{name}: {1e3 * pred:.1f} ms (error {sm.relative_error(pred, slow_s):+.0%})")
    return (f"straggler ({ranks} nodes, the last at 1/{nominal_slowdown:g} of its CPU share): measured "
            f"{1e3 * equal_s:.1f} ms per update with equal shares, {1e3 * slow_s:.1f} ms with the last slowed "
            f"({slow_s / equal_s:.2f}x); modelled, the slow node's compute slowed by the {'; '.join(parts)}; {use}")


def preflight() -> str | None:
    """Why the cluster cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, tc qdiscs, cgroups)"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"needs `{tool}` (iproute2 / util-linux)"
    probe = f"{netns.NAME_PREFIX}{os.getpid()}-probe"
    p = netns.sh("ip", "netns", "add", probe, check=False)
    if p.returncode != 0:
        return f"`ip netns` is not available here ({p.stderr.strip()})"
    netns.sh("ip", "netns", "del", probe, check=False)
    if shutil.which("mpirun", path=harness.child_env()["PATH"]) is None:
        return "needs Open MPI's mpirun"
    return None


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="The cluster in the box's cleanup (the tests build the cluster).")
    p.add_argument("--remove-stale", action="store_true", required=True,
                   help="remove the namespaces, cgroups and temporary directories of runs whose process is gone")
    p.parse_args(argv)
    if os.geteuid() != 0:
        print("box_cluster: needs root; nothing to remove", file=sys.stderr)
        return 0
    for path in remove_stale():
        print(f"box_cluster: removed {path} (left by a run that ended)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
