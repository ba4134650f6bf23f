"""One rank of the exchange benchmark (run under mpirun): the learner's update with each exchange variant.

    mpirun -np R python -m studies.exchange.exchange_step OUT.json [--variants none,grouped,per-tensor]
        [--rounds 3] [--steps 30] [--batch 32] [--inter-op 2]

Every rank builds the Nature CNN and one Learner per variant (the same code the trainer runs),
then, round after round, makes `--steps` updates with each variant in turn on its own fixed
random Pong-shaped batch (one TensorFlow compute thread; `--inter-op` threads launch ops).
Rank 0 writes, per variant and round: the median update time of each rank, the median exposed
exchange time of each rank (StepStats.allreduce_s: waiting for averaged gradients after the
local ones were ready), and the median over updates of the smaller of the ranks' exposed times:
the later rank waits for nobody, so that is the exchange's own exposed cost, without the wait
for a slower rank. `none` is the control: the same processes, updating without any exchange.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

# name -> (backend, LearnConfig fields); `none` exchanges nothing (the control)
VARIANTS: dict[str, tuple[str, dict[str, str]]] = {
    "none": ("none", {}),
    "grouped": ("horovod", {"allreduce": "grouped"}),
    "per-tensor": ("horovod", {"allreduce": "per-tensor"}),
    "grouped-fp16": ("horovod", {"allreduce": "grouped", "compression": "fp16"}),
    "per-tensor-fp16": ("horovod", {"allreduce": "per-tensor", "compression": "fp16"}),
    "mpi": ("mpi", {"allreduce": "grouped"}),  # one flat buffer on the host after backprop
    "mpi-fp16": ("mpi", {"allreduce": "grouped", "compression": "fp16"}),
    "mpi-per-tensor": ("mpi", {"allreduce": "per-tensor"}),  # handed to an exchange thread during backprop
    "mpi-per-tensor-fp16": ("mpi", {"allreduce": "per-tensor", "compression": "fp16"}),
}
KNOB_VARS = ("HOROVOD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD", "HOROVOD_CACHE_CAPACITY", "HOROVOD_TIMELINE")


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--variants", default="none,grouped,per-tensor")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup-steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--inter-op", type=int, default=2)
    args = p.parse_args(argv)
    names = args.variants.split(",")
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise SystemExit(f"exchange_step: unknown variant(s) {unknown}; known: {', '.join(VARIANTS)}")

    from ba3c.workers import set_tensorflow_threads

    set_tensorflow_threads(1, args.inter_op)  # before TensorFlow runs anything
    from ba3c import api
    from ba3c.config import Config, LearnConfig
    from ba3c.experience import TrainBatch

    needs_horovod = any(VARIANTS[n][0] == "horovod" for n in names)
    world = api.mpi_exchange(horovod=needs_horovod)
    dists: dict[str, api.Dist] = {"none": api.single_process(), "horovod": world,
                                  "mpi": api.mpi_exchange() if needs_horovod else world}
    rng = np.random.default_rng(world.rank)
    b = args.batch
    batch = TrainBatch(rng.integers(0, 255, (b, 4, 84, 84), dtype=np.uint8), rng.integers(0, 6, b).astype(np.int32),
                       rng.normal(size=b).astype(np.float32), rng.normal(size=b).astype(np.float32))
    learners = {}
    for n in names:
        backend, fields = VARIANTS[n]
        model = api.network(Config(), (4, 84, 84), 6, kind="nature", seed=0)
        learners[n] = api.plain_learner(model, LearnConfig(**fields), 1e-5, dists[backend])
        for _ in range(args.warmup_steps):  # tracing, Horovod's response cache
            learners[n].train(batch)

    results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for _ in range(args.rounds):
        for n in names:
            world.barrier()
            learner = learners[n]
            learner.train(batch)  # the first update after the previous variant's block is not counted
            step_s, exposed_s = [], []
            for _ in range(args.steps):
                s = learner.train(batch)
                step_s.append(s.train_s)
                exposed_s.append(s.allreduce_s)
            every = world.gather((step_s, exposed_s))
            if world.is_root:
                assert every is not None
                steps = np.array([e[0] for e in every]) * 1e3  # ranks x updates, ms
                exposed = np.array([e[1] for e in every]) * 1e3
                results[n].append({"step_ms": np.median(steps, axis=1).tolist(),
                                   "exposed_ms": np.median(exposed, axis=1).tolist(),
                                   "exposed_min_ms": float(np.median(exposed.min(axis=0)))})
    if world.is_root:
        out = {"ranks": world.size, "inter_op": args.inter_op, "batch": b, "steps": args.steps, "rounds": args.rounds,
               "env": {k: os.environ[k] for k in os.environ if k in KNOB_VARS or k.startswith("OMPI_MCA_")},
               "variants": results}
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=1)
    world.barrier()
    world.shutdown()


if __name__ == "__main__":
    main()
