"""Where the learner's fixed per-update cost could still go: in-process A/B probes (one rank, one thread).

    python -m benchmarks.floor_probe [--rounds 12] [--cell-seconds 0.4] [--out benchmarks/results/step_time]

Every probe runs in ONE process, the variants interleaved in shuffled rounds, so that a shared machine's
slow spells fall on all of them; each cell is the process's CPU time per call over as many calls as fill
`--cell-seconds` (at one TensorFlow thread the wall time of an undisturbed core). What it times:

* `train b` / `train-xla b`: `Learner.train` at per-rank batch b as the product runs it, and the same
  learner with its fused step compiled by XLA (`jit_compile=True`).
* `fused-only b`: the fused step's compiled call alone on tensors made beforehand (no host work), so
  `train b` minus it is the host's share (the batch into tensors, Python, the read back).
* `optimizer`: the learner's clipping (global norm) + Adam on gradient-shaped tensors, as the product runs it;
  `optimizer-xla`: the same compiled by XLA; its parts `adam` (the fused Adam alone) and `clip` (the global norm
  and the rescaling alone); `grads 1`: the loss's forward and backward pass at batch 1 (no optimizer).
* `shard k`: what one rank of k would run with a sharded optimizer (ZeRO-1): the global norm of its 1/k slice
  of the flat gradient, clipping and one fused Adam on a flat 1/k of the parameters; `flatten`: the gradients
  concatenated into the flat buffer a reduce-scatter takes; `unflatten`: the allgathered flat weights split and
  assigned back into the network's variables. A sharded update's local optimizer work is about
  flatten + shard k + unflatten (the collectives come on top: a reduce-scatter, a scalar allreduce for the
  global norm, an allgather, instead of one allreduce).

Under mpirun with `--collectives` it times instead, on every rank, what the exchange of one update costs as
the product makes it (`allreduce`: Horovod's grouped allreduce of the gradient list) against what a sharded
optimizer would make (`rs+norm+ag`: a reduce-scatter of the flat gradient, a scalar allreduce of its squared
norm, an allgather of the flat slices) and its parts (`rs+ag`, `scalar`), wall time per call, interleaved the
same way, each call timed alone after a barrier (OUT/floor_probe-collectives.json).

Writes OUT/floor_probe.json (every cell) and prints each variant's median CPU time and its ratio to the
baseline per round (median and range).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from measure import harness

OUT = os.path.join(harness.RESULTS, "step_time")
OBS_SHAPE, ACTIONS = (4, 84, 84), 6
SHARDS = (2, 4, 8, 16, 32, 64)
# variant -> the baseline its ratio is taken against
BASELINE = {**{f"train-xla {b}": f"train {b}" for b in (1, 8, 32)},
            **{f"fused-only {b}": f"train {b}" for b in (1, 8, 32)},
            "optimizer-xla": "optimizer", **{f"shard {k}": "optimizer" for k in SHARDS},
            "flatten": "optimizer", "unflatten": "optimizer", "adam": "optimizer", "clip": "optimizer",
            "grads 1": "train 1",
            "rs+ag": "allreduce", "rs+norm+ag": "allreduce", "scalar": "allreduce"}


def probe(rounds: int, cell_s: float, seed: int) -> dict[str, Any]:
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from ba3c import api
    from ba3c.config import Config, LearnConfig
    from ba3c.experience import TrainBatch

    rng = np.random.default_rng(seed)
    cfg = LearnConfig()

    def batch(b: int) -> TrainBatch:
        return TrainBatch(rng.integers(0, 255, (b, *OBS_SHAPE), dtype=np.uint8),
                          rng.integers(0, ACTIONS, b).astype(np.int32),
                          rng.normal(size=b).astype(np.float32), rng.normal(size=b).astype(np.float32))

    def nature():  # -> keras.Model
        return api.network(Config(), OBS_SHAPE, ACTIONS, kind="nature", seed=0)

    base = api.plain_learner(nature(), cfg, 1e-4)
    xla = api.xla_learner(nature(), cfg, 1e-4)
    parts = api.update_parts(base)
    data = {b: batch(b) for b in (1, 8, 32)}
    tensors = {b: tuple(tf.constant(a) for a in base.loss.inputs(data[b])) for b in data}
    variables = base.model.trainable_variables
    grads = [tf.constant(rng.normal(scale=1e-3, size=v.shape).astype(np.float32)) for v in variables]
    opt_xla = tf.function(lambda gs: parts.apply_grads(gs), jit_compile=True)
    n_params = sum(int(np.prod(v.shape)) for v in variables)
    flat_grad = tf.concat([tf.reshape(g, [-1]) for g in grads], 0)

    def shard_fn(k: int) -> Callable[[], Any]:
        n = math.ceil(n_params / k)
        w, m, v = (tf.Variable(tf.zeros([n])) for _ in range(3))
        g = flat_grad[:n]
        b1, b2, eps = (tf.constant(x, tf.float32) for x in (cfg.beta1, cfg.beta2, cfg.adam_eps))
        lr = tf.constant(1e-4)

        @tf.function
        def step(g):
            # the real one adds a scalar allreduce of sq between these two lines
            sq = tf.nn.l2_loss(g)
            norm = tf.sqrt(2.0 * sq)
            g = g * (cfg.clip_norm / tf.maximum(norm, cfg.clip_norm))  # clip_by_global_norm's scaling
            tf.raw_ops.ResourceApplyAdam(var=w.handle, m=m.handle, v=v.handle, beta1_power=b1, beta2_power=b2, lr=lr,
                                         beta1=b1, beta2=b2, epsilon=eps, grad=g)
            return norm

        return lambda: float(step(g))

    flatten = tf.function(lambda gs: tf.concat([tf.reshape(g, [-1]) for g in gs], 0))
    sizes = [int(np.prod(v.shape)) for v in variables]

    @tf.function
    def unflatten(flat):
        for v, part in zip(variables, tf.split(flat, sizes)):
            v.assign(tf.reshape(part, v.shape))
        return flat[0]

    adam = tf.function(lambda gs: (parts.optimizer_step(list(gs)), tf.constant(0.0))[1])
    clip = tf.function(lambda gs: tf.reshape(api.clip_gradients(list(gs), cfg.clip_mode, cfg.clip_norm)[0][0], [-1])[0])
    grads_1 = tf.function(lambda *a: tf.reshape(parts.loss_and_grads(*a)[0][0], [-1])[0])
    weights_flat = tf.concat([tf.reshape(v, [-1]) for v in variables], 0)
    call: dict[str, Callable[[], Any]] = {}
    for b in data:
        call[f"train {b}"] = lambda b=b: base.train(data[b])
        call[f"train-xla {b}"] = lambda b=b: xla.train(data[b])
        call[f"fused-only {b}"] = lambda b=b: parts.fused_for(tensors[b])(*tensors[b]).numpy()
    call["optimizer"] = lambda: float(parts.optimizer(grads))
    call["optimizer-xla"] = lambda: float(opt_xla(grads))
    call["adam"] = lambda: float(adam(grads))
    call["clip"] = lambda: float(clip(grads))
    call["grads 1"] = lambda: float(grads_1(*tensors[1]))
    for k in SHARDS:
        call[f"shard {k}"] = shard_fn(k)
    call["flatten"] = lambda: flatten(grads).numpy()[0]
    call["unflatten"] = lambda: float(unflatten(weights_flat))
    calls: dict[str, int] = {}
    for key, fn in call.items():  # trace (XLA compiles here), then size each cell from the last of a few calls
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            dt = time.perf_counter() - t0
        calls[key] = max(3, min(300, math.ceil(cell_s / max(dt, 1e-6))))
    keys, cells = list(call), []
    load0 = os.getloadavg()[0]
    for r in range(rounds):
        for i in rng.permutation(len(keys)).tolist():
            key = keys[i]
            cpu0, t0 = time.process_time(), time.perf_counter()
            for _ in range(calls[key]):
                call[key]()
            cells.append({"round": r, "variant": key, "calls": calls[key],
                          "cpu_s_per_call": (time.process_time() - cpu0) / calls[key],
                          "wall_s_per_call": (time.perf_counter() - t0) / calls[key]})
        print(f"floor_probe: round {r + 1}/{rounds}", flush=True)
    return {"n_params": n_params, "load_avg": [load0, os.getloadavg()[0]], "cells": cells}


def collectives(rounds: int, cell_s: float, seed: int) -> dict[str, Any]:
    """Under mpirun: the product's exchange against a sharded optimizer's three collectives (wall time per call;
    every rank runs the same variants in the same order)."""
    import numpy as np
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    import horovod.tensorflow as hvd
    from mpi4py import MPI

    from ba3c import api
    from ba3c.config import Config

    comm = MPI.COMM_WORLD
    hvd.init(comm=comm)
    rng = np.random.default_rng(seed)
    variables = api.network(Config(), OBS_SHAPE, ACTIONS, kind="nature", seed=0).trainable_variables
    grads = [tf.constant(rng.normal(scale=1e-3, size=v.shape).astype(np.float32)) for v in variables]

    @tf.function
    def allreduce(gs):
        return tf.reshape(hvd.grouped_allreduce(gs, op=hvd.Average)[0], [-1])[0]

    def sharded(norm: bool):
        @tf.function
        def fn(gs):
            flat = tf.concat([tf.reshape(g, [-1]) for g in gs], 0)
            mine = hvd.reducescatter(flat, op=hvd.Average)
            if norm:
                sq = hvd.allreduce(tf.nn.l2_loss(mine), op=hvd.Sum)
                mine = mine * tf.minimum(1.0, 0.5 / tf.sqrt(2.0 * sq))
            return hvd.allgather(mine)[0]
        return fn

    scalar = tf.function(lambda x: hvd.allreduce(x, op=hvd.Sum))
    one = tf.constant(1.0)
    rs_ag, rs_norm_ag = sharded(False), sharded(True)
    call: dict[str, Callable[[], Any]] = {"allreduce": lambda: float(allreduce(grads)),
                                          "rs+ag": lambda: float(rs_ag(grads)),
                                          "rs+norm+ag": lambda: float(rs_norm_ag(grads)),
                                          "scalar": lambda: float(scalar(one))}
    calls: dict[str, int] = {}
    for key, fn in call.items():
        for _ in range(3):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            dt = comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)
        calls[key] = max(3, min(300, math.ceil(cell_s / max(dt, 1e-6))))
    keys, cells = list(call), []
    for r in range(rounds):
        for i in rng.permutation(len(keys)).tolist():
            key, times = keys[i], []
            for _ in range(calls[key]):  # each call alone, after a barrier: the slowest rank's time is the call's
                comm.Barrier()
                t0 = time.perf_counter()
                call[key]()
                times.append(time.perf_counter() - t0)
            med = comm.allreduce(float(np.median(times)), op=MPI.MAX)
            cells.append({"round": r, "variant": key, "calls": calls[key], "cpu_s_per_call": med,
                          "min_s": comm.allreduce(min(times), op=MPI.MAX)})
    hvd.shutdown()
    return {"ranks": comm.Get_size(), "rank": comm.Get_rank(), "load_avg": os.getloadavg()[0], "cells": cells,
            "note": "cpu_s_per_call holds the median wall time per call here, min_s the fastest call (each the slowest "
                    "rank's)"}


def summarise(cells: list[dict[str, Any]]) -> dict[str, Any]:
    def med(xs: list[float]) -> float:
        s = sorted(xs)
        return 0.5 * (s[(len(s) - 1) // 2] + s[len(s) // 2])

    by: dict[str, dict[int, float]] = {}
    for c in cells:
        by.setdefault(c["variant"], {})[c["round"]] = c["cpu_s_per_call"]
    out = {}
    for key, rs in sorted(by.items()):
        row: dict[str, Any] = {"cpu_s_per_call_median": med(list(rs.values())), "fastest_round_s": min(rs.values()),
                               "rounds": len(rs)}
        base = BASELINE.get(key)
        if base:
            ratios = [rs[r] / by[base][r] for r in rs if r in by[base]]
            row.update({"vs": base, "ratio_median": med(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios)})
        out[key] = row
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=12)
    p.add_argument("--cell-seconds", type=float, default=0.4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=OUT)
    p.add_argument("--collectives", action="store_true", help="under mpirun: time the collectives (see above)")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.cell_seconds <= 0:
        print("floor_probe: --rounds must be at least 1 and --cell-seconds positive", file=sys.stderr)
        return 2
    res = (collectives if args.collectives else probe)(args.rounds, args.cell_seconds, args.seed)
    if res.get("rank", 0) != 0:
        return 0
    summary = summarise(res["cells"])
    unit = "wall ms/call" if args.collectives else "CPU ms/call"
    print(f"\n{'variant':<16} {unit:>11}  ratio to (median, range over rounds)")
    for key, row in summary.items():
        ratio = (f"{row['ratio_median']:.2f} ({row['ratio_min']:.2f}-{row['ratio_max']:.2f}) of {row['vs']}"
                 if "vs" in row else "")
        print(f"{key:<16} {1e3 * row['cpu_s_per_call_median']:>11.2f}  {ratio}; fastest round "
              f"{1e3 * row['fastest_round_s']:.2f}")
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, "floor_probe-collectives.json" if args.collectives else "floor_probe.json")
    with open(path, "w") as fh:
        json.dump({"machine": harness.machine(), "date": harness.now(), "config": vars(args), **res,
                   "summary": summary}, fh, indent=1)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
