"""The real trainer as 8 ranks on a cluster in the box (benchmarks/box_cluster.py): 8 network-namespace nodes
over TCP, each capped at a quarter of a CPU (a cgroup quota: this box's 2 cores shared) with a 1 Gbit/s link
(tc tbf), launched with `mpirun --hostfile`. BA3C_BOX_NODES=4 runs it on 4 nodes at half a CPU each
(`make cluster-test BOX_NODES=4`).

One run directory goes through every case in order, each job resuming from the checkpoint the previous one
left (so a later test also fails when an earlier one left nothing to resume from):
start (identical weights on every rank, checkpoints), SIGTERM to one node's rank (a resume on 4 ranks: every
rank stops, exit 75, a checkpoint), kill -9 of one rank, one node cut from the network (both on every node: the
job ends within the hang timeout with one clear line, every checkpoint verifies), and one node slowed to half
its CPU share (a resume after the cut: the update time printed beside the scaling model's prediction, not
asserted). Run with `make cluster-test`; needs root and `ip netns` (skipped with the reason otherwise).
"""
from __future__ import annotations

import csv
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from ba3c import checkpoint as ckpt
from ba3c.signals import EXIT_SIGNALLED
from benchmarks import box_cluster, netns

pytestmark = [pytest.mark.root, pytest.mark.mpi]

NODES = int(os.environ.get("BA3C_BOX_NODES", "8"))  # 4 or more: the SIGTERM case resumes on 4 ranks of them
RESUME_RANKS = 4
RATE_BPS = 1e9
CPUS_PER_NODE = 2.0 / NODES  # the 2 cores of the machine it was written on, shared by the nodes
HANG_MIN = 1.0  # --hang-timeout-min of the failure jobs
# A bound on a job's start-up and on each wait: a broken job fails here, not a slow one (never asserted as speed)
START_S = 240
TINY = ["--env", "CartPole-v1", "--num-envs", "4", "--predict-batch", "4", "--train-batch", "20", "--dist", "mpi",
        "--intra-op-threads", "1", "--inter-op-threads", "1", "--stats-interval-updates", "5",
        "--log-interval-s", "1", "--checkpoint-interval-min", "0.02"]
ENDLESS = ["--total-frames", "50000000"]


@pytest.fixture(scope="module")
def box(tmp_path_factory):
    why = box_cluster.preflight()
    if why:
        pytest.skip(f"cluster in the box: {why}")
    assert NODES >= RESUME_RANKS, f"BA3C_BOX_NODES={NODES}: at least {RESUME_RANKS} nodes (a case resumes on 4 ranks)"
    with box_cluster.BoxCluster(NODES, RATE_BPS, CPUS_PER_NODE) as c:
        c.run_dir = tmp_path_factory.mktemp("box") / "run"  # the one run every test continues
        yield c
        tag = c.topo.tag
    assert not netns.our_namespaces(tag + "-"), "namespaces left behind"


def _checkpoints(run: Path) -> list[str]:
    return ckpt.list_all(str(run / "checkpoints"))


def _all_verify(run: Path, killed: bool = False) -> ckpt.Checkpoint:
    """Every checkpoint file in the run reads and matches its checksum; returns the newest. A clean exit leaves
    no temporary file; a killed job may (the next checkpoint written removes it: docs/failures.md)."""
    paths = _checkpoints(run)
    assert paths, "no checkpoint"
    for p in paths:
        ckpt.read_verified(p)  # raises on a corrupt or half-written one
    left = [f for f in os.listdir(run / "checkpoints") if ".tmp." in f]
    if killed:
        print(f"temporary files left by the killed job: {left}")
    else:
        assert not left, f"temporary files left: {left}"
    return ckpt.read_verified(paths[-1])


def _same_weights(c: ckpt.Checkpoint, ranks: int = NODES) -> None:
    sums = c.meta.get("rank_weight_checksums")
    assert sums is not None and len(sums) == ranks, c.meta.keys()
    assert len(set(sums)) == 1, f"ranks ended on different weights: {sums}"


def _start(box, name: str, args: list[str], ranks: int = NODES) -> box_cluster.Job:
    return box.start([*TINY, *args], str(box.run_dir.parent / f"{name}.log"), ranks=ranks)


def _wait_for_new_checkpoint(job: box_cluster.Job, run: Path, after: int) -> int:
    """Once training runs: the update of a checkpoint this job wrote (newer than `after`)."""
    deadline = time.monotonic() + START_S
    while True:
        newest = _checkpoints(run)
        if newest:
            u = int(os.path.basename(newest[-1])[5:15])  # ckpt-NNNNNNNNNN.npz
            if u > after:
                return u
        assert job.proc.poll() is None, f"the job ended early:\n{job.output()[-3000:]}"
        assert time.monotonic() < deadline, f"no new checkpoint:\n{job.output()[-3000:]}"
        time.sleep(0.3)


def _one_rank(box, node: int) -> int:
    pids = box.rank_pids(node)
    assert len(pids) == 1, f"node {node}: trainer processes {pids}"
    return pids[0]


def test_start_identical_weights_and_checkpoints(box):
    job = _start(box, "start", ["--total-frames", "4000", "--run-dir", str(box.run_dir)])
    rc = job.wait(START_S)
    out = job.output()
    assert rc == 0, out[-3000:]
    assert f"({NODES} ranks)" in out and f"ranks={NODES}" in out
    c = _all_verify(box.run_dir)
    assert c.meta["world_size"] == NODES and c.meta["frames"] == 4000
    _same_weights(c)
    assert len(_checkpoints(box.run_dir)) >= 2  # periodic ones and the final one


