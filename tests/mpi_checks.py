"""Run under `mpirun -np N`: checks of the gradient exchange, written as JSON by every rank.

    mpirun -np 2 python tests/mpi_checks.py BACKEND OUT_DIR
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np


def main() -> None:
    backend, out_dir = sys.argv[1], sys.argv[2]
    from ba3c import dist as dist_mod
    from ba3c.config import LearnConfig
    from ba3c.experience import TrainBatch
    from ba3c.learner import Learner
    from ba3c.model import build_model

    d = dist_mod.init(backend)
    import tensorflow as tf

    model = build_model("mlp", (4,), 2, seed=123 + d.rank)  # deliberately different: the broadcast must fix it
    learner = Learner(model, LearnConfig(), d, lr=1e-2, warmup_updates=0)
    learner.broadcast_from_root()
    after_bcast = learner.weights_checksum()

    rng = np.random.default_rng(d.rank)
    def batch() -> TrainBatch:
        return TrainBatch(rng.normal(size=(16, 4)).astype(np.float32), rng.integers(0, 2, 16).astype(np.int32),
                          rng.normal(size=16).astype(np.float32), rng.normal(size=16).astype(np.float32))

    b = batch()
    grads, _ = learner._grads(tf.constant(b.obs), tf.constant(b.actions), tf.constant(b.returns), tf.constant(b.advantages))
    local = np.concatenate([g.numpy().ravel() for g in grads])
    mpi_avg = dist_mod.MpiDist.average_flat(d, local.copy()) if d.size > 1 else local
    graph_avg = None
    if d.graph_allreduce:
        avg = tf.function(lambda gs: d.graph_average(gs))(list(grads))
        graph_avg = np.concatenate([g.numpy().ravel() for g in avg]).tolist()
    checksums = []
    for _ in range(5):
        learner.train(batch())
        checksums.append(learner.weights_checksum())
    with open(os.path.join(out_dir, f"rank{d.rank}.json"), "w") as fh:
        json.dump({"rank": d.rank, "size": d.size, "backend": d.name, "after_broadcast": after_bcast,
                   "local_grad": local.tolist(), "mpi_avg": mpi_avg.tolist(), "graph_avg": graph_avg,
                   "checksums": checksums, "gathered": d.gather(d.rank)}, fh)
    d.shutdown()


if __name__ == "__main__":
    main()
