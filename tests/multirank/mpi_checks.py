"""Run under `mpirun -np N`: checks of the gradient exchange, written as JSON by every rank.

    mpirun -np 2 python tests/multirank/mpi_checks.py BACKEND OUT_DIR

For every way this backend can exchange (horovod: per-tensor and grouped ops; mpi: per-tensor from
inside the step, or one flat buffer after it; each in float32 and fp16) it records the averaged gradient of one
batch, and for a learner using that exchange the weights after each of 5 updates, next to a reference that
applies, on the same weights, the average of this update's local gradients (exchanged apart).
"""
from __future__ import annotations

import json
import os
import sys

import numpy as np

LR = 1e-2


def main() -> None:
    backend, out_dir = sys.argv[1], sys.argv[2]
    from ba3c import dist as dist_mod
    from ba3c.config import LearnConfig
    from ba3c.experience import TrainBatch
    from ba3c.learner import Learner
    from ba3c.model import build_model

    d = dist_mod.init(backend)
    import tensorflow as tf

    rng = np.random.default_rng(d.rank)

    def batch() -> TrainBatch:
        return TrainBatch(rng.normal(size=(16, 4)).astype(np.float32), rng.integers(0, 2, 16).astype(np.int32),
                          rng.normal(size=16).astype(np.float32), rng.normal(size=16).astype(np.float32))

    def args(b: TrainBatch) -> tuple:
        return tf.constant(b.obs), tf.constant(b.actions), tf.constant(b.returns), tf.constant(b.advantages)

    def flat(tensors) -> np.ndarray:
        return np.concatenate([np.asarray(t).ravel() for t in tensors])

    if backend == "horovod":
        variants = {"per-tensor": dict(allreduce="per-tensor"), "grouped": dict(allreduce="grouped"),
                    "per-tensor-fp16": dict(allreduce="per-tensor", compression="fp16"),
                    "grouped-fp16": dict(allreduce="grouped", compression="fp16")}
    else:  # grouped: one flat buffer on the host after backprop; per-tensor: handed out during backprop
        variants = {"per-tensor": dict(allreduce="per-tensor"), "flat": dict(allreduce="grouped"),
                    "per-tensor-fp16": dict(allreduce="per-tensor", compression="fp16"),
                    "flat-fp16": dict(allreduce="grouped", compression="fp16")}
    out: dict = {"rank": d.rank, "size": d.size, "backend": d.name, "variants": {}}

    # one batch's gradient, averaged every way this backend can (the host buffer path always)
    probe = Learner(build_model("mlp", (4,), 2, seed=123 + d.rank), LearnConfig(), d, lr=LR, warmup_updates=0)
    probe.broadcast_from_root()  # the models differ on purpose until here: the broadcast must fix it
    out["after_broadcast"] = probe.weights_checksum()
    grads, _ = probe._grads(*args(batch()))
    local = flat(g.numpy() for g in grads)
    out["local_grad"] = local.tolist()
    out["mpi_avg"] = dist_mod.MpiDist.average_flat(d, local.copy()).tolist()
    out["mpi_avg_fp16"] = dist_mod.MpiDist.average_flat(d, local.copy(), "fp16").tolist()
    for name, kw in variants.items():
        per_tensor = kw["allreduce"] == "per-tensor"
        if d.averages_in_graph(per_tensor):
            compression = kw.get("compression", "none")
            avg = tf.function(lambda gs, p=per_tensor, c=compression: d.graph_average(gs, p, c))(list(grads))
            out[f"graph_avg_{name}"] = flat(g.numpy() for g in avg).tolist()

    for name, kw in variants.items():
        cfg = LearnConfig(**kw)
        learner = Learner(build_model("mlp", (4,), 2, seed=0), cfg, d, lr=LR, warmup_updates=0)
        ref = Learner(build_model("mlp", (4,), 2, seed=0), cfg, dist_mod.Dist(), lr=LR, warmup_updates=0)
        checksums, deviation, step = [], [], []
        for _ in range(5):
            b = batch()
            # the reference: this batch's gradient on every rank, at the current weights, averaged apart
            g_ref, _ = ref._grads(*args(b))
            avg = dist_mod.MpiDist.average_flat(d, flat(g.numpy() for g in g_ref), cfg.compression)
            shaped, i = [], 0
            for g in g_ref:
                shaped.append(tf.constant(avg[i:i + int(np.prod(g.shape))].reshape(g.shape)))
                i += int(np.prod(g.shape))
            before = flat(ref.model.get_weights())
            ref._apply(shaped)
            ref.updates += 1
            learner.train(b)
            w, w_ref = flat(learner.model.get_weights()), flat(ref.model.get_weights())
            checksums.append(learner.weights_checksum())
            deviation.append(float(np.max(np.abs(w - w_ref))))
            step.append(float(np.max(np.abs(w_ref - before))))
        out["variants"][name] = {"checksums": checksums, "max_abs_deviation_from_reference": deviation,
                                 "max_abs_update": step}
    out["gathered"] = d.gather(d.rank)
    with open(os.path.join(out_dir, f"rank{d.rank}.json"), "w") as fh:
        json.dump(out, fh)
    d.shutdown()


if __name__ == "__main__":
    main()