def test_sigterm_to_one_rank_resumed_on_4_ranks(box):
    before = ckpt.read_verified(_checkpoints(box.run_dir)[-1]).meta["updates"]
    # mpirun fills the first 4 nodes, one rank each: node 2 holds rank 2
    job = _start(box, "sigterm", ["--resume", str(box.run_dir), *ENDLESS], ranks=RESUME_RANKS)
    _wait_for_new_checkpoint(job, box.run_dir, before)
    os.kill(_one_rank(box, 2), signal.SIGTERM)
    rc = job.wait(START_S)
    out = job.output()
    assert "resuming from" in out, out[-3000:]
    assert rc == EXIT_SIGNALLED, out[-3000:]
    assert "got SIGTERM: checkpointing at the next sync point" in out
    assert "Traceback" not in out
    c = _all_verify(box.run_dir)
    assert c.meta["updates"] > before and c.meta["world_size"] == RESUME_RANKS
    _same_weights(c, RESUME_RANKS)  # the stop's checkpoint: every rank stopped at the same update, same weights


def _failure_case(box, name: str, hurt) -> str:
    """Resume, wait for a checkpoint, hurt the job; it must end within the hang timeout (plus a margin for
    mpirun's teardown on this loaded box). Returns the output."""
    before = ckpt.read_verified(_checkpoints(box.run_dir)[-1]).meta["updates"]
    job = _start(box, name, ["--resume", str(box.run_dir), *ENDLESS, "--hang-timeout-min", str(HANG_MIN)])
    _wait_for_new_checkpoint(job, box.run_dir, before)
    hurt()
    t0 = time.monotonic()
    rc = job.wait(HANG_MIN * 60 + 60)
    out = job.output()
    assert rc is not None, f"the job did not end within the hang timeout ({HANG_MIN} min + 60 s):\n{out[-3000:]}"
    print(f"\n{name}: the job ended {time.monotonic() - t0:.1f} s after the failure, mpirun exit {rc}")
    assert "Traceback" not in out, out[-3000:]
    # unfinished, as the run directory says (mpirun's own status is 0 when it lost a node: docs/failures.md)
    assert json.loads((box.run_dir / "meta.json").read_text())["end"] is None
    _all_verify(box.run_dir, killed=True)
    return out, rc


def test_kill9_one_rank_ends_job_cleanly(box):
    out, rc = _failure_case(box, "kill9", lambda: os.kill(_one_rank(box, 1), signal.SIGKILL))
    assert rc != 0, out[-3000:]
    # mpirun's line saying why the job ended. It names the rank whose MPI first saw the lost peer's socket
    # close ("process rank 3 ... calling abort") as often as the killed one ("rank 1 ... signal 9"): a race
    # between two nodes' reports (docs/failures.md)
    lines = [ln for ln in out.splitlines() if ln.startswith("prterun") and ("exited" in ln or "noticed" in ln)]
    assert lines, out[-3000:]
    print("kill -9:", lines[0].strip())


def test_node_cut_from_network_ends_job_cleanly(box):
    try:
        out, _ = _failure_case(box, "cut", lambda: box.cut(NODES - 1))
    finally:
        box.reconnect(NODES - 1)  # back for the next job's resume
    # PRRTE's keepalive (box_cluster.KEEPALIVE) notices the silent node before the ranks' watchdog fires
    lines = [ln for ln in out.splitlines() if "Remote daemon" in ln and box.topo.node(NODES - 1) in ln]
    assert "PRTE has lost communication with a remote daemon" in out and lines, out[-3000:]
    print("cut:", lines[0].strip())


def _progress(run: Path) -> tuple[float, int]:
    """progress.csv's newest row: (time_s, updates)."""
    with open(run / "progress.csv") as fh:
        last = list(csv.DictReader(fh))[-1]
    return float(last["time_s"]), int(last["updates"])


def _seconds_per_update(a: tuple[float, int], b: tuple[float, int]) -> float | None:
    return (b[0] - a[0]) / (b[1] - a[1]) if b[1] > a[1] else None


def test_straggler_node_at_half_cpu_share_after_resume(box):
    if box.cpu is None:
        pytest.skip("no cgroup cpu controller here: a node's CPU share cannot be set")
    before = ckpt.read_verified(_checkpoints(box.run_dir)[-1]).meta["updates"]
    job = _start(box, "straggler", ["--resume", str(box.run_dir), *ENDLESS])
    _wait_for_new_checkpoint(job, box.run_dir, before)  # resumed after the cut, and training
    phase_s = 20.0

    def snapshot() -> tuple[float, tuple[float, int], list[float]]:
        return time.monotonic(), _progress(box.run_dir), [box.cpu_seconds(i) for i in range(NODES)]

    def cpus(a, b) -> list[float]:
        return [(cb - ca) / (b[0] - a[0]) for ca, cb in zip(a[2], b[2])]

    time.sleep(10.0)  # past the resume's first updates (tracing, the first checkpoints)
    start = snapshot()
    time.sleep(phase_s)
    equal = snapshot()
    box.set_cpu_share(NODES - 1, CPUS_PER_NODE / 2)
    time.sleep(2.0)  # rows of updates that began before the change
    slowed = snapshot()
    time.sleep(phase_s)
    end = snapshot()
    os.kill(_one_rank(box, 0), signal.SIGTERM)
    rc = job.wait(START_S)
    out = job.output()
    assert rc == EXIT_SIGNALLED, out[-3000:]
    assert "resuming from" in out
    _same_weights(_all_verify(box.run_dir))
    params = int(re.search(r"model=\S+ \(([\d,]+) params\)", out).group(1).replace(",", ""))
    print("\n" + box_cluster.straggler_report(_seconds_per_update(start[1], equal[1]),
                                              _seconds_per_update(slowed[1], end[1]), NODES, 4 * params, RATE_BPS,
                                              2.0, cpus(start, equal), cpus(slowed, end)))
