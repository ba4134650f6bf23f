"""Allreduce cost at one rank count (run under mpirun): Horovod and mpi4py, a sweep of message sizes.

    mpirun -np R python -m benchmarks.allreduce_probe OUT.json [--reps 20]

Rank 0 writes the median seconds per allreduce for each (backend, float32 count), plus the
Nature CNN's gradient list as one grouped allreduce (what the trainer sends every update).
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

SIZES = [1_000, 10_000, 100_000, 1_000_000, 4_000_000]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--backends", default="horovod,mpi")
    args = p.parse_args()
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    backends = args.backends.split(",")
    rows: list[dict] = []

    def timed(fn) -> float:
        fn()  # warm-up (graph tracing, Horovod negotiation cache)
        ts = []
        for _ in range(args.reps):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        return float(comm.allreduce(float(np.median(ts)), op=MPI.MAX))

    if "mpi" in backends:
        for n in SIZES:
            buf = np.ones(n, np.float32)
            rows.append({"backend": "mpi", "floats": n, "bytes": 4 * n,
                         "seconds": timed(lambda buf=buf: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM))})
    if "horovod" in backends:
        import horovod.tensorflow as hvd
        import tensorflow as tf

        hvd.init(comm=comm)
        for n in SIZES:
            t = tf.ones([n], tf.float32)
            f = tf.function(lambda x: hvd.grouped_allreduce([x], op=hvd.Average))
            rows.append({"backend": "horovod", "floats": n, "bytes": 4 * n,
                         "seconds": timed(lambda f=f, t=t: f(t)[0].numpy())})
        from ba3c import api
        from ba3c.config import Config

        model = api.network(Config(), (4, 84, 84), 6, kind="nature")
        grads = [tf.ones_like(v) for v in model.trainable_variables]
        n_model = int(sum(int(np.prod(v.shape)) for v in model.trainable_variables))
        g = tf.function(lambda xs: hvd.grouped_allreduce(xs, op=hvd.Average))
        rows.append({"backend": "horovod", "floats": n_model, "bytes": 4 * n_model, "model_gradients": True,
                     "tensors": len(grads), "seconds": timed(lambda: g(grads)[0].numpy())})
    if rank == 0:
        with open(args.out, "w") as fh:
            json.dump({"ranks": size, "reps": args.reps, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    main()
