"""The trainer's gradient exchange and nothing else, timed on every rank (run under mpirun).

    mpirun -np R python -m benchmarks.exchange_probe OUT.json [--backends mpi,horovod] [--floats N]
        [--reps 10]

The calls are the trainer's own (ba3c/dist.py), on a message the size of the Nature CNN's gradient:
* `mpi`: `MpiDist.average_flat` (mpi4py `Allreduce` of one flat float32 buffer, then / ranks);
* `horovod`: `HorovodDist.graph_average` (`hvd.grouped_allreduce(..., op=Average)`) inside a
  `tf.function`, on the Nature CNN's list of gradient tensors (as the compiled train step does).
Each repetition starts after a barrier; its time is the slowest rank's. Each rank also reports its
CPU seconds and the bytes its network interfaces (from /proc/net/dev, so in a network namespace
they are that namespace's) sent and received during the timed repetitions, loopback apart, and
rank 0 and rank 1 time a ping-pong of 8 bytes (the link's one-way latency as MPI sees it).
Rank 0 writes OUT.json. No training, no simulators. Run by benchmarks/box_scaling.py and by the
shaped-links study (studies/shaped_links/).
"""
from __future__ import annotations

import argparse
import json
import socket
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.scaling_model import MODEL_FLOATS


def interface_bytes() -> dict[str, tuple[int, int]]:
    """(received, sent) bytes of every interface this process's network namespace has."""
    out = {}
    with open("/proc/net/dev") as fh:
        for line in fh.readlines()[2:]:
            name, data = line.split(":", 1)
            fields = data.split()
            out[name.strip()] = (int(fields[0]), int(fields[8]))
    return out


def traffic(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]]) -> dict[str, int]:
    """Bytes received and sent between two snapshots: loopback apart from every other interface."""
    d = {"rx_bytes": 0, "tx_bytes": 0, "lo_rx_bytes": 0, "lo_tx_bytes": 0}
    for name, (rx, tx) in after.items():
        rx0, tx0 = before.get(name, (0, 0))
        key = "lo_" if name == "lo" else ""
        d[key + "rx_bytes"] += rx - rx0
        d[key + "tx_bytes"] += tx - tx0
    return d


def timed(comm: Any, fn: Callable[[], Any], reps: int, warmup: int) -> dict[str, Any]:
    """`warmup` untimed calls, then `reps` timed ones; per repetition the slowest rank's seconds (rank 0)."""
    for _ in range(warmup):
        fn()
    comm.Barrier()
    net0, cpu0 = interface_bytes(), time.process_time()
    times = []
    for _ in range(reps):
        comm.Barrier()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    cpu = time.process_time() - cpu0
    comm.Barrier()  # every exchange is complete everywhere: no byte of it is still queued on a link
    net = traffic(net0, interface_bytes())
    all_times = comm.gather(times, root=0)
    ranks = comm.gather({"cpu_s": cpu, **net}, root=0)
    if comm.Get_rank() != 0:
        return {}
    return {"seconds": [float(max(ts)) for ts in zip(*all_times)], "per_rank": ranks}


def ping_pong(comm: Any, reps: int = 200) -> float | None:
    """One-way seconds of an 8-byte message between ranks 0 and 1 (half the median round trip)."""
    rank, buf, rtts = comm.Get_rank(), np.zeros(1, np.float64), []
    comm.Barrier()
    for _ in range(reps + 10):
        t0 = time.perf_counter()
        if rank == 0:
            comm.Send(buf, dest=1)
            comm.Recv(buf, source=1)
        elif rank == 1:
            comm.Recv(buf, source=0)
            comm.Send(buf, dest=0)
        rtts.append(time.perf_counter() - t0)
    comm.Barrier()
    return float(np.median(rtts[10:])) / 2 if rank == 0 else None


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--backends", default="mpi", help="comma list of mpi, horovod")
    p.add_argument("--floats", type=int, default=MODEL_FLOATS,
                   help="message size for `mpi` (default: the Nature CNN's gradient); horovod always sends the CNN's")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--tag", default="", help="ignored: names this run in the process table (for cleanup checks)")
    args = p.parse_args(argv)
    from ba3c import api

    dist = api.mpi_exchange()
    comm = dist.comm
    out: dict[str, Any] = {"ranks": dist.size, "reps": args.reps, "warmup": args.warmup, "backends": {},
                           "hosts": comm.gather(socket.gethostname(), root=0),
                           "interfaces": comm.gather(sorted(interface_bytes()), root=0)}
    out["latency_s"] = ping_pong(comm) if dist.size >= 2 else None
    for backend in args.backends.split(","):
        if backend == "mpi":
            buf = np.ones(args.floats, np.float32)
            res = timed(comm, lambda buf=buf: dist.average_flat(buf), args.reps, args.warmup)
            floats = args.floats
        elif backend == "horovod":
            import tensorflow as tf

            from ba3c.config import Config

            hdist = api.mpi_exchange(horovod=True)
            model = api.network(Config(), (4, 84, 84), 6, kind="nature", seed=0)
            grads = [tf.ones_like(v) for v in model.trainable_variables]
            floats = int(sum(int(np.prod(v.shape)) for v in model.trainable_variables))
            average = tf.function(hdist.graph_average)
            res = timed(comm, lambda average=average, grads=grads: average(grads)[0].numpy(), args.reps, args.warmup)
            if res:
                res["tensors"] = len(grads)
            hdist.shutdown()
        else:
            raise SystemExit(f"exchange_probe: unknown backend '{backend}' (mpi, horovod)")
        if res:
            out["backends"][backend] = {"floats": floats, "bytes": 4 * floats, **res}
    if dist.rank == 0:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
